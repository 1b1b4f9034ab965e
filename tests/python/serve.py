"""One `formwork serve` process for every test module of a run.

Starts the server binary ($FORMWORK_BIN, else target/debug/formwork) on 127.0.0.1 with a free
port, the default model and the test key, once per process (the first module to ask starts it),
and kills it when the process exits. `start()` returns the shared state: `url` (ending in `/v1`,
as the OpenAI SDK wants it), `proc`, and `lines` (the server's stderr, one request per line).
`launch(args)` starts another server with its own flags (the load test's), killed by
`stop(server)` or at exit.
"""

import atexit
import json
import os
import re
import subprocess
import sys
import threading
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KEY = "test-key"
MODEL = "smollm2-135m"
# The names client code written for each API uses: the server answers them with MODEL (any name
# is answered unless the server runs with --strict-model-name), and says MODEL answered.
OPENAI_NAME = "gpt-4o-mini"
ANTHROPIC_NAME = "claude-sonnet-4-5"
SERVER = {}


def start():
    if "url" not in SERVER:
        launch(["--max-tokens-cap", "256"], SERVER)
    return SERVER


def launch(args, server=None):
    """Starts `formwork serve` with the test key and `args`; returns its state (`url`, `proc`,
    `lines`), filling `server` when given."""
    server = {} if server is None else server
    binary = os.environ.get("FORMWORK_BIN") or os.path.join(
        os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "debug", "formwork")
    proc = subprocess.Popen([binary, "serve", "--model", MODEL, "--port", "0", "--api-key", KEY, *args],
                            stderr=subprocess.PIPE, text=True)
    lines = []
    ready = threading.Event()

    def read():
        for line in proc.stderr:
            lines.append(line)
            sys.stderr.write("  [server] " + line)
            m = re.search(r"serving \S+ on (http://\S+)", line)
            if m:
                server["url"] = m.group(1)
                ready.set()
        ready.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    server.update(proc=proc, lines=lines, reader=reader)
    atexit.register(stop, server)
    # The first run may fetch the model (sha256-verified) before it can serve.
    if not ready.wait(600) or "url" not in server:
        stop(server)
        raise RuntimeError("formwork serve did not start:\n" + "".join(lines))
    return server


def stop(server=SERVER):
    proc = server.get("proc")
    if proc and proc.poll() is None:
        proc.kill()
        proc.wait(10)
    if proc and not proc.stderr.closed:
        # The reader sees end of file once the process is gone; then the pipe can close.
        server["reader"].join(5)
        proc.stderr.close()


def raw_post(path, body, headers):
    """POSTs raw bytes to `url` + `path`; returns (status, parsed JSON body)."""
    req = urllib.request.Request(SERVER["url"] + path, data=body, method="POST",
                                 headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())

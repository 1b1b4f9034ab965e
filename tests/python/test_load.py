"""A bounded load test of `formwork serve` through the official `openai` SDK (issue 18, item 7).

64 clients, each its own thread and `openai.OpenAI`, send 3 requests each at the same time to a
server of their own with the default queue flags (issue 42: a burst of 64 must wait, never get a
503; a full queue and a wait over the queue timeout are 503s with Retry-After, tested in Rust):
structured outputs (`parse`), a forced tool call, a streamed structured output, and a schema
shared by every client, in an order that differs per client. Every schema and tool of a
client carries its tag under a `const` / `enum`, so an answer handed to the wrong client fails
validation; each answer is checked against the schema or tool it was asked for (pydantic, extra
fields forbidden), and every request must get its own answer (none lost: 192 distinct ids).
Client code names its model as it would against OpenAI: a placeholder name is answered.

Meanwhile a separate client process starts a stream that cannot finish within its 4000-token
budget and is SIGKILLed after its first content chunk: the server must cancel it (log status
499) and free its slot, or the others would wait behind it for minutes and miss the deadline;
afterwards `GET /health` must show nothing running or queued.

Prints p50/p99 latency per request. Small budgets and SmolLM2-135M keep it to well under a
minute on a quiet 2-core machine; every wait is bounded.
"""

import json
import math
import statistics
import subprocess
import sys
import threading
import time
import unittest
import urllib.request
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Literal

import openai
from pydantic import BaseModel, ConfigDict, Field, create_model

from serve import KEY, MODEL
import serve

CLIENTS = 64
REQUESTS = 3
# The whole load must end by then (a stalled server fails the test instead of hanging it). On a
# quiet 2-core machine it takes about a minute; the bound leaves room for a busy CI machine.
DEADLINE_S = 600
# The killed stream's budget: ~90 s of decoding on this model, if it were never cancelled.
KILLED_BUDGET = 4000
LOAD = {}


def setUpModule():
    # Default flags but the budget cap, which the killed stream's budget needs.
    serve.launch(["--max-tokens-cap", "4096"], LOAD)


def tearDownModule():
    serve.stop(LOAD)


class Shared(BaseModel):
    """One schema every client uses (one grammar, compiled once)."""
    model_config = ConfigDict(extra="forbid")
    color: Literal["red", "green", "blue"]
    ok: bool


def echo_model(tag):
    """A client's own structured output: its tag under `const`, and a small number."""
    return create_model(f"Echo_{tag.replace('-', '_')}", __config__=ConfigDict(extra="forbid"),
                        tag=(Literal[tag], ...), n=(int, Field(ge=0, le=99)))


def record_tool(tag):
    """A client's own tool: its tag as the only value of an `enum`."""
    params = {"type": "object", "additionalProperties": False, "required": ["tag", "count"],
              "properties": {"tag": {"type": "string", "enum": [tag]},
                             "count": {"type": "integer", "minimum": 0, "maximum": 9}}}
    args = create_model(f"Record_{tag.replace('-', '_')}", __config__=ConfigDict(extra="forbid"),
                        tag=(Literal[tag], ...), count=(int, Field(ge=0, le=9)))
    return {"type": "function", "function": {"name": "record", "parameters": params,
                                             "description": "Record a count."}}, args


KINDS = ("parse", "tool", "stream", "shared")


def one_request(cl, tag, i, test):
    """Sends request `i` of client `tag`; checks its answer; returns (id, seconds)."""
    kind = KINDS[(i + int(tag[-2:])) % len(KINDS)]
    messages = [{"role": "user", "content": f"Request {i} from {tag}: give a small number."}]
    kw = dict(model="any-placeholder-name", messages=messages, max_tokens=40)
    start = time.perf_counter()
    if kind == "parse":
        Echo = echo_model(tag)
        c = cl.chat.completions.parse(**kw, response_format=Echo)
        parsed = c.choices[0].message.parsed
        test.assertIsInstance(parsed, Echo)
        Echo.model_validate_json(c.choices[0].message.content, strict=True)
        test.assertEqual(parsed.tag, tag)
    elif kind == "stream":
        Echo = echo_model(tag)
        with cl.chat.completions.stream(**kw, response_format=Echo) as s:
            for _ in s:
                pass
            c = s.get_final_completion()
        test.assertEqual(Echo.model_validate_json(c.choices[0].message.content, strict=True).tag, tag)
    elif kind == "tool":
        tool, Args = record_tool(tag)
        c = cl.chat.completions.create(**kw, tools=[tool], parallel_tool_calls=False,
                                       tool_choice={"type": "function", "function": {"name": "record"}})
        test.assertEqual(c.choices[0].finish_reason, "tool_calls")
        calls = c.choices[0].message.tool_calls
        test.assertEqual(len(calls), 1)
        test.assertEqual(calls[0].function.name, "record")
        test.assertEqual(Args.model_validate_json(calls[0].function.arguments, strict=True).tag, tag)
    else:
        c = cl.chat.completions.parse(**kw, response_format=Shared)
        test.assertIsInstance(c.choices[0].message.parsed, Shared)
        Shared.model_validate_json(c.choices[0].message.content, strict=True)
    test.assertEqual(c.choices[0].finish_reason, "tool_calls" if kind == "tool" else "stop")
    return c.id, time.perf_counter() - start


def run_client(c, test):
    tag = f"client-{c:02d}"
    cl = openai.OpenAI(base_url=LOAD["url"], api_key=KEY, max_retries=0, timeout=DEADLINE_S)
    return [one_request(cl, tag, i, test) for i in range(REQUESTS)]


KILLED_CLIENT = r"""
import sys, time, openai
url, key, model, budget = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
cl = openai.OpenAI(base_url=url, api_key=key, max_retries=0, timeout=600)
# An array of at least 5000 digits cannot be finished in the budget: only cancelling ends it.
schema = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "minItems": 5000}
s = cl.chat.completions.create(
    model=model, max_tokens=budget, stream=True,
    messages=[{"role": "user", "content": "Count."}],
    response_format={"type": "json_schema", "json_schema": {"name": "digits", "schema": schema}})
for chunk in s:
    if chunk.choices and chunk.choices[0].delta.content:
        print("streaming", flush=True)
        break
time.sleep(600)
"""


def health():
    req = urllib.request.Request(LOAD["url"].removesuffix("/v1") + "/health",
                                 headers={"Authorization": f"Bearer {KEY}"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


class Load(unittest.TestCase):
    def test_sixty_four_clients_three_requests_each_and_a_killed_stream(self):
        killed = subprocess.Popen(
            [sys.executable, "-c", KILLED_CLIENT, LOAD["url"], KEY, MODEL, str(KILLED_BUDGET)],
            stdout=subprocess.PIPE, text=True)
        try:
            # Kill the client once its stream is under way, while the others are in flight.
            def kill_when_streaming():
                if killed.stdout.readline().strip() == "streaming":
                    killed.kill()
            killer = threading.Thread(target=kill_when_streaming, daemon=True)
            killer.start()
            start = time.perf_counter()
            with ThreadPoolExecutor(CLIENTS) as pool:
                futures = [pool.submit(run_client, c, self) for c in range(CLIENTS)]
                _, late = wait(futures, timeout=DEADLINE_S)
                self.assertFalse(late, f"{len(late)} clients still busy after {DEADLINE_S} s")
                results = [f.result() for f in futures]
            wall = time.perf_counter() - start
            killer.join(10)
            self.assertIsNotNone(killed.poll(), "the streaming client was never killed")
        finally:
            if killed.poll() is None:
                killed.kill()
            killed.wait(10)
            killed.stdout.close()
        done = [r for client in results for r in client]
        self.assertEqual(len(done), CLIENTS * REQUESTS)
        self.assertEqual(len({rid for rid, _ in done}), CLIENTS * REQUESTS, "ids repeat")
        self.assertLess(wall, DEADLINE_S)
        latencies = sorted(s for _, s in done)
        p99 = latencies[math.ceil(0.99 * len(latencies)) - 1]
        print(f"\nload: {CLIENTS} clients x {REQUESTS} requests in {wall:.1f} s "
              f"({len(done) / wall:.1f} req/s); latency p50 {statistics.median(latencies):.2f} s, "
              f"p99 {p99:.2f} s, max {latencies[-1]:.2f} s", file=sys.stderr)
        # The killed stream was cancelled (logged as 499) and nothing is left decoding.
        deadline = time.time() + 10
        while not any(" 499 " in line for line in LOAD["lines"]):
            if time.time() > deadline:
                self.fail("no 499 line for the killed stream in the server log")
            time.sleep(0.05)
        self.assertEqual(health(), {"status": "ok", "running": 0, "queued": 0})


if __name__ == "__main__":
    unittest.main()

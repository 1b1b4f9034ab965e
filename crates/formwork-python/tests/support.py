"""Shared helpers of the package's tests: the formwork binary, a real model's GGUF file.

The GGUF comes from the project's own fetch (`formwork models fetch`, sha256-verified, into
$FORMWORK_MODELS or the checkout's models/), through the binary `scripts/test` built
($FORMWORK_BIN; else target/debug/formwork of this checkout).
"""

import functools
import json
import os
import pathlib
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[3]
DATA = ROOT.parent / "shared" / "data"
if not DATA.is_dir():
    DATA = pathlib.Path("/work/shared/data")


def formwork_bin() -> str:
    """The formwork binary: $FORMWORK_BIN, else this checkout's debug build."""
    path = os.environ.get("FORMWORK_BIN") or str(ROOT / "target" / "debug" / "formwork")
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"no formwork binary at {path}: run `cargo build` or set FORMWORK_BIN")
    return path


@functools.cache
def gguf_path(model: str = "smollm2-135m") -> str:
    """The verified GGUF file of a registry model, fetched on first use."""
    subprocess.run([formwork_bin(), "models", "fetch", model], check=True, cwd=ROOT)
    out = subprocess.run(
        [formwork_bin(), "models", "list", "--format", "json"],
        check=True, cwd=ROOT, capture_output=True, text=True,
    ).stdout
    for row in json.loads(out):
        if row["name"] == model:
            path = pathlib.Path(row["path"])
            return str(path if path.is_absolute() else (ROOT / path).resolve())
    raise RuntimeError(f"{model} is not in the registry")


def maskbench_sample() -> list[dict]:
    """The 619 MaskBench sample schemas with their instances (read in place)."""
    with open(DATA / "maskbench-sample.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]

"""MaskBench sample through the Python API: formwork vs llguidance 1.9.1 (`LLMatcher`) and
xgrammar 0.2.8 (`GrammarMatcher`), same tokenizer, same tokens, same process. A measurement,
not a test (docs/python.md has the table and the command).

Tokenizer: formwork's `Tokenizer.from_gguf` of the given GGUF; the peers get the very same
tokenizer as `tokenizer.json` (`Tokenizer.to_json()`), loaded through `tokenizers` (llguidance)
and transformers' `PreTrainedTokenizerFast` (xgrammar), vocabulary width and EOS ids passed
explicitly. Per schema of `maskbench-sample.jsonl`, per engine: a fresh compile (xgrammar's
cache disabled; formwork's is keyed by content and the schemas are distinct), then each valid
instance (compact JSON, tokenized canonically by formwork's tokenizer,
the same ids for all engines) is walked from a new matcher of that compiled grammar, a mask
filled into an int32 bitmask row (numpy) before each token, until the instance ends or the
engine refuses a token. Compact whitespace and schema property order for all three (the
peers' only order), so the engines enforce the same language; each engine's statistics are
over its own masks (the counts are printed).

- TTFM: compile + first mask, per schema, as the caller's wall clock sees it.
- mask: one `fill_bitmask`-style call, p50 / p99 / max (µs), every mask of every walk.
- batch: 64 sequences (the first 64 schemas the engine compiled, one walk each) stepped in
  lockstep; one batch fill call per step (formwork.fill_bitmasks; llguidance's
  fill_next_token_bitmask_par with an LLExecutor; xgrammar's BatchGrammarMatcher), p50 / p99 /
  max per step.

    python maskbench.py --gguf SmolLM2-135M-Instruct.Q4_1.gguf [--schemas N] [--batch 64]
"""

import argparse
import json
import os
import sys
import time

import numpy as np

import formwork

# ../shared/data beside the checkout (as CI lays it out), else the workplace's copy.
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
DATA = os.path.join(os.path.dirname(ROOT), "shared", "data")
if not os.path.isdir(DATA):
    DATA = "/work/shared/data"


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def summary(xs):
    us = [x / 1000 for x in xs]
    return f"p50 {pct(us, 0.5):8.1f}  p99 {pct(us, 0.99):8.1f}  max {max(us, default=0):9.1f}"


class Formwork:
    name = "formwork"

    def __init__(self, tok):
        self.tok = tok

    def compile(self, schema):
        return formwork.Grammar.json_schema(schema)

    def matcher(self, g):
        return formwork.Matcher(self.tok, g)

    def fill(self, m, row):
        m.fill_bitmask(row)

    def consume(self, m, t):
        return m.consume_token(t)

    def batch(self, ms, bitmask):
        formwork.fill_bitmasks(bitmask, ms)


class Llguidance:
    name = "llguidance"

    def __init__(self, json_text, vocab_size, eos):
        import llguidance
        import llguidance.numpy

        self.llg = llguidance
        self.np = llguidance.numpy
        # What llguidance.hf.from_tokenizer does with a fast tokenizer's JSON.
        self.tok = llguidance.LLTokenizer(json_text, n_vocab=vocab_size, eos_token=eos)
        self.executor = llguidance.LLExecutor()

    def compile(self, schema):
        g = self.llg.LLMatcher.grammar_from_json_schema(
            json.dumps(schema), defaults={"whitespace_flexible": False}
        )
        is_err, msgs = self.llg.LLMatcher.validate_grammar_with_warnings(g, self.tok)
        if is_err:
            raise ValueError(msgs)
        return g

    def matcher(self, g):
        m = self.llg.LLMatcher(self.tok, g)
        if m.is_error():
            raise ValueError(m.get_error())
        return m

    def fill(self, m, row):
        self.np.fill_next_token_bitmask(m, row.reshape(1, -1), 0)

    def consume(self, m, t):
        return m.consume_token(t)

    def batch(self, ms, bitmask):
        self.np.fill_next_token_bitmask_par(self.executor, [(m, i) for i, m in enumerate(ms)], bitmask)


class Xgrammar:
    name = "xgrammar"

    def __init__(self, json_text, vocab_size, eos):
        import tokenizers
        import torch
        import transformers
        import xgrammar as xgr

        self.xgr, self.torch = xgr, torch
        hf = transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizers.Tokenizer.from_str(json_text))
        info = xgr.TokenizerInfo.from_huggingface(hf, vocab_size=vocab_size, stop_token_ids=eos)
        self.compiler = xgr.GrammarCompiler(info, cache_enabled=False)
        self.batcher = xgr.BatchGrammarMatcher()

    def compile(self, schema):
        return self.compiler.compile_json_schema(
            json.dumps(schema), any_whitespace=False, separators=(",", ":")
        )

    def matcher(self, g):
        return self.xgr.GrammarMatcher(g)

    def fill(self, m, row):
        m.fill_next_token_bitmask(self.torch.from_numpy(row.reshape(1, -1)), 0)

    def consume(self, m, t):
        return m.accept_token(t)

    def batch(self, ms, bitmask):
        self.batcher.batch_fill_next_token_bitmask(ms, self.torch.from_numpy(bitmask))


def run_engine(engine, rows, words):
    ttfm, masks, fails, compiled = [], [], 0, {}
    row = np.zeros(words, dtype=np.int32)
    for r in rows:
        t0 = time.perf_counter_ns()
        try:
            g = engine.compile(r["schema"])
            m = engine.matcher(g)
            engine.fill(m, row)
        except Exception:  # noqa: BLE001 - a refused schema is counted, not fatal
            fails += 1
            continue
        ttfm.append(time.perf_counter_ns() - t0)
        compiled[r["id"]] = g
        for walk in r["walks"]:
            m = engine.matcher(g)
            for t in walk:
                t0 = time.perf_counter_ns()
                engine.fill(m, row)
                masks.append(time.perf_counter_ns() - t0)
                if not row[t // 32] >> (t % 32) & 1 or not engine.consume(m, t):
                    break
    return ttfm, masks, fails, compiled


def run_batch(engine, rows, compiled, words, n):
    chosen = [r for r in rows if r["id"] in compiled and r["walks"]][:n]
    ms = [engine.matcher(compiled[r["id"]]) for r in chosen]
    walks = [r["walks"][0] for r in chosen]
    bitmask = np.zeros((len(ms), words), dtype=np.int32)
    steps = []
    for step in range(max(len(w) for w in walks)):
        t0 = time.perf_counter_ns()
        engine.batch(ms, bitmask)
        steps.append(time.perf_counter_ns() - t0)
        for i, (m, w) in enumerate(zip(ms, walks)):
            if step < len(w) and bitmask[i, w[step] // 32] >> (w[step] % 32) & 1:
                engine.consume(m, w[step])
    return steps, len(ms)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--schemas", type=int, default=0, help="first N schemas (default all)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--engines", default="formwork,llguidance,xgrammar")
    args = ap.parse_args()

    tok = formwork.Tokenizer.from_gguf(args.gguf)
    eos = tok.eos_token_ids
    with open(os.path.join(DATA, "maskbench-sample.jsonl"), encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    if args.schemas:
        rows = rows[: args.schemas]
    for r in rows:
        r["walks"] = [
            tok.encode(json.dumps(t["data"], separators=(",", ":"), ensure_ascii=False))
            for t in r["tests"] if t.get("valid")
        ]
    json_text = tok.to_json()
    makers = {
        "formwork": lambda: Formwork(tok),
        "llguidance": lambda: Llguidance(json_text, tok.vocab_size, eos),
        "xgrammar": lambda: Xgrammar(json_text, tok.vocab_size, eos),
    }
    print(f"# {len(rows)} schemas, vocab {tok.vocab_size}, load {os.getloadavg()[0]:.1f}, "
          f"{os.cpu_count()} cpus, python {sys.version.split()[0]}")
    print(f"{'engine':<11} {'ok':>4} {'masks':>6}  TTFM (µs)                                "
          f"   mask (µs)                                    batch {args.batch} (µs per step)")
    for name in args.engines.split(","):
        engine = makers[name]()
        ttfm, masks, fails, compiled = run_engine(engine, rows, tok.bitmask_words)
        steps, n = run_batch(engine, rows, compiled, tok.bitmask_words, args.batch)
        print(f"{name:<11} {len(ttfm):>4} {len(masks):>6}  {summary(ttfm)}   {summary(masks)}   "
              f"{summary(steps)} ({n} seqs)", flush=True)


if __name__ == "__main__":
    main()

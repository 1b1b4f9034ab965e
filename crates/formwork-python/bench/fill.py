"""One matcher's row filled again and again at the same state: the cost of a cached mask as a
Python caller pays it (the call, the buffer, the engine's cached path, the row write).

    python fill.py --gguf SmolLM2-135M-Instruct.Q4_1.gguf
"""

import argparse
import time

import numpy as np

import formwork


def per_call_us(f, n=20000):
    for _ in range(100):
        f()
    t = time.perf_counter_ns()
    for _ in range(n):
        f()
    return (time.perf_counter_ns() - t) / n / 1000


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf", required=True)
    args = ap.parse_args()
    tok = formwork.Tokenizer.from_gguf(args.gguf)
    schema = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
              "required": ["a", "b"]}
    m = formwork.Matcher(tok, formwork.Grammar.json_schema(schema))
    row = np.zeros(tok.bitmask_words, dtype=np.int32)
    ptr = row.ctypes.data
    print(f"start of the object: fill_bitmask(numpy row) {per_call_us(lambda: m.fill_bitmask(row)):.2f} us, "
          f"fill_bitmask_ptr {per_call_us(lambda: m.fill_bitmask_ptr(ptr, row.nbytes)):.2f} us")
    m.consume_tokens(tok.encode('{"a":"hel'))
    print(f"inside a string:     fill_bitmask(numpy row) {per_call_us(lambda: m.fill_bitmask(row)):.2f} us, "
          f"fill_bitmask_ptr {per_call_us(lambda: m.fill_bitmask_ptr(ptr, row.nbytes)):.2f} us")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Scores free-text GSM8K answers (docs/evals.md, GSM8K): the output of `formwork extract
--regex '(?s:.*)' --input ...` on GSM8K questions, judged by the number in the last \\boxed{}
(else the last number in the text) against the data set's `answer`.

usage: gsm8k_free_text.py ../shared/data/gsm8k/test.jsonl OUTPUT.jsonl
"""
import json
import re
import sys

gold = {}
for line in open(sys.argv[1]):
    d = json.loads(line)
    gold[d["id"]] = d["answer"]
right = total = 0
for line in open(sys.argv[2]):
    r = json.loads(line)
    text = r.get("output") or ""
    boxed = re.findall(r"\\boxed\{([^}]*)\}", text)
    numbers = re.findall(r"-?\d[\d,]*(?:\.\d+)?", boxed[-1] if boxed else text)
    value = float(numbers[-1].replace(",", "")) if numbers else None
    ok = value is not None and abs(value - gold[r["id"]]) < 1e-9
    right += ok
    total += 1
    print(f"{r['id']}\tgold {gold[r['id']]}\tanswer {value}\t{'right' if ok else 'wrong'}\t{r.get('tokens')} tokens")
print(f"{right}/{total} right")

#!/usr/bin/env python3
"""A per-field majority vote over sampled eval runs (docs/evals.md, "A majority vote over
sampled answers"): for each case, each top-level field of the answer takes the value most of the
runs of SAMPLED wrote; a field is kept when more than FRACTION of the votes have it. With
--greedy, that configuration's run 0 is one more vote. Writes replay lines for
`formwork eval SUITE --outputs OUT --config ...` with a configuration named NAME, which judges
the voted answers with the suite's own judges.

usage: vote.py --sampled CONFIG [--greedy CONFIG] [--more-than FRACTION] --name NAME
               --out OUT.jsonl RESULTS.jsonl...
"""
import argparse
import collections
import json

p = argparse.ArgumentParser()
p.add_argument("results", nargs="+")
p.add_argument("--sampled", required=True)
p.add_argument("--greedy")
p.add_argument("--more-than", type=float, default=0.0)
p.add_argument("--name", required=True)
p.add_argument("--out", required=True)
a = p.parse_args()

runs = collections.defaultdict(list)
for path in a.results:
    for line in open(path):
        r = json.loads(line)
        out = r.get("output")
        if not isinstance(out, dict):
            continue
        if r["config"] == a.sampled or (r["config"] == a.greedy and r["run"] == 0):
            runs[r["case"]].append(out)
with open(a.out, "w") as f:
    for case, outs in runs.items():
        counts = collections.Counter(
            (k, json.dumps(v, sort_keys=True)) for o in outs for k, v in o.items()
        )
        best = {}
        for (k, v), n in counts.items():
            if n / len(outs) > a.more_than and (k not in best or n > best[k][1]):
                best[k] = (json.loads(v), n)
        # Keys in the order the answers write them.
        order = list(dict.fromkeys(k for o in outs for k in o))
        voted = {k: best[k][0] for k in order if k in best}
        f.write(json.dumps({"id": case, "config": a.name, "output": json.dumps(voted)}) + "\n")

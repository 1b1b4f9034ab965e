"""The Python API's masks equal the Rust matcher's, bit for bit, along walks of the MaskBench
sample (619 real schemas): every instance of every schema (valid and invalid, compact JSON,
tokenized canonically) is walked token by token through `formwork.Matcher`, each mask filled
into an int32 bitmask row, and its SHA-256 compared with the digest `formwork debug masks`
prints for the same walk from the engine's own `Matcher` and `TokenSet` (src/cli/debug.rs).
Compile errors must agree too. Schemas use `property_order="any"` (instances list keys in any
order), as the MaskBench ratchet does."""

import hashlib
import json
import subprocess
import unittest

import formwork
import numpy as np

from support import formwork_bin, gguf_path, maskbench_sample

OPTIONS = {"property_order": "any"}


def python_walks(tok, schema, walks):
    """What `formwork debug masks` prints for one line, through the Python API."""
    try:
        grammar = formwork.Grammar.json_schema(schema, **OPTIONS)
    except formwork.SchemaError as e:
        return {"error": str(e)}
    row = np.zeros(tok.bitmask_words, dtype=np.int32)
    out = []
    for walk in walks:
        m = formwork.Matcher(tok, grammar)
        digests, refused_at = [], None
        for i in range(len(walk) + 1):
            m.fill_bitmask(row)
            digests.append(hashlib.sha256(row.astype("<i4").tobytes()).hexdigest())
            if i == len(walk):
                break
            t = walk[i]
            if not row[t // 32] >> (t % 32) & 1:
                refused_at = i
                break
            if not m.consume_token(t):
                raise AssertionError(f"token {t} is in the mask but refused: {m.last_refusal}")
        out.append({"digests": digests, "refused_at": refused_at, "accepting": m.is_accepting()})
    return {"walks": out}


class MasksAgreeWithRust(unittest.TestCase):
    def test_maskbench_sample_walks(self):
        tok = formwork.Tokenizer.from_gguf(gguf_path())
        rows = maskbench_sample()
        lines = []
        for row in rows:
            walks = [
                tok.encode(json.dumps(t["data"], separators=(",", ":"), ensure_ascii=False))
                for t in row["tests"]
            ]
            lines.append({"schema": row["schema"], "options": OPTIONS, "walks": walks})
        rust = subprocess.run(
            [formwork_bin(), "debug", "masks", "--gguf", gguf_path()],
            input="".join(json.dumps(line) + "\n" for line in lines),
            capture_output=True, text=True, check=True,
        ).stdout.splitlines()
        self.assertEqual(len(rust), len(rows))
        masks = compiled = 0
        for row, line, want in zip(rows, lines, rust):
            want = json.loads(want)
            got = python_walks(tok, row["schema"], line["walks"])
            self.assertEqual(got, want, row["id"])
            if "walks" in got:
                compiled += 1
                masks += sum(len(w["digests"]) for w in got["walks"])
        # The sample is not trivially refused: most schemas compile and give many masks.
        self.assertGreater(compiled, 550)
        self.assertGreater(masks, 10_000)
        print(f"masks agree: {compiled} schemas, {masks} masks", flush=True)


if __name__ == "__main__":
    unittest.main()

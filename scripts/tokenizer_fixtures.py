#!/usr/bin/env python3
"""Generate the expected token ids in tests/data/tokenizer/*.json from an independent reference.

No model hub is reachable here, so the reference is the tokenizer that Hugging Face
`transformers` builds from a GGUF file (its `integrations.gguf.gguf_tokenizer_mapping`), run by the
Python `tokenizers` library, with two corrections where that conversion is known to differ from the
model's published `tokenizer.json`:

* SmolLM2 (`tokenizer.ggml.pre = smollm`): transformers has no split for it and falls back to the
  GPT-2 regex; the published tokenizer uses `Digits(individual_digits=True)` then `ByteLevel`
  (llama.cpp's `smollm` pre-type splits `\\p{N}` the same way).
* Qwen2 (`qwen2`): the published tokenizer normalizes with NFC before splitting.

Run once, commit the output (the Rust tests read it; they do not run Python):

    python3 -m venv /tmp/fwref
    /tmp/fwref/bin/pip install transformers==5.24.0 tokenizers gguf sentencepiece protobuf
    /tmp/fwref/bin/python scripts/tokenizer_fixtures.py MODELS_DIR

MODELS_DIR holds the fetched files (`formwork models fetch NAME` for each model in
models/registry.json).
"""

import json
import os
import sys

import gguf
from tokenizers import normalizers, pre_tokenizers
import transformers
from transformers.integrations.gguf.gguf_tokenizer_mapping import (
    GGUF_TOKENIZER_MAPPING,
    convert_gguf_tokenizer,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Text cases: every model gets all of them, encoded as plain text (special tokens not parsed).
TEXT_CASES = [
    "Alice",
    " Alice",
    "Hello, world! How are you today?",
    "The quick brown fox jumps over the lazy dog.",
    "don't won't I'm we'll they've she'd it's",
    "12345 + 678 = 13023; pi ~ 3.14159",
    '{"name": "Bob", "age": 42, "tags": ["a", "b"], "ok": true, "x": null}',
    '{\n  "id": 7,\n  "nested": {"k": [1, 2.5e-3, -0.0]}\n}',
    '"\\u00e9\\n\\t\\"quoted\\""',
    "   leading spaces",
    "trailing spaces   ",
    "a  b   c    d\t\te\n\nf\n\n\n\ng",
    "\n",
    " ",
    "  ",
    "\t",
    "\r\n",
    "line one\nline two\r\nline three",
    "        indented code\n    more",
    "def f(x):\n    return x * 2  # comment\n",
    "你好，世界！这是一个测试。",
    "日本語のテキストとカタカナ",
    "한국어 문장입니다",
    "Ünïcödé àçcéñts: naïve café résumé",
    "Привет, мир",
    "👍 emoji 🎉🎉",
    "👨‍👩‍👧‍👦 family, 🏳️‍🌈 flag, 👩🏽‍💻 coder",
    "e\u0301 combining vs \u00e9 precomposed",
    "<|im_start|> as text",
    "<start_of_turn> as text",
    "https://example.com/path?q=1&r=two#frag",
    "snake_case camelCase PascalCase kebab-case SCREAMING_CASE",
    "$$$ ### @@@ !!! ??? ... --- ___",
    "ðŁĺ Ġ Ċ",
    "x",
    "0",
    "",
]

# Special-token cases: encoded with special tokens recognised, per chat template family.
SPECIAL_CASES = {
    "chatml": [
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
        "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\n{\"a\": 1}<|im_end|>",
        "text<|endoftext|>more",
    ],
    "gemma": [
        "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n",
        "<bos><start_of_turn>user\nhi<end_of_turn>",
        "text<eos>more",
    ],
}


def data_dir():
    """$FORMWORK_DATA, else the first existing of ../shared/data (from the checkout) and /work/shared/data."""
    if os.environ.get("FORMWORK_DATA"):
        return os.environ["FORMWORK_DATA"]
    for d in (os.path.join(ROOT, "..", "shared", "data"), "/work/shared/data"):
        if os.path.isdir(d):
            return d
    sys.exit("no data directory: set FORMWORK_DATA")


def corpus_cases():
    """Real text of the kind formwork tokenizes: JSON instances from the MaskBench sample (compact,
    as the matcher feeds them, and pretty-printed), GSM8K questions and SNIPS utterances."""
    d = data_dir()
    cases = []
    with open(os.path.join(d, "maskbench-sample.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    for i, row in enumerate(rows[::25]):
        valid = [t["data"] for t in row["tests"] if t["valid"]]
        if not valid:
            continue
        compact = json.dumps(valid[0], separators=(",", ":"), ensure_ascii=False)[:400]
        cases.append(compact)
        if i % 3 == 0:
            cases.append(json.dumps(valid[0], indent=2, ensure_ascii=False)[:400])
    with open(os.path.join(d, "gsm8k", "test.jsonl")) as f:
        for line in list(f)[:5]:
            cases.append(json.loads(line)["question"])
    with open(os.path.join(d, "snips", "snips_validate.jsonl")) as f:
        for line in list(f)[::100]:
            cases.append(json.loads(line)["text"])
    return cases


def read_tokenizer_dict(path):
    reader = gguf.GGUFReader(path)
    fields = reader.fields

    def value(key):
        field = fields[key]
        if field.types and field.types[0] == gguf.GGUFValueType.ARRAY:
            if field.types[-1] == gguf.GGUFValueType.STRING:
                return [bytes(field.parts[i]).decode("utf-8") for i in field.data]
            return [field.parts[i].tolist()[0] for i in field.data]
        if field.types[0] == gguf.GGUFValueType.STRING:
            return bytes(field.parts[field.data[0]]).decode("utf-8")
        return field.parts[field.data[0]].tolist()[0]

    metadata = {key: value(key) for key in fields if key.startswith(("tokenizer.", "general.architecture"))}
    tokenizer_dict = {
        name: metadata[f"tokenizer.{key}"]
        for key, name in GGUF_TOKENIZER_MAPPING["tokenizer"].items()
        if f"tokenizer.{key}" in metadata
    }
    return metadata["general.architecture"], tokenizer_dict


def build(path):
    arch, tokenizer_dict = read_tokenizer_dict(path)
    tok, _ = convert_gguf_tokenizer(arch, tokenizer_dict)
    pre = tokenizer_dict.get("pre_tokenizer_type")
    if pre == "smollm":
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
            ]
        )
    elif pre == "qwen2":
        tok.normalizer = normalizers.NFC()
    return tok, tokenizer_dict


def dump(out):
    """JSON with one case per line, so a changed id shows as a one-line diff."""
    head = {k: v for k, v in out.items() if k not in ("text", "special")}
    lines = ["{"]
    for k, v in head.items():
        lines.append(f" {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)},")
    for key in ("text", "special"):
        cases = [f"  {json.dumps(c, ensure_ascii=False)}" for c in out[key]]
        comma = "," if key == "text" else ""
        lines.append(f" {json.dumps(key)}: [\n" + ",\n".join(cases) + f"\n ]{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main():
    models_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "models")
    with open(os.path.join(ROOT, "models", "registry.json")) as f:
        registry = json.load(f)
    corpus = corpus_cases()
    for model in registry["models"]:
        path = os.path.join(models_dir, model["file"])
        tok, tdict = build(path)
        family = model["chat_template"]
        out = {
            "model": model["name"],
            "reference": f"transformers {transformers.__version__} GGUF tokenizer conversion, "
            "see scripts/tokenizer_fixtures.py",
            "vocab_len": len(tdict["tokens"]),
            "text": [],
            "special": [],
        }
        # Plain text: special tokens spelled in the text stay text (what `Vocab::tokenize` does).
        tok.encode_special_tokens = True
        for text in TEXT_CASES + corpus:
            enc = tok.encode(text, add_special_tokens=False)
            out["text"].append({"text": text, "ids": enc.ids})
        tok.encode_special_tokens = False
        for text in SPECIAL_CASES.get(family, []):
            enc = tok.encode(text, add_special_tokens=False)
            out["special"].append({"text": text, "ids": enc.ids})
        dest = os.path.join(ROOT, "tests", "data", "tokenizer", f"{model['name']}.json")
        with open(dest, "w") as f:
            f.write(dump(out))
        print(f"wrote {dest}: {len(out['text'])} text cases, {len(out['special'])} special cases")


if __name__ == "__main__":
    main()

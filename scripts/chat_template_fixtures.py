#!/usr/bin/env python3
"""Render each registry model's own chat template (the Jinja `tokenizer.chat_template` stored in its
GGUF file) for a few one-turn conversations, into tests/data/tokenizer/chat_templates.json. The Rust
test checks that the registry's template kind, default system prompt and
`ChatTemplate::render` produce the same prompt text. Models whose file has no template (Gemma 3
270M is a base model) are skipped.

    /tmp/fwref/bin/pip install gguf jinja2
    /tmp/fwref/bin/python scripts/chat_template_fixtures.py [MODELS_DIR]
"""

import json
import os
import sys

import gguf
import jinja2

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CONVERSATIONS = [
    (None, "What is 2+2?"),
    ("You are a JSON extractor.", 'Extract {"name": string} from: Alice went home.'),
    ("Be brief.", "line one\nline two"),
]


def chat_template(path):
    field = gguf.GGUFReader(path).fields.get("tokenizer.chat_template")
    if field is None:
        return None
    return bytes(field.parts[field.data[0]]).decode("utf-8")


def main():
    models_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "models")
    with open(os.path.join(ROOT, "models", "registry.json")) as f:
        registry = json.load(f)
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    out = {}
    for model in registry["models"]:
        source = chat_template(os.path.join(models_dir, model["file"]))
        if source is None:
            print(f"{model['name']}: no chat template in the file, skipped")
            continue
        template = env.from_string(source)
        cases = []
        for system, user in CONVERSATIONS:
            messages = ([{"role": "system", "content": system}] if system else []) + [
                {"role": "user", "content": user}
            ]
            prompt = template.render(messages=messages, add_generation_prompt=True, tools=None)
            cases.append({"system": system, "user": user, "prompt": prompt})
        out[model["name"]] = cases
    dest = os.path.join(ROOT, "tests", "data", "tokenizer", "chat_templates.json")
    with open(dest, "w") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {dest}: {sorted(out)}")


if __name__ == "__main__":
    main()

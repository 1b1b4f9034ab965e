"""A real SGLang engine generating under formwork's masks: needs a CUDA GPU (run by
scripts/gpu-engine-test; this machine has none, see docs/scaling.md).

SmolLM2-135M (the registry's GGUF, saved by transformers as safetensors) generates a batch of
answers under a JSON Schema with `--grammar-backend formwork`; every answer must validate.
"""

import json
import unittest

import formwork.sglang

# SGLang spawns its scheduler processes, which import this module again: register there too.
formwork.sglang.register()

import jsonschema  # noqa: E402
import sglang  # noqa: E402
from fixtures import PROMPTS_CITY, SCHEMA_CITY, hf_model_dir  # noqa: E402


class SglangEngine(unittest.TestCase):
    def test_generation_is_valid(self):
        engine = sglang.Engine(model_path=hf_model_dir(), grammar_backend="formwork",
                               mem_fraction_static=0.3)
        try:
            outputs = engine.generate(PROMPTS_CITY, {"max_new_tokens": 96, "temperature": 0.8,
                                                     "json_schema": json.dumps(SCHEMA_CITY)})
        finally:
            engine.shutdown()
        texts = [o["text"] for o in outputs]
        print(json.dumps(texts, indent=1))
        for text in texts:
            jsonschema.validate(json.loads(text), SCHEMA_CITY)


if __name__ == "__main__":
    unittest.main()

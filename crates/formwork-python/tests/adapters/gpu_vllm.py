"""A real vLLM engine generating under formwork's masks: needs a CUDA GPU (run by
scripts/gpu-engine-test; this machine has none, see docs/scaling.md).

SmolLM2-135M (the registry's GGUF, saved by transformers as safetensors) generates a batch of
answers under a JSON Schema with formwork installed through its `vllm.general_plugins` entry
point (backend "guidance"), without and with n-gram speculative decoding (draft rows and rollback
on vLLM's GPU path). Every answer must validate; the engine core runs in this process so the test
can check that its StructuredOutputManager's backend is formwork's; a schema formwork refuses must
be refused with formwork's message.
"""

import json
import os
import unittest

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"

import jsonschema  # noqa: E402
import vllm  # noqa: E402
from fixtures import PROMPTS_CITY, SCHEMA_CITY, hf_model_dir  # noqa: E402
from vllm.sampling_params import SamplingParams, StructuredOutputsParams  # noqa: E402

import formwork.vllm as fw_vllm  # noqa: E402


class VllmEngine(unittest.TestCase):
    def generate(self, **engine_args):
        llm = vllm.LLM(model=hf_model_dir(), max_model_len=1024, gpu_memory_utilization=0.3,
                       structured_outputs_config={"backend": "guidance"}, **engine_args)
        manager = llm.llm_engine.engine_core.engine_core.structured_output_manager
        params = SamplingParams(max_tokens=96, temperature=0.8, seed=1,
                                structured_outputs=StructuredOutputsParams(json=SCHEMA_CITY))
        texts = [o.outputs[0].text for o in llm.generate(PROMPTS_CITY, params)]
        print(json.dumps(texts, indent=1))
        for text in texts:
            jsonschema.validate(json.loads(text), SCHEMA_CITY)
        self.assertIsInstance(manager.backend, fw_vllm.FormworkBackend)
        refused = SamplingParams(structured_outputs=StructuredOutputsParams(
            json={"type": "object", "properties": {"x": {"$ref": "#/nope"}}}))
        with self.assertRaisesRegex(Exception, "formwork"):
            llm.generate(PROMPTS_CITY[:1], refused)

    def test_generation_is_valid(self):
        self.generate()

    def test_generation_with_ngram_speculative_decoding_is_valid(self):
        self.generate(speculative_config={
            "method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3})


if __name__ == "__main__":
    unittest.main()

"""formwork.vllm driven by vLLM's own structured-output code (the real `vllm` package, 0.33.0).

The plugin's `register()` is installed as vLLM's general plugins are, then requests go the way
vLLM's engine sends them: `SamplingParams.verify` (request validation picks and checks the
backend), `vllm.v1.request.Request`, `StructuredOutputManager.grammar_init` (compiles on vLLM's
thread pool), `grammar_bitmask` (one row per request, one more per speculative draft token: fill,
accept, roll back), `validate_tokens` and `accept_tokens`. Every bitmask row is compared, bit for
bit, with a formwork Matcher's own mask at the same point of the output. The model is SmolLM2-135M
(its tokenizer and config, as transformers reads them from the registry's GGUF file); no engine
runs here (this machine has no GPU: docs/scaling.md).
"""

import json
import time
import unittest

import numpy as np
from fixtures import hf_dir
from vllm.config import (
    DeviceConfig,
    ModelConfig,
    ParallelConfig,
    SchedulerConfig,
    SpeculativeConfig,
    StructuredOutputsConfig,
    VllmConfig,
)
from vllm.exceptions import VLLMValidationError
from vllm.sampling_params import SamplingParams, StructuredOutputsParams
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager

import formwork
import formwork.vllm as fw_vllm

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "tags": {"type": "array", "items": {"enum": ["a", "bc"]}, "maxItems": 3},
    },
    "required": ["name", "tags"],
    "additionalProperties": False,
}
# A valid instance, in the whitespace the grammar allows (vLLM's default allows whitespace).
TEXT = '{"name": "Ada", "tags": ["bc", "a"]}'
MAX_SEQS = 4
DRAFTS = 3


def _config(spec: bool) -> VllmConfig:
    model = ModelConfig(model=hf_dir(), tokenizer=hf_dir(), max_model_len=512)
    parallel = ParallelConfig()
    speculative = (
        SpeculativeConfig(
            method="ngram",
            num_speculative_tokens=DRAFTS,
            prompt_lookup_max=3,
            prompt_lookup_min=1,
            target_model_config=model,
            target_parallel_config=parallel,
        )
        if spec
        else None
    )
    return VllmConfig(
        model_config=model,
        # No accelerator platform here: name the device, vLLM cannot infer one.
        device_config=DeviceConfig(device="cpu"),
        parallel_config=parallel,
        scheduler_config=SchedulerConfig(
            max_num_seqs=MAX_SEQS, max_model_len=512, is_encoder_decoder=False
        ),
        speculative_config=speculative,
        structured_outputs_config=StructuredOutputsConfig(backend="guidance"),
    )


class VllmBackend(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        fw_vllm.register()
        cls.config = _config(spec=True)
        cls.manager = StructuredOutputManager(cls.config)
        cls.tok = cls.manager.tokenizer
        cls.fw_tok = formwork.Tokenizer.from_huggingface(
            cls.tok, vocab_size=cls.config.model_config.get_vocab_size()
        )
        cls.eos = cls.tok.eos_token_id
        cls.ids = cls.tok.encode(TEXT, add_special_tokens=False)
        cls.counter = 0

    @classmethod
    def tearDownClass(cls):
        cls.manager.clear_backend()
        fw_vllm.unregister()

    def request(self, params: StructuredOutputsParams, **sampling) -> Request:
        """A request the way vLLM's front end and engine core build it."""
        sp = SamplingParams(structured_outputs=params, max_tokens=64, **sampling)
        sp.update_from_tokenizer(self.tok)
        sp.verify(self.config.model_config, self.config.speculative_config,
                  self.config.structured_outputs_config, self.tok)
        type(self).counter += 1
        req = Request(f"r{self.counter}", [1, 2, 3], sp, None)
        self.manager.grammar_init(req)
        deadline = time.monotonic() + 60
        while not req.structured_output_request.is_grammar_ready:
            self.assertLess(time.monotonic(), deadline, "grammar compile did not finish")
            time.sleep(0.01)
        grammar = req.structured_output_request.grammar
        self.assertIsInstance(grammar, fw_vllm.FormworkGrammar, repr(grammar))
        return req

    def json_request(self) -> Request:
        return self.request(StructuredOutputsParams(json=json.dumps(SCHEMA)))

    def reference(self, prefix: list[int]) -> np.ndarray:
        """formwork's own mask after `prefix`, as one int32 row."""
        m = formwork.Matcher(self.fw_tok, fw_vllm.grammar_for(
            fw_vllm.StructuredOutputOptions.JSON, json.dumps(SCHEMA)))
        self.assertTrue(m.consume_tokens(prefix))
        row = np.zeros((1, self.fw_tok.bitmask_words), dtype=np.int32)
        m.fill_bitmask(row, 0)
        return row[0]

    def masks(self, req: Request, drafts: list[int] | None = None) -> np.ndarray:
        spec = {req.request_id: drafts} if drafts is not None else {}
        out = self.manager.grammar_bitmask({req.request_id: req}, [req.request_id], spec)
        return out

    @staticmethod
    def allowed(row: np.ndarray, token: int) -> bool:
        return bool((int(row[token >> 5]) >> (token & 31)) & 1)

    def test_the_plugin_makes_formwork_vllms_guidance_backend(self):
        req = self.json_request()
        self.assertIsInstance(self.manager.backend, fw_vllm.FormworkBackend)
        self.assertEqual(self.manager.backend_name, "guidance")
        self.masks(req)
        # One row per sequence and draft position, as wide as the model's vocabulary.
        self.assertEqual(tuple(self.manager._grammar_bitmask.shape),
                         (MAX_SEQS * (1 + DRAFTS), (49152 + 31) // 32))

    def test_masks_follow_the_output_then_eos_terminates(self):
        req = self.json_request()
        grammar = req.structured_output_request.grammar
        for i, tok in enumerate(self.ids):
            rows = self.masks(req)
            self.assertEqual(rows.shape, (1 + DRAFTS, 1536))
            np.testing.assert_array_equal(rows[0], self.reference(self.ids[:i]), f"step {i}")
            self.assertTrue(self.allowed(rows[0], tok), f"step {i}: {tok} not allowed")
            self.assertFalse(self.allowed(rows[0], self.eos), f"step {i}: EOS allowed early")
            self.assertTrue(self.manager.accept_tokens(req, [tok]))
        rows = self.masks(req)
        self.assertTrue(self.allowed(rows[0], self.eos), "EOS refused after a complete value")
        self.assertFalse(grammar.is_terminated())
        self.assertTrue(self.manager.accept_tokens(req, [self.eos]))
        self.assertTrue(grammar.is_terminated())
        # A terminated grammar's row is vLLM's all-ones row.
        self.assertTrue((self.masks(req)[0] == -1).all())

    def test_a_refused_token_is_refused_and_changes_nothing(self):
        req = self.json_request()
        grammar = req.structured_output_request.grammar
        bad = self.tok.encode("x", add_special_tokens=False)[0]
        self.assertFalse(self.allowed(self.masks(req)[0], bad))
        self.assertFalse(self.manager.accept_tokens(req, [bad]))
        self.assertEqual(grammar.num_processed_tokens, 0)
        self.assertTrue(self.manager.accept_tokens(req, self.ids[:2]))
        np.testing.assert_array_equal(self.masks(req)[0], self.reference(self.ids[:2]))

    def test_draft_rows_are_the_masks_after_each_draft_token_and_are_rolled_back(self):
        req = self.json_request()
        grammar = req.structured_output_request.grammar
        self.assertTrue(self.manager.accept_tokens(req, self.ids[:2]))
        drafts = self.ids[2:2 + DRAFTS]
        rows = self.masks(req, drafts)
        for i in range(DRAFTS + 1):
            np.testing.assert_array_equal(rows[i], self.reference(self.ids[:2 + i]), f"row {i}")
        # The drafts were consumed to fill the rows, then rolled back.
        self.assertEqual(grammar.num_processed_tokens, 2)
        np.testing.assert_array_equal(self.masks(req)[0], self.reference(self.ids[:2]))
        # The scheduler's check of proposed drafts: the valid prefix, no advance (EOS inside the
        # value is refused).
        self.assertEqual(self.manager.validate_tokens(req, [drafts[0], drafts[1], self.eos]),
                         drafts[:2])
        self.assertEqual(self.manager.validate_tokens(req, [drafts[0], -1, -1]), drafts[:1])
        self.assertEqual(grammar.num_processed_tokens, 2)

    def test_a_refused_draft_token_repeats_the_last_valid_row(self):
        req = self.json_request()
        grammar = req.structured_output_request.grammar
        bad = self.tok.encode("x", add_special_tokens=False)[0]
        with self.assertLogs("vllm.v1.structured_output", level="ERROR"):
            rows = self.masks(req, [self.ids[0], bad, self.ids[2]])
        np.testing.assert_array_equal(rows[0], self.reference([]))
        after_first = self.reference(self.ids[:1])
        for i in (1, 2, 3):
            np.testing.assert_array_equal(rows[i], after_first, f"row {i}")
        self.assertEqual(grammar.num_processed_tokens, 0)
        np.testing.assert_array_equal(self.masks(req)[0], self.reference([]))

    def test_rollback_over_eos_in_a_draft(self):
        req = self.json_request()
        grammar = req.structured_output_request.grammar
        self.assertTrue(self.manager.accept_tokens(req, self.ids[:-1]))
        with self.assertLogs("vllm.v1.structured_output", level="ERROR"):
            # The last token, EOS, then one more: the grammar terminates on EOS, so vLLM logs the
            # third draft as refused; all three rows after EOS repeat the EOS row.
            rows = self.masks(req, [self.ids[-1], self.eos, self.ids[0]])
        np.testing.assert_array_equal(rows[0], self.reference(self.ids[:-1]))
        self.assertTrue(self.allowed(rows[1], self.eos))
        self.assertFalse(grammar.is_terminated())
        self.assertEqual(grammar.num_processed_tokens, len(self.ids) - 1)
        self.assertEqual(self.manager.validate_tokens(req, [self.ids[-1], self.eos, self.ids[0]]),
                         [self.ids[-1], self.eos])

    def test_request_stop_tokens_end_the_output_where_eos_would(self):
        stop = self.tok.encode("\n", add_special_tokens=False)[0]
        req = self.request(StructuredOutputsParams(regex="[0-9]{2,3}"), stop_token_ids=[stop])
        grammar = req.structured_output_request.grammar
        digits = self.tok.encode("4", add_special_tokens=False)
        self.assertTrue(self.manager.accept_tokens(req, digits))
        self.assertFalse(self.allowed(self.masks(req)[0], stop), "stop token before a match")
        self.assertTrue(self.manager.accept_tokens(req, digits))
        row = self.masks(req)[0]
        self.assertTrue(self.allowed(row, stop) and self.allowed(row, self.eos))
        self.assertEqual(self.manager.validate_tokens(req, [stop, digits[0]]), [stop])
        self.assertTrue(self.manager.accept_tokens(req, [stop]))
        self.assertTrue(grammar.is_terminated())
        grammar.rollback(1)
        self.assertFalse(grammar.is_terminated())
        self.assertEqual(grammar.num_processed_tokens, 2 * len(digits))

    def test_every_request_kind_vllm_sends(self):
        cases = [
            (StructuredOutputsParams(json_object=True), '{"a": [1, 2]}'),
            (StructuredOutputsParams(regex=r"[a-z]+@[a-z]+\.com"), "ada@example.com"),
            (StructuredOutputsParams(choice=["yes", "no", "maybe"]), "maybe"),
            (StructuredOutputsParams(grammar='root ::= "(" [0-9]+ ")"'), "(42)"),
        ]
        for params, text in cases:
            with self.subTest(params=params):
                req = self.request(params)
                ids = self.tok.encode(text, add_special_tokens=False)
                for tok in ids:
                    self.assertTrue(self.allowed(self.masks(req)[0], tok), text)
                    self.assertTrue(self.manager.accept_tokens(req, [tok]))
                self.assertTrue(self.allowed(self.masks(req)[0], self.eos), text)

    def test_auto_mode_falls_back_to_formwork_where_xgrammar_refuses(self):
        # vLLM's "auto" tries xgrammar, which refuses multipleOf, then the guidance slot unless
        # has_guidance_unsupported_json_features sends the schema to outlines, which vLLM's own
        # version does for any patternProperties (llguidance lacks them); formwork has them.
        schema = {"type": "object", "patternProperties": {"^x": {"type": "integer", "multipleOf": 5}}}

        def backend():
            sp = SamplingParams(structured_outputs=StructuredOutputsParams(json=schema))
            sp.verify(self.config.model_config, self.config.speculative_config,
                      StructuredOutputsConfig(backend="auto"), self.tok)
            return sp.structured_outputs._backend

        self.assertEqual(backend(), "guidance")
        fw_vllm.unregister()
        try:
            self.assertEqual(backend(), "outlines")
        finally:
            fw_vllm.register()

    def test_requests_formwork_cannot_serve_are_refused_at_validation(self):
        refused = [
            (StructuredOutputsParams(structural_tag=json.dumps(
                {"structures": [{"begin": "<a>", "schema": {}, "end": "</a>"}],
                 "triggers": ["<a>"]})), "structural_tag"),
            (StructuredOutputsParams(grammar='start: "a"'), "Lark"),
            (StructuredOutputsParams(json={"type": "object", "properties": {
                "x": {"type": "string", "format": "email", "pattern": "(?=a)"}}}), "/properties/x"),
        ]
        for params, needle in refused:
            with self.subTest(needle=needle):
                sp = SamplingParams(structured_outputs=params)
                with self.assertRaises(VLLMValidationError) as e:
                    sp.verify(self.config.model_config, self.config.speculative_config,
                              self.config.structured_outputs_config, self.tok)
                self.assertIn("formwork", str(e.exception))
                self.assertIn(needle, str(e.exception))


if __name__ == "__main__":
    unittest.main()

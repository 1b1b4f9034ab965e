"""formwork.sglang against the real `sglang` package (0.5.23), as far as it runs without a GPU.

`register()` puts formwork in SGLang's grammar-backend registry and `--grammar-backend` choices;
SGLang's own `create_grammar_backend` (with the runtime context a scheduler has, built from real
ServerArgs) then makes the backend, its `get_cached_or_future_value` compiles requests on its
thread pool and hands out cache copies, the sampling step's batched fill and `GrammarMask.apply`
mask logits, and the speculative-decoding tree walk (`traverse_tree`: accept, fill, roll back per
draft node) fills draft rows. Rows are compared bit for bit with formwork's own Matcher.
"""

import json
import unittest

import torch
from fixtures import hf_dir
from sglang.srt import runtime_context
from sglang.srt.arg_groups.choices import GRAMMAR_BACKEND_CHOICES
from sglang.srt.constrained import base_grammar_backend as sgl
from sglang.srt.server_args import ServerArgs
from sglang.srt.speculative.spec_utils import traverse_tree
from sglang.srt.utils.hf_transformers.tokenizer import get_tokenizer

import formwork
import formwork.sglang as fw_sglang

SCHEMA = {
    "type": "object",
    "properties": {"id": {"type": "integer", "minimum": 0}, "ok": {"type": "boolean"}},
    "required": ["id", "ok"],
    "additionalProperties": False,
}
TEXT = '{"id": 42, "ok": true}'


class SglangBackend(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        fw_sglang.register()
        cls.server_args = ServerArgs(model_path=hf_dir(), grammar_backend="formwork", device="cpu")
        runtime_context.get_context().set_server_args(cls.server_args)
        cls.tok = get_tokenizer(hf_dir())
        cls.vocab = 49152
        cls.eos = cls.tok.eos_token_id
        cls.backend = sgl.create_grammar_backend(cls.server_args, cls.tok, cls.vocab, {cls.eos})
        cls.fw_tok = formwork.Tokenizer.from_huggingface(cls.tok, vocab_size=cls.vocab,
                                                         eos_token_ids=[cls.eos])
        cls.ids = cls.tok.encode(TEXT, add_special_tokens=False)

    def grammar(self, key):
        value, cached = self.backend.get_cached_or_future_value(key, require_reasoning=False)
        if not cached:
            value = value.result(timeout=120)
            if isinstance(value, fw_sglang.FormworkGrammar):
                self.backend.set_cache(key, value.copy())
        return value

    def json_grammar(self):
        g = self.grammar(("json", json.dumps(SCHEMA)))
        self.assertIsInstance(g, fw_sglang.FormworkGrammar, repr(g))
        return g

    def reference(self, prefix):
        m = formwork.Matcher(self.fw_tok, formwork.Grammar.json_schema(
            SCHEMA, flexible_whitespace=fw_sglang.WHITESPACE_RUN))
        self.assertTrue(m.consume_tokens(prefix))
        row = torch.zeros((1, self.fw_tok.bitmask_words), dtype=torch.int32)
        m.fill_bitmask(row, 0)
        return row[0]

    @staticmethod
    def allowed(row, token):
        return bool((int(row[token >> 5]) >> (token & 31)) & 1)

    def test_registered_under_its_name_and_made_by_sglang(self):
        self.assertIn("formwork", GRAMMAR_BACKEND_CHOICES)
        self.assertIs(sgl.GRAMMAR_BACKEND_REGISTRY["formwork"], fw_sglang.create_backend)
        self.assertIsInstance(self.backend, fw_sglang.FormworkGrammarBackend)
        # SGLang's default allows whitespace: bounded runs.
        self.assertEqual(self.backend.json_options, {"flexible_whitespace": fw_sglang.WHITESPACE_RUN})
        fw_sglang.register()  # idempotent
        self.assertEqual(GRAMMAR_BACKEND_CHOICES.count("formwork"), 1)

    def test_batched_rows_and_logit_masking_follow_the_output(self):
        a, b = self.json_grammar(), self.json_grammar()
        self.assertIsNot(a.matcher, b.matcher, "cache entries must be handed out as copies")
        mask = a.allocate_vocab_mask(self.vocab, 3, "cpu")
        self.assertEqual(tuple(mask.shape), (3, 1536))
        b.accept_token(self.ids[0])
        # As SamplingBatchInfo.update_regex_vocab_mask does: rows of live grammars only.
        a.fill_vocab_mask_batched([sgl.GrammarRow(0, a), sgl.GrammarRow(2, b)], mask)
        torch.testing.assert_close(mask[0], self.reference([]))
        self.assertTrue((mask[1] == -1).all(), "an unlisted row stays unconstrained")
        torch.testing.assert_close(mask[2], self.reference(self.ids[:1]))
        logits = torch.zeros((3, self.vocab))
        sgl.GrammarMask(a, a.move_vocab_mask(mask, "cpu")).apply(logits)
        self.assertEqual(torch.isfinite(logits[0]).nonzero().flatten().tolist(),
                         [t for t in range(self.vocab) if self.allowed(mask[0], t)])
        self.assertTrue(torch.isfinite(logits[1]).all())
        self.assertEqual(logits[2, self.ids[1]].item(), 0.0)
        a.reset_vocab_mask(mask)
        self.assertTrue((mask == -1).all())

    def test_a_whole_output_then_eos(self):
        g = self.json_grammar()
        row = g.allocate_vocab_mask(self.vocab, 1, "cpu")
        for i, tok in enumerate(self.ids):
            g.fill_vocab_mask(row, 0)
            torch.testing.assert_close(row[0], self.reference(self.ids[:i]))
            self.assertFalse(self.allowed(row[0], self.eos))
            g.accept_token(tok)
        g.fill_vocab_mask(row, 0)
        self.assertTrue(self.allowed(row[0], self.eos))
        g.accept_token(self.eos)
        self.assertTrue(g.is_terminated())
        g.rollback(1)
        self.assertFalse(g.is_terminated())

    def test_a_refused_token_raises_what_sglang_catches(self):
        g = self.json_grammar()
        bad = self.tok.encode("x", add_special_tokens=False)[0]
        with self.assertRaisesRegex(ValueError, f"refused token {bad}"):
            g.accept_token(bad)
        g.accept_token(self.ids[0])  # the state did not move

    def test_speculative_tree_rows(self):
        g = self.json_grammar()
        g.accept_token(self.ids[0])
        bad = self.tok.encode("x", add_special_tokens=False)[0]
        # Node 0 is the verified token; 1 -> 2 -> 3 a chain of drafts, 4 a sibling of 1 that the
        # grammar refuses, 5 a child of 2 (sibling of 3).
        draft = torch.tensor([self.ids[0], self.ids[1], self.ids[2], self.ids[3], bad, bad])
        nxt = torch.tensor([1, 2, 3, -1, -1, -1])
        sib = torch.tensor([-1, 4, -1, 5, -1, -1])
        rows = g.allocate_vocab_mask(self.vocab, len(draft), "cpu")
        traverse_tree(nxt, sib, draft, g, rows, vocab_size=self.vocab)
        for node, prefix in [(0, 1), (1, 2), (2, 3), (3, 4)]:
            torch.testing.assert_close(rows[node], self.reference(self.ids[:prefix]), msg=f"node {node}")
        self.assertTrue((rows[4] == -1).all() and (rows[5] == -1).all(), "refused nodes unfilled")
        # Every draft was rolled back.
        g.fill_vocab_mask(rows, 0)
        torch.testing.assert_close(rows[0], self.reference(self.ids[:1]))

    def test_other_kinds_and_refusals(self):
        for key, text in [(("regex", "[0-9]{3}-[a-z]+"), "123-abc"),
                          (("ebnf", 'root ::= "<" [a-z]+ ">"'), "<tag>"),
                          (("json", "$$ANY$$"), "[1, {\"a\": null}]")]:
            with self.subTest(key=key):
                g = self.grammar(key)
                self.assertIsInstance(g, fw_sglang.FormworkGrammar, repr(g))
                for tok in self.tok.encode(text, add_special_tokens=False):
                    g.accept_token(tok)
                self.assertTrue(g.matcher.is_accepting())
        for key, needle in [(("structural_tag", "{}"), "structural tags"),
                            (("ebnf", "root ::= undefined_rule"), "undefined_rule"),
                            (("json", '{"type": "object", "properties": {"x": {"$ref": "#/nope"}}}'),
                             "/properties/x")]:
            with self.subTest(key=key):
                g = self.grammar(key)
                self.assertIsInstance(g, sgl.InvalidGrammarObject)
                self.assertIn("formwork", g.error_message)
                self.assertIn(needle, g.error_message)


if __name__ == "__main__":
    unittest.main()

"""The core API of the `formwork` package on a real tokenizer (SmolLM2's GGUF): tokenizers,
grammars and their errors, matchers (consume, refuse, validate, rollback, EOS, fork, forced
tokens), the bitmask layout in every kind of buffer, and the batch and draft fills."""

import array
import os
import subprocess
import sys
import tempfile
import threading
import unittest

import formwork
import numpy as np

from support import gguf_path

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
PERSON_TEXT = '{"name":"Ada","age":36}'


def bits(row) -> list[int]:
    """The token ids set in one int32 bitmask row."""
    row = np.asarray(row, dtype=np.int32).view(np.uint32)
    return [w * 32 + b for w in range(len(row)) for b in range(32) if row[w] >> b & 1]


class Fixture(unittest.TestCase):
    tok: formwork.Tokenizer

    @classmethod
    def setUpClass(cls):
        cls.tok = formwork.Tokenizer.from_gguf(gguf_path())
        cls.person = formwork.Grammar.json_schema(PERSON)

    def matcher(self, grammar=None):
        return formwork.Matcher(self.tok, grammar or self.person)

    def row(self, m) -> np.ndarray:
        out = np.zeros(self.tok.bitmask_words, dtype=np.int32)
        m.fill_bitmask(out)
        return out


class TokenizerTest(Fixture):
    def test_gguf_vocabulary_and_eos(self):
        tok = self.tok
        self.assertEqual(tok.vocab_size, 49152)
        self.assertEqual(tok.tokenizer_size, 49152)
        self.assertEqual(tok.bitmask_words, 1536)
        # SmolLM2's file names <|im_end|> (2); <|endoftext|> (0) is a common end token.
        self.assertEqual(sorted(tok.eos_token_ids), [0, 2])
        self.assertEqual(tok.token_bytes(2), b"<|im_end|>")
        self.assertTrue(tok.is_special(2))
        ids = tok.encode(PERSON_TEXT)
        self.assertEqual(tok.decode_bytes(ids), PERSON_TEXT.encode())
        self.assertIn("vocab_size=49152", repr(tok))

    def test_vocab_size_pads_and_padding_is_never_allowed(self):
        wide = formwork.Tokenizer.from_gguf(gguf_path(), vocab_size=49152 + 100)
        self.assertEqual((wide.vocab_size, wide.tokenizer_size), (49252, 49152))
        self.assertEqual(wide.bitmask_words, (49252 + 31) // 32)
        self.assertTrue(wide.is_special(49200))
        m = formwork.Matcher(wide, formwork.Grammar.regex(r"[a-z ]*"))
        row = np.zeros(wide.bitmask_words, dtype=np.int32)
        m.fill_bitmask(row)
        allowed = bits(row)
        self.assertTrue(allowed and max(allowed) < 49152, max(allowed))
        # Accepting: the EOS ids, but still no padding id.
        self.assertIn(2, allowed)
        with self.assertRaisesRegex(formwork.TokenizerError, "smaller than the tokenizer"):
            formwork.Tokenizer.from_gguf(gguf_path(), vocab_size=1000)
        with self.assertRaisesRegex(formwork.TokenizerError, "outside the vocabulary"):
            formwork.Tokenizer.from_gguf(gguf_path(), eos_token_ids=[49152])

    def test_tokenizer_json_and_huggingface_give_the_same_masks(self):
        import tokenizers

        text = self.tok.to_json()
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "tokenizer.json")
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            from_file = formwork.Tokenizer.from_tokenizer_json(path)
        hf = tokenizers.Tokenizer.from_str(text)
        from_hf = formwork.Tokenizer.from_huggingface(hf, eos_token_ids=[2])
        self.assertEqual(sorted(from_file.eos_token_ids), [0, 2])
        self.assertEqual(from_hf.eos_token_ids, [2])
        for tok in (from_file, from_hf):
            self.assertEqual(tok.vocab_size, self.tok.vocab_size)
            self.assertEqual(tok.encode(PERSON_TEXT), self.tok.encode(PERSON_TEXT))
            ms = [formwork.Matcher(t, self.person) for t in (self.tok, tok)]
            for t in self.tok.encode(PERSON_TEXT):
                a, b = (m.allowed_tokens() for m in ms)
                self.assertEqual(set(a) - {0}, set(b) - {0})
                self.assertTrue(all(m.consume_token(t) for m in ms))

    def test_bad_tokenizer_inputs(self):
        with self.assertRaisesRegex(formwork.TokenizerError, "no-such.gguf"):
            formwork.Tokenizer.from_gguf("/nonexistent/no-such.gguf")
        with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
            f.write('{"not": "a tokenizer"}')
            f.flush()
            with self.assertRaises(formwork.TokenizerError):
                formwork.Tokenizer.from_tokenizer_json(f.name)
        with self.assertRaises(TypeError):
            formwork.Tokenizer.from_huggingface(object())

    def test_core_import_needs_neither_numpy_nor_torch(self):
        code = (
            "import sys, formwork\n"
            "tok = formwork.Tokenizer.from_gguf(sys.argv[1])\n"
            "m = formwork.Matcher(tok, formwork.Grammar.choice(['yes', 'no']))\n"
            "buf = bytearray(4 * tok.bitmask_words)\n"
            "m.fill_bitmask(buf)\n"
            "assert not {'numpy', 'torch'} & set(sys.modules), sys.modules.keys()\n"
            "print(sum(bin(b).count('1') for b in buf))\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", code, gguf_path()], capture_output=True, text=True
        )
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertGreater(int(out.stdout), 0)


class GrammarTest(Fixture):
    def test_unenforceable_schema_names_keyword_and_pointer(self):
        schema = {"properties": {"tags": {"type": "array", "uniqueItems": True}}}
        with self.assertRaises(formwork.SchemaError) as cm:
            formwork.Grammar.json_schema(schema)
        e = cm.exception
        self.assertEqual((e.keyword, e.pointer), ("uniqueItems", "/properties/tags"))
        self.assertEqual(e.category, "unsupported:uniqueItems")
        self.assertIn("/properties/tags", str(e))
        self.assertIsInstance(e, formwork.FormworkError)

    def test_lenient_reports_what_it_dropped(self):
        schema = {"type": "object", "unevaluatedProperties": False}
        g = formwork.Grammar.json_schema(schema, lenient=True)
        self.assertEqual(len(g.warnings), 1)
        w = g.warnings[0]
        self.assertEqual((w["keyword"], w["pointer"]), ("unevaluatedProperties", "/unevaluatedProperties"))
        self.assertIn("unsupported keyword", w["message"])
        self.assertEqual(formwork.Grammar.json_schema(PERSON).warnings, [])

    def test_options(self):
        # Schema order (default) refuses age first; any order accepts it.
        swapped = self.tok.encode('{"age":36,"name":"Ada"}')
        self.assertFalse(self.matcher().consume_tokens(swapped))
        anyorder = formwork.Grammar.json_schema(PERSON, property_order="any")
        self.assertTrue(self.matcher(anyorder).consume_tokens(swapped))
        window = formwork.Grammar.json_schema(PERSON, property_window=2)
        self.assertTrue(self.matcher(window).consume_tokens(swapped))
        spaced = self.tok.encode('{ "name": "Ada", "age": 36 }')
        self.assertFalse(self.matcher().consume_tokens(spaced))
        flexible = formwork.Grammar.json_schema(PERSON, flexible_whitespace=2)
        self.assertTrue(self.matcher(flexible).consume_tokens(spaced))
        strict = formwork.Grammar.json_schema(
            {"type": "object", "properties": {"a": {"type": "integer"}}}, strict=True
        )
        m = self.matcher(strict)
        self.assertTrue(m.consume_tokens(self.tok.encode("{")))
        self.assertEqual(m.forced_bytes(), b'"a":')
        with self.assertRaisesRegex(TypeError, "lenientt"):
            formwork.Grammar.json_schema(PERSON, lenientt=True)
        with self.assertRaisesRegex(ValueError, "not valid JSON"):
            formwork.Grammar.json_schema("{not json")
        text = formwork.Grammar.json_schema('{"type": "integer"}')
        self.assertTrue(self.matcher(text).consume_tokens(self.tok.encode("-12")))

    def test_json_object_regex_gbnf_choice(self):
        cases = [
            (formwork.Grammar.json_object(), '{"any":[1,{"x":null}]}', "[1]"),
            (formwork.Grammar.regex(r"\d{3}-\d{4}"), "555-1234", "555-12345"),
            (formwork.Grammar.gbnf('root ::= "yes" | "no" num\nnum ::= [0-9]+'), "no42", "yes1"),
            (formwork.Grammar.choice(["red", "green", "blue"]), "green", "gre"),
        ]
        for grammar, good, bad in cases:
            with self.subTest(kind=grammar.kind):
                m = self.matcher(grammar)
                self.assertTrue(m.consume_tokens(self.tok.encode(good)))
                self.assertTrue(m.is_accepting())
                m = self.matcher(grammar)
                ok = m.consume_tokens(self.tok.encode(bad))
                self.assertFalse(ok and m.is_accepting(), bad)
        self.assertIn("choice", repr(formwork.Grammar.choice(["a"])))
        self.assertIn("yes", str(formwork.Grammar.gbnf('root ::= "yes"')))

    def test_bad_grammars(self):
        with self.assertRaisesRegex(formwork.GrammarError, "look-around"):
            formwork.Grammar.regex(r"a(?=b)")
        with self.assertRaisesRegex(formwork.GrammarError, r"2:\d+"):
            formwork.Grammar.gbnf('root ::= "a" x\nx ::= ( "b"\n')
        with self.assertRaises(ValueError):
            formwork.Grammar.choice([])

    def test_compiled_once_per_content(self):
        tok = formwork.Tokenizer.from_gguf(gguf_path())
        formwork.Matcher(tok, formwork.Grammar.json_schema(PERSON))
        formwork.Matcher(tok, formwork.Grammar.json_schema(dict(PERSON)))
        tok.compile(formwork.Grammar.json_schema(PERSON))
        self.assertEqual(tok.cached_grammars, 1)
        formwork.Matcher(tok, formwork.Grammar.json_schema(PERSON, property_order="any"))
        self.assertEqual(tok.cached_grammars, 2)

    def test_compiles_run_in_parallel_threads(self):
        # Compiles release the GIL; the results are the same from every thread.
        tok = formwork.Tokenizer.from_gguf(gguf_path())
        results = {}

        def work(i):
            g = formwork.Grammar.json_schema({"type": "array", "items": {"const": i}})
            results[i] = formwork.Matcher(tok, g).consume_tokens(tok.encode(f"[{i},{i}]"))

        threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(results, {i: True for i in range(8)})


class MatcherTest(Fixture):
    def test_walk_eos_and_termination(self):
        m = self.matcher()
        eos = set(self.tok.eos_token_ids)
        ids = self.tok.encode(PERSON_TEXT)
        for t in ids:
            allowed = set(bits(self.row(m)))
            self.assertIn(t, allowed)
            self.assertFalse(eos & allowed, "EOS only when accepting")
            self.assertFalse(m.is_accepting())
            self.assertTrue(m.consume_token(t))
        self.assertTrue(m.is_accepting())
        self.assertEqual(set(bits(self.row(m))), eos, "after '}' only EOS")
        self.assertEqual(m.output, PERSON_TEXT.encode())
        self.assertTrue(m.consume_tokens([2]))
        self.assertTrue(m.is_terminated())
        self.assertEqual(set(bits(self.row(m))), eos, "a terminated row allows only EOS")
        self.assertFalse(m.consume_token(ids[0]))
        self.assertIn("stopped", m.last_refusal)
        m.rollback(1)
        self.assertFalse(m.is_terminated())
        self.assertEqual(m.consumed_tokens, ids)

    def test_refused_tokens_leave_the_state(self):
        m = self.matcher()
        ids = self.tok.encode(PERSON_TEXT)
        self.assertTrue(m.consume_tokens(ids[:3]))
        before = m.allowed_tokens()
        bad = self.tok.encode("\n")  # a raw newline: never inside a JSON string
        self.assertEqual(len(bad), 1)
        # All or nothing: a good token followed by a bad one consumes neither.
        self.assertFalse(m.consume_tokens([ids[3]] + bad))
        self.assertIn("rejected", m.last_refusal)
        self.assertFalse(m.consume_token(2), "EOS before the output is accepted")
        self.assertFalse(m.consume_token(10**6), "id outside the vocabulary")
        self.assertEqual(m.consumed_tokens, ids[:3])
        self.assertEqual(m.allowed_tokens(), before)
        self.assertTrue(m.consume_tokens(ids[3:] + [2]))

    def test_validate_does_not_advance(self):
        m = self.matcher()
        ids = self.tok.encode(PERSON_TEXT)
        self.assertEqual(m.validate_tokens(ids + [2]), len(ids) + 1)
        self.assertEqual(m.validate_tokens(ids[:2] + self.tok.encode("]") + ids[2:]), 2)
        self.assertEqual(m.consumed_tokens, [])
        self.assertFalse(m.is_terminated())
        self.assertEqual(m.validate_tokens([]), 0)

    def test_rollback_reset_fork(self):
        m = self.matcher()
        ids = self.tok.encode(PERSON_TEXT)
        self.assertTrue(m.consume_tokens(ids[:4]))
        mask4 = m.allowed_tokens()
        child = m.fork()
        self.assertEqual(child.allowed_tokens(), mask4)
        self.assertTrue(child.consume_tokens(ids[4:]))
        self.assertEqual(m.allowed_tokens(), mask4, "a fork is independent")
        self.assertTrue(m.consume_tokens(ids[4:6]))
        m.rollback(2)
        self.assertEqual(m.allowed_tokens(), mask4)
        with self.assertRaisesRegex(ValueError, "roll back 5"):
            m.rollback(5)
        m.reset()
        self.assertEqual(m.consumed_tokens, [])
        self.assertEqual(m.allowed_tokens(), self.matcher().allowed_tokens())

    def test_forced_tokens(self):
        m = self.matcher()
        forced = m.forced_tokens()
        # `{"name":"` is forced; the tokens stop where a longer token could span the end.
        text = self.tok.decode_bytes(forced)
        self.assertTrue(b'{"name":"'.startswith(text) and text, text)
        self.assertEqual(m.forced_bytes(), b'{"name":"')
        self.assertEqual(m.consumed_tokens, [], "forced tokens are not consumed")
        self.assertTrue(m.consume_tokens(forced))


class BufferTest(Fixture):
    def setUp(self):
        self.m = self.matcher()
        self.assertTrue(self.m.consume_tokens(self.tok.encode('{"name":"')))
        self.expected = self.m.allowed_tokens()
        self.words = self.tok.bitmask_words

    def test_every_kind_of_buffer_gets_the_same_row(self):
        a = np.zeros((3, self.words), dtype=np.int32)
        self.m.fill_bitmask(a, 2)
        self.assertEqual(bits(a[2]), self.expected)
        self.assertFalse(a[:2].any(), "other rows untouched")
        b = bytearray(4 * self.words)
        self.m.fill_bitmask(b)
        self.assertEqual(bits(np.frombuffer(b, dtype=np.int32)), self.expected)
        c = array.array("i", [0] * (2 * self.words))
        self.m.fill_bitmask(c, 1)
        self.assertEqual(bits(c[self.words:]), self.expected)
        d = np.zeros(self.words, dtype=np.uint32)
        self.m.fill_bitmask(memoryview(d))
        self.assertEqual(bits(d.view(np.int32)), self.expected)
        e = np.zeros(2 * self.words, dtype=np.int32)
        self.m.fill_bitmask_ptr(e.ctypes.data, e.nbytes, row=1)
        self.assertEqual(bits(e[self.words:]), self.expected)
        self.assertFalse(e[: self.words].any())

    def test_wider_rows_are_zero_past_the_vocabulary(self):
        a = np.full((2, self.words + 5), -1, dtype=np.int32)
        self.m.fill_bitmask(a, 0)
        self.assertEqual(bits(a[0]), self.expected)
        self.assertTrue((a[1] == -1).all())

    def test_torch_tensor(self):
        try:
            import torch
        except ImportError:
            self.skipTest("torch is not installed in this environment (the adapters' is)")
        t = torch.zeros((2, self.words), dtype=torch.int32)
        self.m.fill_bitmask(t, 1)
        self.assertEqual(bits(t[1].numpy()), self.expected)
        with self.assertRaisesRegex(TypeError, "torch.int32"):
            self.m.fill_bitmask(torch.zeros(self.words, dtype=torch.int64))
        with self.assertRaisesRegex(ValueError, "contiguous"):
            self.m.fill_bitmask(torch.zeros((self.words, 2), dtype=torch.int32).t())

    def test_bad_buffers(self):
        with self.assertRaisesRegex(TypeError, "read-only"):
            self.m.fill_bitmask(bytes(4 * self.words))
        with self.assertRaisesRegex(TypeError, "int32"):
            self.m.fill_bitmask(np.zeros(self.words, dtype=np.float32))
        with self.assertRaisesRegex(ValueError, "too narrow"):
            self.m.fill_bitmask(np.zeros((1, self.words - 1), dtype=np.int32))
        with self.assertRaisesRegex(IndexError, "row 1 is outside the 1 rows"):
            self.m.fill_bitmask(np.zeros(self.words, dtype=np.int32), 1)
        with self.assertRaisesRegex(ValueError, "C-contiguous"):
            self.m.fill_bitmask(np.zeros((2 * self.words, 2), dtype=np.int32)[::2])
        with self.assertRaises(TypeError):
            self.m.fill_bitmask([0] * self.words)
        with self.assertRaises(ValueError):
            self.m.fill_bitmask_ptr(0, 4 * self.words)


class BatchTest(Fixture):
    def positions(self):
        """Matchers at 8 different positions of a walk, with their own fills as reference."""
        ids = self.tok.encode(PERSON_TEXT)
        ms = []
        for k in range(8):
            m = self.matcher()
            self.assertTrue(m.consume_tokens(ids[:k]))
            ms.append(m)
        return ms, [self.row(m) for m in ms]

    def test_fill_bitmasks_equals_one_by_one(self):
        ms, want = self.positions()
        out = np.zeros((10, self.tok.bitmask_words), dtype=np.int32)
        formwork.fill_bitmasks(out, ms)
        for i, row in enumerate(want):
            np.testing.assert_array_equal(out[i], row)
        rows = [9, 7, 5, 3, 1, 0, 2, 4]
        out[:] = 0
        formwork.fill_bitmasks(out, ms, rows)
        for i, row in enumerate(want):
            np.testing.assert_array_equal(out[rows[i]], row)
        self.assertFalse(out[[6, 8]].any())
        formwork.fill_bitmasks(out, [])
        with self.assertRaisesRegex(ValueError, "used twice"):
            formwork.fill_bitmasks(out, ms[:2], [3, 3])
        with self.assertRaisesRegex(ValueError, "2 rows for 3"):
            formwork.fill_bitmasks(out, ms[:3], [0, 1])
        with self.assertRaises(IndexError):
            formwork.fill_bitmasks(out, ms[:1], [10])

    def test_draft_rows_consume_fill_and_roll_back(self):
        ids = self.tok.encode(PERSON_TEXT)
        a, b = self.matcher(), self.matcher()
        self.assertTrue(b.consume_tokens(ids[:2]))
        drafts = [ids[:3], ids[2:4] + [2]]  # b's last draft token, EOS, is refused
        # Reference: the same by hand.
        want = []
        for m, draft in zip((a.fork(), b.fork()), drafts):
            rows = []
            for t in draft:
                rows.append(self.row(m))
                if not m.consume_token(t):
                    rows.append(np.full(self.tok.bitmask_words, -1, dtype=np.int32))
                    break
            else:
                rows.append(self.row(m))
            want.extend(rows)
        out = np.zeros((len(want), self.tok.bitmask_words), dtype=np.int32)
        formwork.fill_draft_bitmasks(out, [a, b], drafts)
        for i, row in enumerate(want):
            np.testing.assert_array_equal(out[i], row, err_msg=f"row {i}")
        self.assertEqual(a.consumed_tokens, [])
        self.assertEqual(b.consumed_tokens, ids[:2])
        with self.assertRaisesRegex(ValueError, "twice"):
            formwork.fill_draft_bitmasks(out, [a, a], [[], []], [0, 1])
        with self.assertRaisesRegex(ValueError, "1 drafts for 2"):
            formwork.fill_draft_bitmasks(out, [a, b], [[]])


if __name__ == "__main__":
    unittest.main()

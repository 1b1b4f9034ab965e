"""formwork.hf end to end: transformers `generate()` on the CPU with SmolLM2-135M, which
transformers loads itself from the registry's GGUF file (`gguf_file=`, dequantized to float32),
under a JSON Schema. Every output, greedy and sampled, in a batch, must be complete (ended by EOS,
not by the token budget) and valid under the schema (jsonschema).
"""

import json
import os
import unittest

import jsonschema
import torch
from fixtures import gguf_path
from transformers import AutoModelForCausalLM, AutoTokenizer

import formwork
from formwork.hf import LogitsProcessor

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 1, "maxLength": 16},
        "population": {"type": "integer", "minimum": 0, "maximum": 40000000},
        "coastal": {"type": "boolean"},
    },
    "required": ["city", "population", "coastal"],
    "additionalProperties": False,
}
PROMPTS = [
    "Give the largest city of Japan as JSON.",
    "Describe Lyon as JSON with its population.",
]
MAX_NEW = 48


class TransformersGenerate(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        folder, file = os.path.split(gguf_path())
        cls.hf_tok = AutoTokenizer.from_pretrained(folder, gguf_file=file)
        cls.hf_tok.padding_side = "left"
        cls.model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=file)
        cls.model.eval()
        cls.tok = formwork.Tokenizer.from_huggingface(
            cls.hf_tok, vocab_size=cls.model.config.vocab_size
        )
        cls.grammar = formwork.Grammar.json_schema(SCHEMA)

    def inputs(self):
        chats = [
            self.hf_tok.apply_chat_template(
                [{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True
            )
            for p in PROMPTS
        ]
        return self.hf_tok(chats, return_tensors="pt", padding=True)

    def generate(self, processor, **kwargs):
        inputs = self.inputs()
        with torch.no_grad():
            out = self.model.generate(
                **inputs,
                logits_processor=[processor],
                max_new_tokens=MAX_NEW,
                eos_token_id=self.hf_tok.eos_token_id,
                pad_token_id=self.hf_tok.pad_token_id or self.hf_tok.eos_token_id,
                **kwargs,
            )
        return out[:, inputs["input_ids"].shape[1]:]

    def texts(self, new_tokens):
        """Each row's text up to its EOS, which must be there: the output is complete."""
        eos = self.hf_tok.eos_token_id
        texts = []
        for row in new_tokens.tolist():
            self.assertIn(eos, row, f"no EOS within {MAX_NEW} tokens: {self.hf_tok.decode(row)!r}")
            texts.append(self.hf_tok.decode(row[: row.index(eos)]))
        return texts

    def test_greedy_batch_one_grammar_per_row(self):
        array = {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3}
        processor = LogitsProcessor(self.tok, [self.grammar, formwork.Grammar.json_schema(array)])
        out = self.generate(processor, do_sample=False)
        first, second = self.texts(out)
        jsonschema.validate(json.loads(first), SCHEMA)
        jsonschema.validate(json.loads(second), array)
        # generate() stops once every row sampled EOS, so the last EOS is never fed back.
        self.assertTrue(all(m.is_accepting() for m in processor.matchers))

    def test_sampled_outputs_are_valid(self):
        torch.manual_seed(7)
        processor = LogitsProcessor(self.tok, self.grammar)
        out = self.generate(processor, do_sample=True, temperature=1.3, top_k=0, top_p=1.0,
                            num_return_sequences=2)
        self.assertEqual(out.shape[0], 2 * len(PROMPTS))
        for text in self.texts(out):
            jsonschema.validate(json.loads(text), SCHEMA)

    def test_a_processor_serves_one_generate_call(self):
        processor = LogitsProcessor(self.tok, self.grammar)
        brace = self.hf_tok.encode("{", add_special_tokens=False)[0]
        scores = torch.zeros((1, self.tok.vocab_size))
        processor(torch.tensor([[5, 6]]), scores)
        processor(torch.tensor([[5, 6, brace]]), scores)
        with self.assertRaisesRegex(ValueError, "reset"):
            processor(torch.tensor([[5, 6]]), scores)
        processor.reset()
        self.assertEqual(processor(torch.tensor([[5, 6]]), scores)[0, brace].item(), 0.0)
        # A row whose sampled token does not continue the one seen (beam search reordering).
        processor(torch.tensor([[5, 6, brace]]), scores)
        with self.assertRaisesRegex(ValueError, "reordered"):
            processor(torch.tensor([[5, 6, 7, 8]]), scores)

    def test_wrong_grammar_count_and_padding_columns(self):
        processor = LogitsProcessor(self.tok, [self.grammar] * 3)
        ids = torch.zeros((2, 4), dtype=torch.long)
        with self.assertRaisesRegex(ValueError, "3 grammars for a batch of 2"):
            processor(ids, torch.zeros((2, self.tok.vocab_size)))
        # Logits wider than the vocabulary: the extra columns are padding, never allowed.
        processor = LogitsProcessor(self.tok, self.grammar)
        scores = processor(ids[:1], torch.zeros((1, self.tok.vocab_size + 40)))
        self.assertTrue(torch.isinf(scores[0, self.tok.vocab_size:]).all())
        brace = self.hf_tok.encode("{", add_special_tokens=False)[0]
        self.assertEqual(scores[0, brace].item(), 0.0)
        self.assertEqual(int(torch.isfinite(scores[0]).sum()),
                         self._allowed_count(formwork.Matcher(self.tok, self.grammar)))

    def _allowed_count(self, matcher):
        buf = bytearray(4 * self.tok.bitmask_words)
        matcher.fill_bitmask(buf, 0)
        return sum(bin(b).count("1") for b in buf)


if __name__ == "__main__":
    unittest.main()

"""formwork: grammar-constrained decoding masks from formwork's Rust engine.

A JSON Schema, regex, GBNF grammar or list of choices becomes, for a model's tokenizer, the mask
of the tokens that keep the output valid, written as the int32 bitmask rows vLLM, SGLang,
xgrammar and llguidance share (token i = bit i % 32 of word i // 32, 1 = allowed)::

    import formwork
    tok = formwork.Tokenizer.from_gguf("SmolLM2-135M-Instruct.Q4_1.gguf")
    grammar = formwork.Grammar.json_schema({"type": "integer"})
    m = formwork.Matcher(tok, grammar)
    mask = bytearray(4 * tok.bitmask_words)
    m.fill_bitmask(mask)

The core needs neither numpy nor torch. The adapters live in submodules: ``formwork.hf``
(transformers), ``formwork.vllm``, ``formwork.sglang``.
"""

from formwork._lib import (
    FormworkError,
    Grammar,
    GrammarError,
    Matcher,
    MatcherError,
    SchemaError,
    Tokenizer,
    TokenizerError,
    __version__,
    fill_bitmasks,
    fill_draft_bitmasks,
)

__all__ = [
    "FormworkError",
    "Grammar",
    "GrammarError",
    "Matcher",
    "MatcherError",
    "SchemaError",
    "Tokenizer",
    "TokenizerError",
    "__version__",
    "fill_bitmasks",
    "fill_draft_bitmasks",
]

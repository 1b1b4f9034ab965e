"""formwork as vLLM's structured-output backend (tested with vLLM 0.33.0).

vLLM (``vllm/v1/structured_output``) asks a backend for two classes: a
``StructuredOutputBackend`` per engine (``compile_grammar``, ``allocate_token_bitmask``,
``destroy``) and a ``StructuredOutputGrammar`` per request (``accept_tokens``,
``validate_tokens``, ``rollback``, ``fill_bitmask``, ``is_terminated``, ``reset``).
``FormworkBackend`` and ``FormworkGrammar`` are those, over ``formwork.Matcher``.

vLLM has no registry for out-of-tree backends (its RFC #50966 is open): the backend name is a
``Literal`` of the built-in ones and the manager picks the class in an if/elif. So the package
ships a ``vllm.general_plugins`` entry point, ``register()``, which vLLM runs in every one of its
processes before any work, and which puts formwork in the place of the ``"guidance"`` backend:

* ``vllm.v1.structured_output.GuidanceBackend`` (what ``StructuredOutputManager.grammar_init``
  instantiates for ``"guidance"``) and ``backend_guidance.GuidanceBackend`` become
  ``FormworkBackend``;
* ``backend_guidance.validate_guidance_grammar`` (request validation in
  ``SamplingParams._validate_structured_outputs``) becomes ``validate_formwork_grammar``: a
  schema formwork cannot enforce is a 400 naming the keyword and its JSON pointer;
* ``backend_guidance.has_guidance_unsupported_json_features`` (the ``"auto"`` mode's choice
  between guidance and outlines when xgrammar refuses a schema) answers whether formwork can
  compile the schema.

So ``--structured-outputs-config.backend guidance`` serves every request with formwork's masks,
and ``"auto"`` uses formwork where xgrammar refuses a request. ``VLLM_PLUGINS`` without
``formwork`` in its list turns the plugin off. ``register()`` refuses (raises, so vLLM does not
start half-patched) a vLLM whose modules lack what it patches.

Request kinds: JSON (a JSON Schema), JSON_OBJECT, REGEX, GRAMMAR (GBNF; a Lark grammar is refused
with an error), CHOICE. STRUCTURAL_TAG is refused (formwork has no structural tags). vLLM's
``disable_any_whitespace`` is honoured (otherwise JSON may hold whitespace runs of up to
``WHITESPACE_RUN`` bytes) and ``disable_additional_properties`` becomes formwork's
``no_additional_properties``.

Owns: the two vLLM classes and the patch. Uses vLLM and torch, imported when this module is (the
caller runs vLLM; ``import formwork`` never imports this module).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from vllm.exceptions import VLLMValidationError
from vllm.v1.structured_output.backend_types import (
    StructuredOutputBackend,
    StructuredOutputGrammar,
    StructuredOutputOptions,
)
from vllm.v1.structured_output.request import get_structured_output_key
from vllm.v1.structured_output.utils import grammar_is_likely_lark, strip_speculative_padding

from formwork import FormworkError, Grammar, Matcher, Tokenizer

__all__ = [
    "TESTED_VLLM_VERSIONS",
    "WHITESPACE_RUN",
    "FormworkBackend",
    "FormworkGrammar",
    "grammar_for",
    "register",
    "validate_formwork_grammar",
]

logger = logging.getLogger(__name__)

#: The vLLM versions whose structured-output code this module was tested against.
TESTED_VLLM_VERSIONS = ("0.33.0",)

#: The longest whitespace run JSON output may hold when vLLM allows whitespace (its default).
WHITESPACE_RUN = 16


def grammar_for(
    request_type: StructuredOutputOptions,
    grammar_spec: str,
    *,
    disable_any_whitespace: bool = False,
    disable_additional_properties: bool = False,
) -> Grammar:
    """The formwork grammar of a vLLM request (its ``structured_output_key``).

    Raises ``formwork.SchemaError`` / ``GrammarError`` for a constraint formwork cannot enforce,
    ``ValueError`` for a kind it does not have.
    """
    options: dict[str, Any] = {}
    if not disable_any_whitespace:
        options["flexible_whitespace"] = WHITESPACE_RUN
    if disable_additional_properties:
        options["no_additional_properties"] = True
    if request_type == StructuredOutputOptions.JSON:
        return Grammar.json_schema(grammar_spec, **options)
    if request_type == StructuredOutputOptions.JSON_OBJECT:
        return Grammar.json_object(**options)
    if request_type == StructuredOutputOptions.REGEX:
        return Grammar.regex(grammar_spec)
    if request_type == StructuredOutputOptions.CHOICE:
        choices = json.loads(grammar_spec)
        if not isinstance(choices, list) or not all(isinstance(c, str) for c in choices):
            raise ValueError(f"a choice must be a list of strings, not {grammar_spec!r}")
        return Grammar.choice(choices)
    if request_type == StructuredOutputOptions.GRAMMAR:
        if grammar_is_likely_lark(grammar_spec):
            raise ValueError(
                "formwork reads grammars in GBNF (llama.cpp's format, root rule `root ::=`); "
                "this one looks like Lark"
            )
        return Grammar.gbnf(grammar_spec)
    raise ValueError(f"formwork does not support {request_type.name.lower()} requests")


def _options(vllm_config: Any) -> dict[str, bool]:
    so = vllm_config.structured_outputs_config
    return {
        "disable_any_whitespace": so.disable_any_whitespace,
        "disable_additional_properties": so.disable_additional_properties,
    }


@dataclass
class FormworkBackend(StructuredOutputBackend):
    """The engine-level backend: the formwork tokenizer of the served model."""

    @staticmethod
    def is_tokenizer_supported(tokenizer: Any) -> bool:
        """Whether formwork can read the tokenizer: a fast (``tokenizers``-backed) one."""
        return hasattr(tokenizer, "backend_tokenizer")

    def __post_init__(self) -> None:
        if not self.is_tokenizer_supported(self.tokenizer):
            raise ValueError(
                f"formwork needs a fast Hugging Face tokenizer, not {type(self.tokenizer).__name__}"
            )
        # Bitmask rows are as wide as the model's logits (vLLM's get_vocab_size()), which may
        # exceed the tokenizer's ids (padding, never allowed).
        self.fw_tokenizer = Tokenizer.from_huggingface(self.tokenizer, vocab_size=self.vocab_size)
        self.options = _options(self.vllm_config)

    def compile_grammar(
        self,
        request_type: StructuredOutputOptions,
        grammar_spec: str,
        stop_token_ids: set[int] | None = None,
    ) -> FormworkGrammar:
        grammar = grammar_for(request_type, grammar_spec, **self.options)
        matcher = Matcher(self.fw_tokenizer, grammar)
        eos = set(self.fw_tokenizer.eos_token_ids)
        extra = frozenset(t for t in (stop_token_ids or ()) if t not in eos and t < self.vocab_size)
        return FormworkGrammar(matcher=matcher, extra_stop_ids=extra)

    def allocate_token_bitmask(self, max_num_seqs: int) -> torch.Tensor:
        return torch.full((max_num_seqs, self.fw_tokenizer.bitmask_words), -1, dtype=torch.int32)

    def destroy(self) -> None:
        pass


@dataclass
class FormworkGrammar(StructuredOutputGrammar):
    """One request's matcher.

    The tokenizer's EOS ids end the output when the grammar accepts (the matcher consumes them
    and terminates). The request's other stop tokens (``extra_stop_ids``: a generation config's
    EOS list, user ``stop_token_ids``) are allowed and end the output at the same points; they are
    not fed to the matcher, and ``stopped_by`` records the one that ended it so that
    ``rollback`` over it counts it.
    """

    matcher: Matcher
    extra_stop_ids: frozenset[int] = frozenset()
    stopped_by: int | None = None
    #: Tokens consumed, as vLLM counts them (a stop token included), for rollback.
    num_processed_tokens: int = field(default=0, repr=False)

    def accept_tokens(self, request_id: str, tokens: list[int]) -> bool:
        for token in tokens:
            if self.is_terminated():
                # vLLM may hand over tokens past the end (a stop string's tail); none are output.
                return True
            if token in self.extra_stop_ids and self.matcher.is_accepting():
                self.stopped_by = token
            elif not self.matcher.consume_tokens([token]):
                logger.error(
                    "formwork refused token %d for request %s (not in its mask)", token, request_id
                )
                return False
            self.num_processed_tokens += 1
        return True

    def validate_tokens(self, tokens: list[int]) -> list[int]:
        tokens = strip_speculative_padding(tokens)
        if not tokens or self.is_terminated():
            return []
        n = self.matcher.validate_tokens(tokens)
        if n < len(tokens) and tokens[n] in self.extra_stop_ids and self._accepts_after(tokens[:n]):
            n += 1
        return tokens[:n]

    def _accepts_after(self, prefix: list[int]) -> bool:
        """Whether the output is complete after ``prefix`` (tokens the matcher validated), which
        is consumed and rolled back."""
        if not prefix:
            return self.matcher.is_accepting()
        if not self.matcher.consume_tokens(prefix):
            return False
        try:
            return self.matcher.is_accepting() and not self.matcher.is_terminated()
        finally:
            self.matcher.rollback(len(prefix))

    def rollback(self, num_tokens: int) -> None:
        if num_tokens <= 0:
            return
        if num_tokens > self.num_processed_tokens:
            raise ValueError(
                f"rollback of {num_tokens} tokens, but only {self.num_processed_tokens} consumed"
            )
        self.num_processed_tokens -= num_tokens
        if self.stopped_by is not None:
            self.stopped_by = None
            num_tokens -= 1
        if num_tokens:
            self.matcher.rollback(num_tokens)

    def fill_bitmask(self, bitmask: torch.Tensor, idx: int) -> None:
        self.matcher.fill_bitmask(bitmask, idx)
        if self.extra_stop_ids and self.matcher.is_accepting():
            row = bitmask[idx].numpy().view(np.uint32)
            for t in self.extra_stop_ids:
                row[t >> 5] |= np.uint32(1 << (t & 31))

    def is_terminated(self) -> bool:
        return self.stopped_by is not None or self.matcher.is_terminated()

    def reset(self) -> None:
        self.matcher.reset()
        self.stopped_by = None
        self.num_processed_tokens = 0


def validate_formwork_grammar(sampling_params: Any, tokenizer: Any = None) -> None:
    """vLLM's request-time check (in place of ``validate_guidance_grammar``): builds the
    request's grammar, so a constraint formwork cannot enforce is refused with a
    ``VLLMValidationError`` (an HTTP 400) naming what and where. ``tokenizer`` is unused: the
    grammar is checked before any tokenizer is involved (compiling for the vocabulary happens in
    the engine), and with the default options, which do not change what can be enforced."""
    if sampling_params.structured_outputs is None:
        return
    request_type, spec = get_structured_output_key(sampling_params.structured_outputs)
    try:
        grammar_for(request_type, spec)
    except (FormworkError, ValueError, TypeError) as e:
        raise VLLMValidationError(f"formwork: {e}") from e


def has_formwork_unsupported_json_features(schema: dict[str, Any]) -> bool:
    """Whether formwork refuses the JSON Schema (in place of vLLM's
    ``has_guidance_unsupported_json_features``, which decides between guidance and outlines)."""
    try:
        Grammar.json_schema(schema)
    except (FormworkError, ValueError, TypeError):
        return True
    return False


#: What register() replaced: (module, attribute) -> the original, for unregister().
_patched: dict[tuple[Any, str], Any] = {}


def register() -> None:
    """The ``vllm.general_plugins`` entry point: formwork in the place of the ``"guidance"``
    structured-output backend (see the module's doc). Idempotent, as vLLM may call it more than
    once per process."""
    import vllm
    import vllm.v1.structured_output as so_manager
    import vllm.v1.structured_output.backend_guidance as so_guidance

    replacements = [
        (so_manager, "GuidanceBackend", FormworkBackend),
        (so_guidance, "GuidanceBackend", FormworkBackend),
        (so_guidance, "validate_guidance_grammar", validate_formwork_grammar),
        (so_guidance, "has_guidance_unsupported_json_features", has_formwork_unsupported_json_features),
    ]
    missing = [f"{m.__name__}.{a}" for m, a, _ in replacements if not hasattr(m, a)]
    if missing:
        raise RuntimeError(
            f"formwork.vllm cannot install itself in vLLM {vllm.__version__}: it has no "
            f"{', '.join(missing)} (tested with vLLM {', '.join(TESTED_VLLM_VERSIONS)}). Leave "
            "formwork out of VLLM_PLUGINS to run vLLM without it."
        )
    if vllm.__version__ not in TESTED_VLLM_VERSIONS:
        logger.warning(
            "formwork.vllm was tested with vLLM %s, not %s",
            ", ".join(TESTED_VLLM_VERSIONS),
            vllm.__version__,
        )
    for module, attr, new in replacements:
        old = getattr(module, attr)
        if old is not new:
            _patched.setdefault((module, attr), old)
            setattr(module, attr, new)
    logger.info("formwork %s serves vLLM's \"guidance\" structured-output backend", _version())


def unregister() -> None:
    """Undoes ``register()`` (for tests and for callers that installed it by hand)."""
    for (module, attr), old in _patched.items():
        setattr(module, attr, old)
    _patched.clear()


def _version() -> str:
    from formwork import __version__

    return __version__

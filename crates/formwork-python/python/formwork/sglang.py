"""formwork as SGLang's grammar backend (tested with SGLang 0.5.23).

SGLang keeps a registry of grammar backends that it consults before its built-in ones
(``sglang.srt.constrained.base_grammar_backend.register_grammar_backend``). ``register()`` adds
formwork under the name ``"formwork"`` and adds that name to the ``--grammar-backend`` choices::

    import formwork.sglang
    formwork.sglang.register()  # at module level: SGLang's scheduler processes are spawned and
                                # import the launching script again, registering there too

    import sglang as sgl
    if __name__ == "__main__":
        llm = sgl.Engine(model_path=..., grammar_backend="formwork")

Request kinds: ``json_schema`` (SGLang's ``"$$ANY$$"`` is any JSON value), ``regex``, ``ebnf``
(GBNF). A structural tag, or a constraint formwork cannot enforce, becomes SGLang's
``InvalidGrammarObject`` carrying formwork's message (the request fails with it). SGLang's
``--constrained-json-disable-any-whitespace`` and ``--constrained-json-max-whitespace-cnt`` are
honoured (otherwise JSON may hold whitespace runs of up to ``WHITESPACE_RUN`` bytes).
SGLang's reasoning wrapper (``ReasonerGrammarBackend``) is not applied to registered backends, by
SGLang's own ``create_grammar_backend``; jump-forward (``try_jump_forward``) is not called by
SGLang 0.5.23's scheduler and is not implemented.

Owns: ``FormworkGrammarBackend`` / ``FormworkGrammar`` (SGLang's ``BaseGrammarBackend`` /
``BaseGrammarObject``) and the registration. Uses SGLang and torch, imported when this module is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

import torch
from sglang.srt.constrained import base_grammar_backend as sgl_base
from sglang.srt.constrained.base_grammar_backend import (
    BaseGrammarBackend,
    BaseGrammarObject,
    GrammarRow,
    InvalidGrammarObject,
)

from formwork import FormworkError, Grammar, Matcher, Tokenizer, fill_bitmasks

__all__ = [
    "NAME",
    "TESTED_SGLANG_VERSIONS",
    "WHITESPACE_RUN",
    "FormworkGrammar",
    "FormworkGrammarBackend",
    "apply_bitmask_inplace",
    "create_backend",
    "register",
]

logger = logging.getLogger(__name__)

#: The backend's name for ``--grammar-backend``.
NAME = "formwork"

#: The SGLang versions this module was tested against.
TESTED_SGLANG_VERSIONS = ("0.5.23",)

#: The longest whitespace run JSON output may hold when SGLang allows whitespace (its default)
#: and sets no ``--constrained-json-max-whitespace-cnt``.
WHITESPACE_RUN = 16

_SHIFTS: dict[torch.device, torch.Tensor] = {}


def apply_bitmask_inplace(logits: torch.Tensor, bitmask: torch.Tensor) -> None:
    """Sets ``logits[i, t]`` to ``-inf`` where bit ``t % 32`` of ``bitmask[i, t // 32]`` is 0
    (columns past the bitmask, padding ids, too). ``bitmask`` is on ``logits``' device."""
    rows, width = logits.shape
    shifts = _SHIFTS.get(logits.device)
    if shifts is None:
        shifts = _SHIFTS[logits.device] = torch.arange(32, dtype=torch.int32, device=logits.device)
    bits = ((bitmask[:rows].unsqueeze(-1) >> shifts) & 1).bool().reshape(rows, -1)
    if bits.shape[1] < width:
        logits[:, bits.shape[1] :] = float("-inf")
        width = bits.shape[1]
    logits[:, :width].masked_fill_(~bits[:, :width], float("-inf"))


class FormworkGrammar(BaseGrammarObject):
    """One request's matcher, in SGLang's grammar-object protocol."""

    def __init__(self, tokenizer: Tokenizer, grammar: Grammar):
        super().__init__()
        self.tokenizer = tokenizer
        self.grammar = grammar
        self.matcher = Matcher(tokenizer, grammar)

    def accept_token(self, token: int) -> None:
        if self.matcher.is_terminated():
            return
        if not self.matcher.consume_tokens([token]):
            # SGLang's scheduler catches ValueError from accept_token and aborts the request.
            raise ValueError(
                f"formwork refused token {token} ({self.tokenizer.token_bytes(token)!r}): it was "
                "not in the request's mask"
            )

    def rollback(self, k: int) -> None:
        if k > 0:
            self.matcher.rollback(k)

    def is_terminated(self) -> bool:
        return self.matcher.is_terminated()

    def allocate_vocab_mask(self, vocab_size: int, batch_size: int, device: Any) -> torch.Tensor:
        # On the CPU, where the matchers write; move_vocab_mask takes it to the device. All
        # ones: rows nobody fills (finished, unconstrained requests) allow every token.
        return torch.full((batch_size, self.tokenizer.bitmask_words), -1, dtype=torch.int32)

    def fill_vocab_mask(self, vocab_mask: torch.Tensor, idx: int) -> None:
        self.matcher.fill_bitmask(vocab_mask, idx)

    @staticmethod
    def fill_vocab_mask_batched(entries: list[GrammarRow], vocab_mask: torch.Tensor) -> None:
        """All rows in one call (without the GIL, on several threads) when every entry is a
        formwork grammar."""
        if all(isinstance(e.grammar, FormworkGrammar) for e in entries):
            fill_bitmasks(vocab_mask, [e.grammar.matcher for e in entries], [e.row for e in entries])
        else:
            BaseGrammarObject.fill_vocab_mask_batched(entries, vocab_mask)

    @staticmethod
    def reset_vocab_mask(vocab_mask: torch.Tensor) -> None:
        vocab_mask.fill_(-1)

    @staticmethod
    def move_vocab_mask(vocab_mask: torch.Tensor, device: Any) -> torch.Tensor:
        return vocab_mask.to(device, non_blocking=True)

    @staticmethod
    def apply_vocab_mask(logits: torch.Tensor, vocab_mask: torch.Tensor) -> None:
        apply_bitmask_inplace(logits, vocab_mask)

    def copy(self) -> FormworkGrammar:
        """A fresh matcher at the start of the same grammar (SGLang hands cache entries out as
        copies); the compiled grammar is shared through the tokenizer's cache."""
        return FormworkGrammar(self.tokenizer, self.grammar)


class FormworkGrammarBackend(BaseGrammarBackend):
    """Compiles SGLang's grammar keys for the served model's tokenizer."""

    def __init__(
        self,
        tokenizer: Any,
        vocab_size: int,
        eos_token_ids: Iterable[int] | None = None,
        *,
        any_whitespace: bool = True,
        max_whitespace_run: int | None = None,
    ):
        super().__init__()
        eos = sorted(eos_token_ids) if eos_token_ids else None
        self.tokenizer = Tokenizer.from_huggingface(tokenizer, vocab_size=vocab_size, eos_token_ids=eos)
        self.json_options: dict[str, Any] = {}
        if any_whitespace:
            self.json_options["flexible_whitespace"] = max_whitespace_run or WHITESPACE_RUN

    def _compile(self, kind: str, build: Callable[[], Grammar]) -> BaseGrammarObject:
        try:
            grammar = build()
            self.tokenizer.compile(grammar)
        except (FormworkError, ValueError, TypeError) as e:
            logger.error("formwork refused the %s grammar: %s", kind, e)
            return InvalidGrammarObject(f"formwork: {e}")
        return FormworkGrammar(self.tokenizer, grammar)

    def dispatch_json(self, key_string: str) -> BaseGrammarObject:
        if key_string == "$$ANY$$":
            return self._compile("json", lambda: Grammar.json_schema(True, **self.json_options))
        return self._compile("json", lambda: Grammar.json_schema(key_string, **self.json_options))

    def dispatch_regex(self, key_string: str) -> BaseGrammarObject:
        return self._compile("regex", lambda: Grammar.regex(key_string))

    def dispatch_ebnf(self, key_string: str) -> BaseGrammarObject:
        return self._compile("ebnf", lambda: Grammar.gbnf(key_string))

    def dispatch_structural_tag(self, key_string: str) -> BaseGrammarObject:
        return InvalidGrammarObject("formwork: structural tags are not supported")


def create_backend(
    server_args: Any, tokenizer: Any, vocab_size: int, eos_token_ids: set[int] | None
) -> FormworkGrammarBackend:
    """SGLang's backend factory signature: ``init_func(server_args, tokenizer, vocab_size,
    eos_token_ids)``."""
    serving = _serving_args(server_args)
    return FormworkGrammarBackend(
        tokenizer,
        vocab_size,
        eos_token_ids,
        any_whitespace=not getattr(serving, "constrained_json_disable_any_whitespace", False),
        max_whitespace_run=getattr(serving, "constrained_json_max_whitespace_cnt", None),
    )


def _serving_args(server_args: Any) -> Any:
    """Where this SGLang keeps the serving options: its runtime context, or the server args."""
    try:
        return sgl_base.get_serving()
    except Exception:  # noqa: BLE001 - no runtime context (a caller outside the scheduler)
        return server_args


def register() -> None:
    """Registers formwork as SGLang's ``"formwork"`` grammar backend and adds the name to
    ``--grammar-backend``'s choices. Idempotent."""
    import sglang
    from sglang.srt.server_args import add_grammar_backend_choices

    if sglang.__version__ not in TESTED_SGLANG_VERSIONS:
        logger.warning(
            "formwork.sglang was tested with SGLang %s, not %s",
            ", ".join(TESTED_SGLANG_VERSIONS),
            sglang.__version__,
        )
    sgl_base.register_grammar_backend(NAME, create_backend)
    from sglang.srt.arg_groups.choices import GRAMMAR_BACKEND_CHOICES

    if NAME not in GRAMMAR_BACKEND_CHOICES:
        add_grammar_backend_choices([NAME])

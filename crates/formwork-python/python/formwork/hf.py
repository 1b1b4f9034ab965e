"""formwork masks inside transformers' ``generate()``: a ``LogitsProcessor``.

    from formwork import Grammar, Tokenizer
    from formwork.hf import LogitsProcessor

    tok = Tokenizer.from_huggingface(hf_tokenizer, vocab_size=model.config.vocab_size)
    processor = LogitsProcessor(tok, Grammar.json_schema(schema))
    out = model.generate(input_ids, logits_processor=[processor], max_new_tokens=200)

transformers calls a logits processor with the whole ``input_ids`` of the batch and the next
token's scores, and tells it nothing else. The processor keeps one ``formwork.Matcher`` per
row: the first call sees the prompts (nothing to consume), every later call consumes the token
the previous step sampled, ``input_ids[:, -1]``, then writes every row's mask into one int32
bitmask and sets refused tokens' scores to ``-inf``. A row whose matcher has consumed an EOS
id is finished: ``generate()`` pads it from then on, and its scores are left alone (an all
``-inf`` row would make sampling divide by zero).

One processor serves one ``generate()`` call (greedy or sampling, any batch size): a call that
does not continue the previous one (a new prompt, beam search reordering rows) is refused with
a ``ValueError``; ``reset()`` readies the processor for a new call.

Owns: the per-row matchers and the mask application. Uses torch and transformers (the caller
has them: this module is not imported by ``import formwork``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import transformers

from formwork import Grammar, Matcher, Tokenizer, fill_bitmasks

__all__ = ["LogitsProcessor"]


class LogitsProcessor(transformers.LogitsProcessor):
    """Masks each row's scores to the tokens its grammar allows next.

    ``grammar`` is one ``Grammar`` for every row, or a sequence with one per row (its length must
    then be the batch size ``generate()`` runs with, ``num_return_sequences`` included).
    """

    def __init__(self, tokenizer: Tokenizer, grammar: Grammar | Sequence[Grammar]):
        if isinstance(grammar, Grammar):
            self._grammars: list[Grammar] | Grammar = grammar
        else:
            self._grammars = list(grammar)
            if not self._grammars:
                raise ValueError("LogitsProcessor needs at least one grammar")
        self.tokenizer = tokenizer
        # Compile once now (cached in the tokenizer), so a first generate() step is not slowed
        # by it and a grammar that cannot be compiled fails here.
        for g in self._grammars if isinstance(self._grammars, list) else [self._grammars]:
            tokenizer.compile(g)
        self.reset()

    def reset(self) -> None:
        """Forgets the rows of the last ``generate()`` call."""
        self.matchers: list[Matcher] = []
        self._bitmask: torch.Tensor | None = None
        self._expected_len = 0
        self._last: list[int] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        batch, seq_len = input_ids.shape
        if not self.matchers:
            self._start(batch)
        else:
            self._advance(input_ids)
        self._expected_len = seq_len + 1
        return self._mask(scores)

    def _start(self, batch: int) -> None:
        if isinstance(self._grammars, list):
            if len(self._grammars) != batch:
                raise ValueError(
                    f"{len(self._grammars)} grammars for a batch of {batch} rows: give one grammar "
                    "for all rows or one per row (num_return_sequences counts)"
                )
            grammars = self._grammars
        else:
            grammars = [self._grammars] * batch
        self.matchers = [Matcher(self.tokenizer, g) for g in grammars]
        self._bitmask = torch.zeros((batch, self.tokenizer.bitmask_words), dtype=torch.int32)
        self._last = [-1] * batch

    def _advance(self, input_ids: torch.LongTensor) -> None:
        batch, seq_len = input_ids.shape
        if batch != len(self.matchers) or seq_len != self._expected_len:
            raise ValueError(
                f"input_ids of shape ({batch}, {seq_len}) do not continue the previous step "
                f"({len(self.matchers)} rows, length {self._expected_len - 1}): a LogitsProcessor "
                "serves one generate() call; call reset() (or make a new one) for the next"
            )
        tail = input_ids[:, -2:].tolist()
        for row, (matcher, (previous, token)) in enumerate(zip(self.matchers, tail)):
            if self._last[row] >= 0 and previous != self._last[row]:
                raise ValueError(
                    f"row {row} does not continue with the token this processor saw it sample "
                    f"({self._last[row]}, now {previous}): rows were reordered (beam search?), "
                    "which a LogitsProcessor cannot follow"
                )
            self._last[row] = token
            if matcher.is_terminated():
                # generate() pads finished rows; the padding is not output.
                continue
            if not matcher.consume_tokens([token]):
                raise ValueError(
                    f"row {row}: the grammar refused token {token} "
                    f"({self.tokenizer.token_bytes(token)!r}), which its mask did not allow: "
                    "another logits processor or a warper must have changed the scores after "
                    "this one"
                )

    def _mask(self, scores: torch.FloatTensor) -> torch.FloatTensor:
        assert self._bitmask is not None
        live = [row for row, m in enumerate(self.matchers) if not m.is_terminated()]
        if not live:
            return scores
        fill_bitmasks(self._bitmask, [self.matchers[row] for row in live], live)
        width = scores.shape[-1]
        allowed = _unpack(self._bitmask[live], width).to(scores.device)
        rows = torch.tensor(live, device=scores.device)
        masked = scores[rows].masked_fill(~allowed, float("-inf"))
        scores = scores.clone()
        scores[rows] = masked
        return scores


_SHIFTS = torch.arange(32, dtype=torch.int32)


def _unpack(bitmask: torch.Tensor, width: int) -> torch.Tensor:
    """Bool ``(rows, width)``: token i allowed when bit i % 32 of word i // 32 is set; columns
    past the bitmask (padding ids of a wider logits row) are refused."""
    bits = ((bitmask.unsqueeze(-1) >> _SHIFTS) & 1).bool().reshape(bitmask.shape[0], -1)
    if bits.shape[1] >= width:
        return bits[:, :width]
    pad = torch.zeros((bits.shape[0], width - bits.shape[1]), dtype=torch.bool)
    return torch.cat([bits, pad], dim=1)

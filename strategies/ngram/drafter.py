"""The `ngram` drafter (prompt lookup, Saxena 2023): continue the last n tokens as they went before.

Find the longest suffix of the committed sequence (prompt + output, n from ``n_max`` down to
``n_min``) that occurred earlier, and propose the tokens that followed its latest earlier
occurrence. An index maps every n-gram to the end of its latest occurrence and grows by the few
tokens each step commits, so a lookup costs O(n_max), not a scan of the sequence. Proposals are a
deterministic function of the sequence: ``p`` is None, and the verifier accepts ``d`` with
probability ``q(d)`` -- exact at any temperature.

    >>> import numpy as np
    >>> from picker.engine.drafting import DraftContext, SamplingParams
    >>> drafter = PromptLookupDrafter(num_draft_tokens=3, n_max=2)
    >>> seq = [7, 1, 2, 3, 4, 9, 1, 2]                 # "1 2" occurred before, followed by 3 4 9
    >>> drafter.reset(seq)
    >>> drafter.propose(DraftContext(seq, 8, SamplingParams(), np.random.default_rng(0), 8)).tree.tokens
    (3, 4, 9)

When the match's continuation runs into the suffix itself (a loop of period P), the proposal
keeps repeating the period, which is what the sequence would do if the loop continued.
"""

from __future__ import annotations

from collections.abc import Sequence

from picker.engine.drafting import EMPTY_DRAFT, Draft, DraftContext, StepOutcome
from picker.engine.tree import TokenTree


class PromptLookupDrafter:
    """Longest-suffix n-gram match over prompt + output; proposes up to ``num_draft_tokens``."""

    def __init__(self, num_draft_tokens: int = 8, n_max: int = 4, n_min: int = 1) -> None:
        if not 1 <= n_min <= n_max:
            raise ValueError("need 1 <= n_min <= n_max")
        if num_draft_tokens < 1:
            raise ValueError("num_draft_tokens must be >= 1")
        self.num_draft_tokens = num_draft_tokens
        self.sizes = tuple(range(n_max, n_min - 1, -1))  # longest match first
        self._ends: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in self.sizes}
        self._next_end = 0  # n-grams ending before this position are indexed

    def reset(self, prompt_ids: Sequence[int]) -> None:
        self._ends = {n: {} for n in self.sizes}
        self._next_end = 0
        self._extend(prompt_ids)

    def fork(self) -> PromptLookupDrafter:
        """A drafter for another concurrent sequence: the same knobs, an empty index."""
        return PromptLookupDrafter(self.num_draft_tokens, n_max=self.sizes[0], n_min=self.sizes[-1])

    def observe(self, outcome: StepOutcome) -> None:
        self._extend(outcome.tokens)

    def _extend(self, tokens: Sequence[int]) -> None:
        """Index the n-grams that end at each new position e whose continuation tokens[e] exists.

        The n-gram ending at the last position is never indexed: it is the suffix we look up,
        and matching it with itself would propose nothing.
        """
        if len(tokens) < self._next_end:
            # A shorter sequence than the one indexed: another generation without reset() (the hook
            # is optional). Its positions say nothing about this one, so index it afresh.
            self._ends = {n: {} for n in self.sizes}
            self._next_end = 0
        for end in range(self._next_end, len(tokens)):
            for n, table in self._ends.items():
                if end >= n:
                    table[tuple(tokens[end - n : end])] = end  # later occurrences overwrite
        self._next_end = max(self._next_end, len(tokens))

    def propose(self, ctx: DraftContext) -> Draft:
        tokens = ctx.tokens
        self._extend(tokens)  # a no-op when observe() kept up; makes the drafter hook-free
        k = min(self.num_draft_tokens, ctx.max_draft)
        length = len(tokens)
        for n in self.sizes:
            if length < n or k < 1:
                continue
            end = self._ends[n].get(tuple(tokens[length - n :]))
            if end is None or end >= length:  # >= length: indexed on another sequence of equal length
                continue
            chain: list[int] = []
            for j in range(k):  # past the sequence's end, repeat the period (length - end)
                i = end + j
                chain.append(tokens[i] if i < length else chain[i - length])
            return Draft(TokenTree.from_chain(chain), p=None)
        return EMPTY_DRAFT


def make_drafter(
    *, target_backend: object = None, artifact: object = None, num_draft_tokens: int = 8,
    n_max: int = 4, n_min: int = 1,
) -> PromptLookupDrafter:
    """Prompt lookup needs no model and no artifact: the arguments are its own knobs."""
    return PromptLookupDrafter(num_draft_tokens=num_draft_tokens, n_max=n_max, n_min=n_min)

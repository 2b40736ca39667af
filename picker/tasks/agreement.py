"""Greedy agreement of two decodes of one prompt, token id by token id: the rollout gate's check.

A speculative engine promises plain decoding's output. At T = 0 that is checkable, prompt by
prompt: decode the same prompt ids with and without speculation and compare the token ids. Where
the engine verifies with other numerics than it decodes with (a batched verify forward runs other
kernels than a one-token step), the two can part where the baseline's first two tokens are
almost equally likely: float order decides such a tie. So a divergence is *tolerated* only as a
near tie: at the first differing position the two tokens are the baseline's top two (either
order) and their log-probabilities are within ``tolerance`` nats. Past a divergence the runs
continue from different prefixes, so nothing after it says anything and nothing is compared.

    >>> top2 = [((5, -0.1), (9, -2.5)), ((7, -0.70), (8, -0.72)), ((3, -0.2), (4, -1.9))]
    >>> greedy_gate([5, 7, 3], top2, [5, 8, 1], tolerance=0.05).passed      # 8 vs 7: a 0.02-nat tie
    True
    >>> print(greedy_gate([5, 7, 3], top2, [9, 7, 3], tolerance=0.05).describe())  # doctest: +ELLIPSIS
    first divergence at position 0: baseline 5, speculative 9; baseline top-2 5:-0.1, 9:-2.5 (gap 2.4 nats) -> FAIL ...

The same rule serves the project's cross-backend agreement tests (``tests/agreement.py``), which
also require the other side's own top-2 to show the tie.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["GateResult", "Top2", "first_divergence", "greedy_gate", "near_tie"]

Top2 = tuple[tuple[int, float], tuple[int, float]]  # ((id, logprob), (id, logprob)), best first


def first_divergence(reference: Sequence[int], other: Sequence[int]) -> int | None:
    """Index of the first differing token (a length difference counts), None when identical."""
    for i, (a, b) in enumerate(zip(reference, other)):
        if a != b:
            return i
    return None if len(reference) == len(other) else min(len(reference), len(other))


def gap(top2: Top2) -> float:
    """Log-prob distance between the two tokens of ``top2`` (order-free: engines list them either way)."""
    return abs(float(top2[0][1]) - float(top2[1][1]))


def near_tie(top2: Top2, token_a: int, token_b: int, tolerance: float) -> bool:
    """``token_a`` and ``token_b`` are the two tokens of ``top2`` and lie within ``tolerance`` nats."""
    pair = {int(t) for t, _ in top2}
    return len(pair) == 2 and {int(token_a), int(token_b)} == pair and gap(top2) <= tolerance


@dataclass(frozen=True)
class GateResult:
    """One prompt's verdict: identical, or where it first diverged and whether that was a near tie."""

    passed: bool
    position: int | None              # the first divergence; None when the outputs are identical
    baseline_token: int | None        # None where the baseline had ended (the speculative run is longer)
    speculative_token: int | None     # None where the speculative run had ended
    baseline_top2: Top2 | None
    near_tie: bool
    tolerance: float | None           # None: token identity required

    def describe(self) -> str:
        if self.position is None:
            return "identical to the baseline"
        where = (f"first divergence at position {self.position}: baseline {_tok(self.baseline_token)}, "
                 f"speculative {_tok(self.speculative_token)}")
        if self.baseline_top2 is not None:
            where += (f"; baseline top-2 {', '.join(f'{t}:{lp:g}' for t, lp in self.baseline_top2)} "
                      f"(gap {gap(self.baseline_top2):.3g} nats)")
        if self.passed:
            return f"{where} -> pass (near tie within {self.tolerance:g} nats)"
        why = "token identity required" if self.tolerance is None else f"not a near tie within {self.tolerance:g} nats"
        return f"{where} -> FAIL ({why})"


def _tok(token: int | None) -> str:
    return "(ended)" if token is None else str(token)


def greedy_gate(baseline_tokens: Sequence[int], baseline_top2: Sequence[Top2], speculative_tokens: Sequence[int],
                tolerance: float | None) -> GateResult:
    """Check one prompt's speculative greedy output against the baseline's.

    ``baseline_tokens``: the plain (no speculation) greedy output; ``baseline_top2``: for each of
    its positions, the baseline's two most likely tokens with their log-probabilities (vLLM
    ``logprobs=2``, llama.cpp ``n_probs=2``, SGLang ``top_logprobs_num=2``); ``speculative_tokens``:
    the speculative run's output for the same prompt ids. Give both the same forced length (the
    engines' ``ignore_eos``) or keep the stop token in both, so a length difference means something.

    Passes when the outputs are identical, or when ``tolerance`` is a number and the first
    divergence is a near tie of the baseline's top two (:func:`near_tie`). A length difference
    (one run ended) is never a near tie. ``tolerance=None`` demands token identity.
    """
    if len(baseline_top2) != len(baseline_tokens):
        raise ValueError(f"baseline_top2 has {len(baseline_top2)} positions for {len(baseline_tokens)} baseline tokens")
    if tolerance is not None and tolerance < 0:
        raise ValueError(f"tolerance must be >= 0 nats, got {tolerance:g}")
    pos = first_divergence(baseline_tokens, speculative_tokens)
    if pos is None:
        return GateResult(True, None, None, None, None, False, tolerance)
    base = int(baseline_tokens[pos]) if pos < len(baseline_tokens) else None
    spec = int(speculative_tokens[pos]) if pos < len(speculative_tokens) else None
    top2 = baseline_top2[pos] if base is not None else None
    if top2 is not None and base not in {int(t) for t, _ in top2}:
        raise ValueError(f"position {pos}: the baseline's greedy token {base} is not among its top-2 {top2}")
    tie = (top2 is not None and base is not None and spec is not None and tolerance is not None
           and near_tie(top2, base, spec, tolerance))
    return GateResult(tie, pos, base, spec, top2, tie, tolerance)

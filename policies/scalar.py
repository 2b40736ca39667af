"""Scalar, pure-Python versions of the speedup theory's hot paths (no numpy import).

`specpick recommend` evaluates E[L] thousands of times per decision and must start in well under a
second; these functions are the scalar twins of ``policies.theory`` (tests check they agree).

    >>> round(chain_length(0.8, 4), 4), abs(tree_length(0.8, 4, 1, 4) - chain_length(0.8, 4)) < 1e-12
    (3.3616, True)
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from functools import lru_cache

_BISECT_ITERATIONS = 80  # 2**-80 is far below float resolution on [0, 1]


def solve_alpha(length_of_alpha: Callable[[float], float], target: float) -> float:
    """The α in [0, 1] where a non-decreasing E[L](α) reaches ``target``, by bisection.

    Returns 0.0 when ``target`` ≤ E[L](0) and 1.0 when ``target`` ≥ E[L](1) (clamped, never NaN).
    """
    lo, hi = 0.0, 1.0
    if target <= length_of_alpha(lo):
        return 0.0
    if target >= length_of_alpha(hi):
        return 1.0
    for _ in range(_BISECT_ITERATIONS):
        mid = 0.5 * (lo + hi)
        if length_of_alpha(mid) < target:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


@lru_cache(maxsize=65536)
def chain_length(alpha: float, n: int) -> float:
    # Scalar fast path of theory.expected_length_iid: the policy calls it ~10^5 times per decision.
    return float(n + 1) if alpha >= 1.0 else (1.0 - alpha ** (n + 1)) / (1.0 - alpha)


@lru_cache(maxsize=65536)
def tree_length(alpha: float, depth: int, topk: int, nodes: int, siblings: tuple[float, ...] = ()) -> float:
    """E[L] of the best tree: 1 + the sum of the ``nodes`` largest reach probabilities.

    ``siblings``: measured conditional acceptance of ranks 2, 3, … after the earlier ranks were
    rejected (``picker.engine.siblings``; the last value serves deeper ranks); empty: α for every rank.
    Same greedy as :func:`policies.theory.best_tree` (a test checks they agree), kept scalar and
    free of validation because the policy calls it thousands of times per decision.
    """
    sib = sibling_odds(alpha, topk, siblings)
    total, taken = 1.0, 0
    # Heap of (-reach, depth, rank, parent_reach): a node's reach is parent_reach * sib[rank].
    frontier = [(-sib[0], 1, 0, 1.0)]
    while frontier and taken < nodes:
        neg, d, rank, parent_reach = heapq.heappop(frontier)
        reach = -neg
        total += reach
        taken += 1
        if rank + 1 < topk:
            heapq.heappush(frontier, (-parent_reach * sib[rank + 1], d, rank + 1, parent_reach))
        if d < depth:
            heapq.heappush(frontier, (-reach * sib[0], d + 1, 0, reach))
    return total


def sibling_odds(alpha: float, topk: int, siblings: tuple[float, ...] = ()) -> list[float]:
    """P(the r-th ranked child is the accepted one), r = 1..topk: rank 1 with α, rank r with the
    conditional rate s_r once ranks 1..r−1 were rejected (``siblings``, else α: the textbook model)."""
    out, rejected = [], 1.0
    for r in range(topk):
        s = alpha if r == 0 or not siblings else siblings[min(r - 1, len(siblings) - 1)]
        out.append(rejected * s)
        rejected *= 1.0 - s
    return out

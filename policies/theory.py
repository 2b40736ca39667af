"""Speculative-decoding theory: expected tokens per verify, speedup, break-even acceptance.

Pure functions in the papers' notation, numpy only:

- α: acceptance probability of one draft token, E[Σ_x min(p(x), q(x))] (Leviathan, Kalman, Matias
  2023, "Fast Inference from Transformers via Speculative Decoding", arXiv:2211.17192, Cor. 3.6).
- N: draft tokens proposed per step (Leviathan's γ); c: draft cost per draft token relative to one
  plain 1-token target forward; v: cost of the verify forward (N+1 tokens) relative to that forward.
- E[L]: tokens emitted per target (verify) forward, *including the bonus token* — the convention
  of vLLM's "mean acceptance length" and SGLang's ``spec_accept_length``.
- Trees: E[L] = 1 + Σ_nodes Π_{path} a (Sequoia, arXiv:2402.12374, Prop. 3.4; EAGLE-2,
  arXiv:2406.16858, "value" of a node).

    >>> round(expected_length_iid(0.8, 4), 4)           # (1 - 0.8**5) / (1 - 0.8)
    3.3616
    >>> round(speedup(expected_length_iid(0.8, 4), 4, c=0.05), 3)
    2.801
    >>> round(break_even_alpha(1, c=0.2), 6)             # N = 1, v = 1: pays only if α > c
    0.2
    >>> best_n(0.8, c=0.05)[0]
    8
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence

import numpy as np

from policies.scalar import solve_alpha  # re-exported: the bisection is pure Python

FloatOrArray = float | np.ndarray
# The i.i.d. closed form is evaluated with expm1/log so it stays exact to ~1e-12 near α = 1.


def _as_float(x: np.ndarray) -> FloatOrArray:
    """Return a Python float for 0-d results, the array otherwise."""
    return float(x) if np.ndim(x) == 0 else x


def _check_probabilities(a: np.ndarray, name: str) -> None:
    if np.any(~np.isfinite(a)) or np.any(a < 0.0) or np.any(a > 1.0):
        raise ValueError(f"{name} must lie in [0, 1]")


def expected_length_iid(alpha: float | np.ndarray, n: int | np.ndarray) -> FloatOrArray:
    """E[L] = (1 − α^(N+1)) / (1 − α) for a chain of N drafts with i.i.d. acceptance α.

    Leviathan et al. 2023, Eq. (1). Limits: α = 1 gives N + 1, α = 0 gives 1 (the bonus token
    only). Broadcasts over numpy arrays of α and N.
    """
    a = np.asarray(alpha, dtype=float)
    nn = np.asarray(n)
    _check_probabilities(a, "alpha")
    if np.any(nn < 0) or np.any(nn != np.floor(nn)):
        raise ValueError("n must be a non-negative integer")
    with np.errstate(divide="ignore", invalid="ignore"):
        # 1 − a^(n+1) = −expm1((n+1)·log a): no cancellation as a → 1.
        value = np.expm1((nn + 1.0) * np.log(a)) / (a - 1.0)
    value = np.where(a == 1.0, nn + 1.0, value)
    value = np.where(a == 0.0, 1.0, value)
    return _as_float(value)


def expected_length_positions(accept: Sequence[float] | np.ndarray) -> float:
    """E[L] = 1 + Σ_k Π_{i≤k} a_i for per-position conditional acceptance a_1..a_N.

    a_i = P(accept d_i | d_1..d_{i-1} accepted), e.g. vLLM's ``accepted_tokens_per_pos`` counts
    divided one by the next. With all a_i = α this is :func:`expected_length_iid`.
    """
    a = np.asarray(accept, dtype=float)
    if a.ndim != 1:
        raise ValueError("accept must be a 1-D sequence of per-position rates")
    _check_probabilities(a, "accept")
    return float(1.0 + np.cumprod(a).sum())


def tree_reach_probabilities(
    parents: Sequence[int], accept: Sequence[float] | np.ndarray
) -> np.ndarray:
    """Marginal probability that each tree node is accepted: the product of ``accept`` on its path.

    ``parents[i]`` is the index of node i's parent, −1 for a child of the root (the last verified
    token); nodes come in topological order (a parent before its children). ``accept[i]`` is
    P(node i accepted | its parent accepted). Siblings are mutually exclusive (one continuation is
    kept), so their ``accept`` values must sum to at most 1.
    """
    a = np.asarray(accept, dtype=float)
    par = np.asarray(parents, dtype=int)
    if a.ndim != 1 or par.shape != a.shape:
        raise ValueError("parents and accept must be 1-D and of equal length")
    _check_probabilities(a, "accept")
    if np.any(par >= np.arange(len(par))) or np.any(par < -1):
        raise ValueError("parents must index an earlier node, or be -1 for the root")
    sibling_mass = np.bincount(par + 1, weights=a, minlength=len(a) + 1)
    if np.any(sibling_mass > 1.0 + 1e-9):
        raise ValueError("acceptance of the children of one node sums to more than 1")
    reach = np.empty_like(a)
    for i, (p, ai) in enumerate(zip(par, a)):
        reach[i] = ai * (1.0 if p < 0 else reach[p])
    return reach


def expected_length_tree(parents: Sequence[int], accept: Sequence[float] | np.ndarray) -> float:
    """E[L] = 1 + Σ_v Π_{u ∈ path(root→v)} a_u (Sequoia Prop. 3.4; EAGLE-2's node value).

    See :func:`tree_reach_probabilities` for the tree encoding. A chain (parents = −1, 0, 1, …)
    recovers :func:`expected_length_positions`.
    """
    return float(1.0 + tree_reach_probabilities(parents, accept).sum())


def tree_depths(parents: Sequence[int]) -> np.ndarray:
    """Depth of each node (children of the root have depth 1)."""
    depth = np.zeros(len(parents), dtype=int)
    for i, p in enumerate(parents):
        depth[i] = 1 if p < 0 else depth[p] + 1
    return depth


def alpha_from_expected_length(tau: float, n: int) -> float:
    """Invert :func:`expected_length_iid`: the i.i.d. α that yields mean accepted length τ at N.

    Convention: τ *includes the bonus token* (vLLM "mean acceptance length" = 1 + accepted/drafts;
    SGLang ``spec_accept_length`` = tokens / verify steps; EAGLE papers' τ), so 1 ≤ τ ≤ N + 1.
    Papers that report accepted drafts only (τ − 1) must add 1 first. The result is the constant
    α that reproduces τ; real acceptance decays with position, so this α underestimates early
    positions and overestimates late ones.
    """
    if n < 0 or int(n) != n:
        raise ValueError("n must be a non-negative integer")
    if not 1.0 <= tau <= n + 1.0:
        raise ValueError(f"tau must lie in [1, N+1] = [1, {n + 1}] (it includes the bonus token)")
    if n == 0:
        return 0.0
    return solve_alpha(lambda a: float(expected_length_iid(a, n)), tau)


def speedup(
    expected_length: float | np.ndarray,
    n_draft: int | np.ndarray,
    c: float | np.ndarray,
    verify_cost_ratio: float | np.ndarray = 1.0,
) -> FloatOrArray:
    """Wall-time speedup over plain decoding: S = E[L] / (N·c + v).

    Variants, all this one formula:
    - Leviathan Thm 3.8 (batch 1, verify free): v = 1, so S = E[L] / (N·c + 1).
    - Batched / compute-bound (MagicDec, arXiv:2408.11049; SmartSpec): v = T_verify(B, N+1) /
      T_decode(B) > 1, from :func:`policies.roofline.verify_cost_ratio`.
    - Trees (Sequoia's G(n,d) / (t(n) + d·c)): pass N = depth d and c per draft *step*, or N = nodes
      and c per node; only the product N·c = draft time / plain forward time matters.
    - Negligible drafts (n-gram lookup, lookahead): c = 0, S = E[L] / v.
    """
    denominator = np.asarray(n_draft, dtype=float) * np.asarray(c, dtype=float)
    denominator = denominator + np.asarray(verify_cost_ratio, dtype=float)
    if np.any(denominator <= 0.0):
        raise ValueError("N·c + v must be positive")
    return _as_float(np.asarray(expected_length, dtype=float) / denominator)


def break_even_alpha(n: int, c: float, v: float = 1.0) -> float:
    """The i.i.d. α at which S = 1, i.e. E[L](α, N) = N·c + v.

    Speculation pays for α above the returned value. Sentinels (no NaN): 0.0 when N·c + v ≤ 1
    (even α = 0 breaks even), 1.0 when N·c + v ≥ N + 1 (no α < 1 can pay; at α = 1 it only breaks
    even). For N = 1, v = 1 this is α = c: FACTS' "speculation can pay only if α > c"
    (Leviathan Cor. 3.9).
    """
    if n < 1:
        raise ValueError("n must be at least 1")
    if c < 0.0 or v <= 0.0:
        raise ValueError("c must be >= 0 and v > 0")
    return solve_alpha(lambda a: float(expected_length_iid(a, n)), n * c + v)


def best_n(
    alpha_or_positions: float | Sequence[float] | np.ndarray,
    c: float,
    v_of_n: Callable[[int], float] | None = None,
    n_max: int = 16,
    n_min: int = 1,
) -> tuple[int, float]:
    """Integer search for the draft length with the highest S = E[L](N) / (N·c + v(N)).

    There is no closed form (Leviathan §3.5). ``alpha_or_positions`` is an i.i.d. α or a vector of
    per-position rates a_1..a_K (then N ≤ K). ``v_of_n`` gives the verify cost ratio of N+1 tokens
    (default 1: free verification). With ``n_min=0``, N = 0 (no speculation, S = 1/v(0)) competes.
    Ties go to the smaller N, which risks less when α is overestimated.
    """
    positions = np.atleast_1d(np.asarray(alpha_or_positions, dtype=float))
    iid = np.ndim(alpha_or_positions) == 0
    top = n_max if iid else min(n_max, len(positions))
    if n_min < 0 or top < n_min:
        raise ValueError("need 0 <= n_min <= n_max (and n_min <= number of positions)")
    best: tuple[int, float] = (n_min, -math.inf)
    for n in range(n_min, top + 1):
        if iid:
            length = float(expected_length_iid(positions[0], n))
        else:
            length = expected_length_positions(positions[:n])
        v = 1.0 if v_of_n is None else float(v_of_n(n))
        s = float(speedup(length, n, c, v))
        if s > best[1] + 1e-12:
            best = (n, s)
    return best


def sibling_acceptance(alpha: float, topk: int, conditional: Sequence[float] = ()) -> np.ndarray:
    """Probability that the i-th ranked child of an accepted node is the one accepted.

    The top-ranked draft token is accepted with α; the i-th is tried only after the first i − 1
    are rejected and is then accepted with its conditional rate: ``conditional[i - 2]`` where
    measured (``picker.engine.siblings``; the last value serves deeper ranks), else α again — the textbook
    model, which overstates sampled siblings (after a rejection the residual target keeps only
    the mass the draft under-proposed). Values sum to at most 1.
    """
    if topk < 1:
        raise ValueError("topk must be at least 1")
    _check_probabilities(np.asarray(alpha, dtype=float), "alpha")
    s = np.full(topk, float(alpha))
    if len(conditional):
        c = np.asarray(conditional, dtype=float)
        _check_probabilities(c, "conditional")
        s[1:] = c[np.minimum(np.arange(topk - 1), len(c) - 1)]
    rejected = np.concatenate(([1.0], np.cumprod(1.0 - s)[:-1]))
    return s * rejected


def best_tree(
    sibling_accept: Sequence[float] | np.ndarray, n_nodes: int, max_depth: int | None = None
) -> tuple[list[int], np.ndarray]:
    """The n-node draft tree with the largest E[L] under positional acceptance (Sequoia Def. 3.1).

    ``sibling_accept[k]`` is the acceptance of the (k+1)-th ranked child of any accepted node; its
    length bounds the children per node (top-k). Greedy by path product (EAGLE-2's reranking):
    optimal when ``sibling_accept`` is non-increasing, since the top-n values are then closed
    under parent and elder sibling. Returns ``(parents, accept)`` in topological order.
    """
    s = np.asarray(sibling_accept, dtype=float)
    _check_probabilities(s, "sibling_accept")
    if s.ndim != 1 or len(s) == 0 or n_nodes < 0:
        raise ValueError("need a non-empty 1-D sibling_accept and n_nodes >= 0")
    parents: list[int] = []
    accept: list[float] = []
    reach: list[float] = []
    depth: list[int] = []
    # Heap entries: (−value, depth, insertion order, parent, rank); shallower wins ties.
    frontier: list[tuple[float, int, int, int, int]] = [(-s[0], 1, 0, -1, 0)]
    pushed = 1
    while frontier and len(parents) < n_nodes:
        neg_value, d, _, parent, rank = heapq.heappop(frontier)
        node = len(parents)
        parents.append(parent)
        accept.append(float(s[rank]))
        reach.append(-neg_value)
        depth.append(d)
        parent_reach = 1.0 if parent < 0 else reach[parent]
        if rank + 1 < len(s):  # the next-ranked sibling
            heapq.heappush(frontier, (-parent_reach * s[rank + 1], d, pushed, parent, rank + 1))
            pushed += 1
        if max_depth is None or d < max_depth:  # this node's first child
            heapq.heappush(frontier, (-reach[node] * s[0], d + 1, pushed, node, 0))
            pushed += 1
    return parents, np.asarray(accept)


def simulate_chain(
    accept: float | Sequence[float] | np.ndarray,
    n_steps: int,
    rng: np.random.Generator,
    n: int | None = None,
) -> np.ndarray:
    """Monte-Carlo tokens per verify for a chain: i.i.d. α (give ``n``) or per-position rates.

    Each step draws the acceptance of d_1..d_N and stops at the first rejection; the returned
    lengths include the bonus / resampled token, so their mean estimates E[L].
    """
    if np.ndim(accept) == 0:
        if n is None:
            raise ValueError("an i.i.d. alpha needs the draft length n")
        rates = np.full(n, float(accept))  # type: ignore[arg-type]
    else:
        rates = np.asarray(accept, dtype=float)
    _check_probabilities(rates, "accept")
    accepted = rng.random((n_steps, len(rates))) < rates
    return np.asarray(1 + np.cumprod(accepted, axis=1).sum(axis=1), dtype=int)


def simulate_tree(
    parents: Sequence[int],
    accept: Sequence[float] | np.ndarray,
    n_steps: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """Monte-Carlo tokens per verify for a tree with per-node conditional acceptance.

    At an accepted node at most one child is accepted: child j with probability ``accept[j]``, none
    with the remainder (the verifier then samples a fresh token). Lengths include that token.
    """
    tree_reach_probabilities(parents, accept)  # validates the encoding
    a = np.asarray(accept, dtype=float)
    children: dict[int, np.ndarray] = {}
    for node, parent in enumerate(parents):
        children.setdefault(parent, np.empty(0, dtype=int))
        children[parent] = np.append(children[parent], node)
    current = np.full(n_steps, -1)
    lengths = np.ones(n_steps, dtype=int)
    alive = np.ones(n_steps, dtype=bool)
    while alive.any():
        u = rng.random(n_steps)
        # Group rows by the node they stand on *before* this level moves any of them.
        level = current.copy()
        for node in np.unique(level[alive]):
            kids = children.get(int(node))
            rows = np.flatnonzero(alive & (level == node))
            if kids is None:
                alive[rows] = False
                continue
            pick = np.searchsorted(np.cumsum(a[kids]), u[rows], side="right")
            moved = pick < len(kids)
            current[rows[moved]] = kids[pick[moved]]
            lengths[rows[moved]] += 1
            alive[rows[~moved]] = False
    return lengths

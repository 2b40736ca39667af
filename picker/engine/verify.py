"""Exact verification of draft chains and token trees, as pure functions.

Notation (Leviathan et al. 2023; Chen et al. 2023): ``d_i`` are the draft tokens, ``q_i`` the target
distribution at draft position i (after the pending token and ``d_1 .. d_{i-1}``), ``p_i`` the draft
distribution ``d_i`` was drawn from. Every verifier returns a :class:`VerifyResult`: the accepted
draft tokens followed by exactly one extra token, which is the correction (sampled at the first
rejection) or the bonus (sampled from ``q_{N+1}`` after full acceptance).

    >>> import numpy as np
    >>> q = np.array([[0.1, 0.9], [0.8, 0.2], [0.5, 0.5]])   # q_1, q_2, q_3 for two drafts
    >>> verify_greedy_chain([1, 1], q)                      # d_2 = 1 is not argmax q_2 = 0
    VerifyResult(num_accepted=1, tokens=(1, 0), accepted_nodes=(0,))
    >>> r = verify_sample_chain([1, 0], None, q, np.random.default_rng(0))
    >>> len(r.tokens) == r.num_accepted + 1
    True

Inputs are probability rows (array-likes of shape ``(rows, V)``, warped by
:func:`picker.engine.sampling.warp_pair`); the greedy verifiers also take logits (ties: lowest index).
Randomness comes only from the ``numpy.random.Generator`` passed in. The ``*_batch`` variants verify
B sequences at once and draw the same uniforms as B single calls, so they return the same tokens.

Exact (output distributed as the warped target), each checked by chi-square tests with power in
``tests/test_verify_*.py``:

* chains with ``p``: when ``d_i`` was drawn from ``p_i`` (given ``d_1 .. d_{i-1}``).
* ``p=None`` (deterministic drafts: n-gram, lookahead, top-k tree children): ``d`` is accepted with
  probability ``q(d)``, else the extra token comes from ``q`` without ``d``. Exact for *any*
  drafts however chosen, chain or tree, since each step is exact given the draft token itself.
* trees, ``siblings="iid"``: when each child c was drawn from ``p[c]`` independently of its earlier
  siblings (i.i.d. when their rows are equal), given the path to its parent.
* trees, ``siblings="without_replacement"``: when siblings were drawn one after another from
  ``p[c]`` minus the earlier siblings' tokens, renormalised (Gumbel-top-k is equivalent), in
  sibling order; ``p[c]`` is the parent's draft distribution *before* removal.

Not exact: draft probabilities for children not sampled from them, e.g. top-k children verified
with ``p`` as if i.i.d. (pass ``p=None``), or without-replacement siblings verified as ``"iid"``.
The two sampled-sibling regimes also assume a tree shape fixed before drawing; a shape chosen from
the drawn tokens is exact only through ``p=None``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from picker.engine.sampling import FloatArray, IntArray, inverse_cdf, inverse_cdf_batch
from picker.engine.tree import TokenTree

__all__ = [
    "BatchVerifyResult",
    "SiblingRegime",
    "VerifyResult",
    "verify_greedy_chain",
    "verify_greedy_tree",
    "verify_sample_chain",
    "verify_sample_chain_batch",
    "verify_sample_tree",
    "verify_sample_tree_batch",
]

SiblingRegime = Literal["iid", "without_replacement"]


@dataclass(frozen=True)
class VerifyResult:
    """Accepted drafts plus one extra token; ``accepted_nodes`` index the draft chain or tree."""

    num_accepted: int
    tokens: tuple[int, ...]  # accepted draft tokens, then the correction or bonus token
    accepted_nodes: tuple[int, ...]  # node indices on the accepted path (chains: 0..num_accepted-1)

    def __post_init__(self) -> None:
        if (
            len(self.tokens) != self.num_accepted + 1
            or len(self.accepted_nodes) != self.num_accepted
        ):
            n = self.num_accepted
            raise ValueError(
                f"VerifyResult: {n} accepted needs {n + 1} tokens and {n} nodes, "
                f"got {len(self.tokens)} and {len(self.accepted_nodes)}"
            )

    @property
    def extra_token(self) -> int:
        """The correction or bonus token: emitted now, fed to the target with the next forward."""
        return self.tokens[-1]


def verify_greedy_chain(draft: Sequence[int], q: ArrayLike) -> VerifyResult:
    """Accept while ``d_i == argmax q_i``; the extra token is the argmax at the first mismatch.

    ``q`` has shape ``(N + 1, V)``: target probabilities or logits after the pending token and
    after each ``d_i``; after full acceptance the bonus is ``argmax q_{N+1}``.
    """
    tokens = [int(d) for d in draft]
    q_rows = _shaped(q, (len(tokens) + 1, None), "q")
    best = np.argmax(q_rows, axis=-1)  # one vectorised pass; ties -> lowest index
    n = len(tokens)
    for i, d in enumerate(tokens):
        if d != best[i]:
            n = i
            break
    return VerifyResult(n, (*tokens[:n], int(best[n])), tuple(range(n)))


def verify_sample_chain(
    draft: Sequence[int],
    p: ArrayLike | None,
    q: ArrayLike,
    rng: np.random.Generator,
) -> VerifyResult:
    """Speculative sampling of a chain (Leviathan et al. 2023, Algorithm 1; Chen et al. 2023).

    Accept ``d_i`` with probability ``min(1, q_i(d_i) / p_i(d_i))``; at the first rejection sample
    the correction from ``norm(max(0, q_i - p_i))``; after all N accepted sample the bonus from
    ``q_{N+1}``. ``p`` has shape ``(N, V)``, or is ``None`` for deterministic drafts (one-hot
    ``p``: accept with probability ``q_i(d_i)``, correct from ``q_i`` without ``d_i``).
    ``q`` has shape ``(N + 1, V)``; its rows must be distributions. Raises ``ValueError`` when
    ``p_i(d_i) == 0``: ``d_i`` cannot have been drawn from ``p_i`` (usually ``p`` was warped
    differently from the draft). Draws N + 1 uniforms per call, whatever is accepted.
    """
    tokens = [int(d) for d in draft]
    n = len(tokens)
    q_rows = _shaped(q, (n + 1, None), "q")
    p_rows = None if p is None else _shaped(p, (n, q_rows.shape[1]), "p")
    # One generator call for all coins and the final draw: numpy calls dominate at small V.
    u = rng.random(n + 1).tolist()
    for i, d in enumerate(tokens):
        p_d = 1.0 if p_rows is None else p_rows[i, d]
        if not p_d > 0.0:
            raise ValueError(f"verify_sample_chain: draft token {d} at position {i} has p = 0")
        # u < q/p happens with probability min(1, q/p); multiplying avoids a division.
        if u[i] * p_d < q_rows[i, d]:
            continue
        weights = _rejected_mass(q_rows[i], None if p_rows is None else p_rows[i], d)
        return VerifyResult(i, (*tokens[:i], inverse_cdf(weights, u[n])), tuple(range(i)))
    return VerifyResult(n, (*tokens, inverse_cdf(q_rows[n], u[n])), tuple(range(n)))


def verify_greedy_tree(tree: TokenTree, q: ArrayLike) -> VerifyResult:
    """Walk from the root taking the child (in sibling order) whose token is the target argmax.

    ``q`` has shape ``(M + 1, V)``: ``q[0]`` at the root, ``q[1 + i]`` after node i (probabilities
    or logits). Stops when no child matches; the extra token is the argmax at the last accepted
    node (at the root if none was accepted).
    """
    q_rows = _shaped(q, (len(tree) + 1, None), "q")
    node = -1
    accepted: list[int] = []
    while True:
        best = int(np.argmax(q_rows[node + 1]))
        match = [c for c in tree.children(node) if tree.tokens[c] == best]
        if not match:
            break
        node = match[0]  # duplicate siblings: the first in sibling order wins
        accepted.append(node)
    path_tokens = tuple(tree.tokens[c] for c in accepted)
    return VerifyResult(len(accepted), (*path_tokens, best), tuple(accepted))


def verify_sample_tree(
    tree: TokenTree,
    p: ArrayLike | None,
    q: ArrayLike,
    rng: np.random.Generator,
    siblings: SiblingRegime = "iid",
) -> VerifyResult:
    """Recursive rejection sampling over siblings (SpecInfer; EAGLE; Jeon et al. 2024).

    From the root, try the current node's children in sibling order: accept child c with
    probability ``min(1, q(c) / p_c(c))``; on rejection set ``q <- norm(max(0, q - p_c))`` and try
    the next sibling against that residual. An accepted child becomes the current node, with
    ``q <- q[1 + c]``. When no child is accepted (or the node is a leaf) the extra token is sampled
    from the current, possibly residual, ``q``.

    ``q``: shape ``(M + 1, V)``, ``q[0]`` at the root, ``q[1 + i]`` after node i.
    ``p``: shape ``(M, V)``, ``p[i]`` = the draft distribution node i's token was drawn from (its
    parent's draft distribution), or ``None`` for deterministic children (one-hot ``p_c``).
    ``siblings``: how the children of one node were drawn from ``p`` — ``"iid"`` (``p_c = p[c]``)
    or ``"without_replacement"`` (``p_c = p[c]`` with earlier siblings' tokens zeroed and
    renormalised). Ignored when ``p`` is None. See the module docstring for which regimes are exact.
    """
    if siblings not in ("iid", "without_replacement"):
        raise ValueError(f"verify_sample_tree: unknown siblings regime {siblings!r}")
    q_rows = _shaped(q, (len(tree) + 1, None), "q")
    p_rows = None if p is None else _shaped(p, (len(tree), q_rows.shape[1]), "p")
    exclude = p_rows is not None and siblings == "without_replacement"
    u = rng.random(len(tree) + 1).tolist()  # each node is tried at most once, plus the extra draw
    coin = 0
    node = -1
    accepted: list[int] = []
    while True:
        # The running target is q = w / mass, kept unnormalised to save a division per rejection.
        w, mass = q_rows[node + 1], 1.0
        chosen: int | None = None
        # Earlier siblings' tokens: removed from p_c when siblings were drawn w/o replacement.
        drawn: list[int] = []
        for c in tree.children(node):
            x = tree.tokens[c]
            p_c = None if p_rows is None else _sibling_draft(p_rows[c], drawn if exclude else [])
            p_x = 1.0 if p_c is None else p_c[x]
            if not p_x > 0.0:
                raise ValueError(
                    f"verify_sample_tree: node {c} (token {x}) has p = 0 under {siblings!r}"
                )
            coin += 1
            if u[coin - 1] * p_x * mass < w[x]:  # accept with probability min(1, q(x) / p_c(x))
                chosen = c
                break
            w, mass = _tree_residual(w, mass, p_c, x)
            drawn.append(x)
        if chosen is None:
            break
        node = chosen
        accepted.append(node)
    path_tokens = tuple(tree.tokens[c] for c in accepted)
    # w always keeps some mass: _tree_residual never empties it.
    return VerifyResult(len(accepted), (*path_tokens, inverse_cdf(w, u[-1])), tuple(accepted))


@dataclass(frozen=True)
class BatchVerifyResult:
    """Row-wise :class:`VerifyResult` for B sequences verified at once; ``result[b]`` is row b."""

    num_accepted: IntArray  # (B,)
    tokens: IntArray  # (B, D + 1): accepted tokens, the extra token, then -1 padding
    accepted_nodes: IntArray  # (B, D): accepted path, then -1 padding

    def __getitem__(self, b: int) -> VerifyResult:
        n = int(self.num_accepted[b])
        nodes = tuple(int(v) for v in self.accepted_nodes[b, :n])
        return VerifyResult(n, tuple(int(t) for t in self.tokens[b, : n + 1]), nodes)


def verify_sample_chain_batch(
    drafts: ArrayLike, p: ArrayLike | None, q: ArrayLike, rng: np.random.Generator
) -> BatchVerifyResult:
    """:func:`verify_sample_chain` for B chains at once, vectorised over the batch.

    ``drafts`` ``(B, N)``, ``p`` ``(B, N, V)`` or None, ``q`` ``(B, N + 1, V)``. Draws the same
    uniforms in the same order as B calls of the single-chain verifier, and returns the same
    tokens for the same generator state: the two are one function, checked by a coupling test.
    """
    d = np.asarray(drafts, dtype=np.int64)
    batch, n = d.shape
    q3 = _shaped(q, (batch, n + 1, None), "q")
    p3 = None if p is None else _shaped(p, (batch, n, q3.shape[2]), "p")
    u = rng.random((batch, n + 1))
    rows, pos = np.arange(batch), np.arange(n)
    q_d = q3[rows[:, None], pos, d]
    p_d = np.ones_like(q_d) if p3 is None else p3[rows[:, None], pos, d]
    if not np.all(p_d > 0.0):
        raise ValueError("verify_sample_chain_batch: a draft token has p = 0")
    ok = u[:, :n] * p_d < q_d
    # Accepted prefix length: the index of the first rejection, or N when all were accepted.
    n_acc = np.where(ok.all(axis=1), n, np.argmin(ok, axis=1)) if n else np.zeros(batch, np.int64)
    q_k = q3[rows, n_acc]
    weights = q_k.copy()
    rej = np.flatnonzero(n_acc < n)
    if rej.size:
        if p3 is None:
            weights[rej, d[rej, n_acc[rej]]] = 0.0
        else:
            w = q_k[rej] - p3[rej, n_acc[rej]]
            weights[rej] = np.maximum(w, 0.0, out=w)
        empty = ~weights.any(axis=1)  # q == p up to rounding: as in _rejected_mass
        weights[empty] = q_k[empty]
    extra = inverse_cdf_batch(weights, u[:, n])
    nodes = np.where(pos[None, :] < n_acc[:, None], pos[None, :], -1)
    return _batch_result(n_acc, np.where(nodes >= 0, d, -1), nodes, extra)


def verify_sample_tree_batch(
    parents: Sequence[int],
    tokens: ArrayLike,
    p: ArrayLike | None,
    q: ArrayLike,
    rng: np.random.Generator,
    siblings: SiblingRegime = "iid",
) -> BatchVerifyResult:
    """:func:`verify_sample_tree` for B trees of one shape (``parents``) at once.

    ``tokens`` ``(B, M)``, ``p`` ``(B, M, V)`` or None, ``q`` ``(B, M + 1, V)``. Same uniforms,
    same order, same results as B calls of the single-tree verifier (checked by a coupling test).
    """
    if siblings not in ("iid", "without_replacement"):
        raise ValueError(f"verify_sample_tree_batch: unknown siblings regime {siblings!r}")
    tok = np.asarray(tokens, dtype=np.int64)
    batch, m = tok.shape
    shape = TokenTree((0,) * m, tuple(parents))
    q3 = _shaped(q, (batch, m + 1, None), "q")
    p3 = None if p is None else _shaped(p, (batch, m, q3.shape[2]), "p")
    exclude = p3 is not None and siblings == "without_replacement"
    kids = shape.children_table()
    u = rng.random((batch, m + 1))
    coin = np.zeros(batch, dtype=np.int64)  # uniforms used so far, per row
    node = np.full(batch, -1, dtype=np.int64)
    path = np.full((batch, shape.max_depth), -1, dtype=np.int64)
    w, mass = q3[:, 0].copy(), np.ones(batch)  # running target w / mass, as in the single verifier
    live = np.ones(batch, dtype=bool)
    for level in range(shape.max_depth):
        chosen = _try_children_rows(kids[node + 1], live, tok, p3, exclude, u, coin, w, mass)
        live = chosen >= 0
        if not live.any():
            break
        node[live] = path[live, level] = chosen[live]
        w[live], mass[live] = q3[live, 1 + node[live]], 1.0
    extra = inverse_cdf_batch(w, u[:, m])
    n_acc = (path >= 0).sum(axis=1)
    path_tokens = np.where(path >= 0, np.take_along_axis(tok, np.maximum(path, 0), axis=1), -1)
    return _batch_result(n_acc, path_tokens, path, extra)


def _shaped(x: ArrayLike, shape: tuple[int | None, ...], name: str) -> FloatArray:
    """View ``x`` as float64 (no copy when it already is) and check its shape; None = any size."""
    a = np.asarray(x, dtype=np.float64)
    if a.ndim != len(shape) or any(
        w is not None and g != w for g, w in zip(a.shape, shape, strict=False)
    ):
        want = "(" + ", ".join("V" if w is None else str(w) for w in shape) + ")"
        raise ValueError(f"{name}: expected shape {want}, got {a.shape}")
    return a


def _rejected_mass(q_i: FloatArray, p_i: FloatArray | None, d: int) -> FloatArray:
    """Unnormalised ``max(0, q_i - p_i)``, with one-hot ``p_i`` at ``d`` when ``p_i`` is None.

    If it is empty (``q_i == p_i``), rejection had probability zero and only rounding got here:
    return ``q_i``, as :func:`picker.engine.sampling.residual` does, rather than fail.
    """
    if p_i is None:
        w = q_i.copy()
        w[d] = 0.0  # max(0, q - onehot(d)) is q with d removed, since q(d) <= 1
    else:
        w = q_i - p_i
        np.maximum(w, 0.0, out=w)
    return w if w.any() else q_i


def _tree_residual(
    w: FloatArray, mass: float, p_c: FloatArray | None, x: int
) -> tuple[FloatArray, float]:
    """``q <- norm(max(0, q - p_c))`` for the running target ``q = w / mass`` (unnormalised)."""
    if p_c is None:
        new_w = w.copy()
        new_w[x] = 0.0
    else:
        new_w = w - mass * p_c
        np.maximum(new_w, 0.0, out=new_w)
    new_mass = float(new_w.sum())
    # Empty residual: rejection had probability zero (q == p_c up to rounding); keep q as it was.
    return (new_w, new_mass) if new_mass > 0.0 else (w, mass)


def _sibling_draft(p_c: FloatArray, drawn: list[int]) -> FloatArray:
    """``p_c`` with the earlier siblings' tokens removed and renormalised (no-op when none)."""
    if not drawn:
        return p_c
    out = p_c.copy()
    out[drawn] = 0.0
    total = out.sum()
    if not total > 0.0:
        raise ValueError("verify_sample_tree: more siblings than tokens in the draft's support")
    return out / total


def _try_children_rows(
    kids: IntArray,
    live: NDArray[np.bool_],
    tok: IntArray,
    p3: FloatArray | None,
    exclude: bool,
    u: FloatArray,
    coin: IntArray,
    w: FloatArray,
    mass: FloatArray,
) -> IntArray:
    """One level of the batched tree walk: each live row tries its node's children in order.

    ``kids`` ``(B, K)`` holds each row's children (-1 padded). Updates the running target
    ``(w, mass)`` and the per-row uniform counter ``coin`` in place; returns the accepted child
    per row, or -1.
    """
    chosen = np.full(kids.shape[0], -1, dtype=np.int64)
    drawn = np.zeros(w.shape, dtype=bool) if exclude else None  # rejected siblings' tokens
    for rank in range(kids.shape[1]):
        t = np.flatnonzero(live & (chosen < 0) & (kids[:, rank] >= 0))
        if not t.size:
            break
        c = kids[t, rank]
        x = tok[t, c]
        p_c = None if p3 is None else p3[t, c]
        if p_c is not None and drawn is not None and rank > 0:  # w/o replacement: renormalise
            p_c = np.where(drawn[t], 0.0, p_c)
            p_c /= _positive(p_c.sum(axis=1), "more siblings than tokens in p's support")[:, None]
        p_x = np.ones(t.size) if p_c is None else p_c[np.arange(t.size), x]
        _positive(p_x, "a tree node has p = 0")
        acc = u[t, coin[t]] * p_x * mass[t] < w[t, x]  # probability min(1, q(x) / p_c(x))
        coin[t] += 1
        chosen[t[acc]] = c[acc]
        _tree_residual_rows(w, mass, t[~acc], None if p_c is None else p_c[~acc], x[~acc])
        if drawn is not None:
            drawn[t[~acc], x[~acc]] = True
    return chosen


def _positive(x: FloatArray, message: str) -> FloatArray:
    if not np.all(x > 0.0):
        raise ValueError(f"verify_sample_tree_batch: {message}")
    return x


def _tree_residual_rows(
    w: FloatArray, mass: FloatArray, t: IntArray, p_c: FloatArray | None, x: IntArray
) -> None:
    """Row-wise :func:`_tree_residual` on rows ``t`` of the running ``(w, mass)``, in place."""
    if not t.size:
        return
    if p_c is None:
        new_w = w[t]
        new_w[np.arange(t.size), x] = 0.0
    else:
        new_w = w[t] - mass[t][:, None] * p_c
        np.maximum(new_w, 0.0, out=new_w)
    new_mass = new_w.sum(axis=1)
    keep = new_mass > 0.0  # empty residual: rejection had probability zero, keep q as it was
    w[t[keep]], mass[t[keep]] = new_w[keep], new_mass[keep]


def _batch_result(
    n_acc: IntArray, path_tokens: IntArray, nodes: IntArray, extra: IntArray
) -> BatchVerifyResult:
    batch, depth = nodes.shape
    toks = np.full((batch, depth + 1), -1, dtype=np.int64)
    toks[:, :depth] = path_tokens
    toks[np.arange(batch), n_acc] = extra
    return BatchVerifyResult(n_acc.astype(np.int64), toks, nodes)

"""Probability helpers for exact verification: warping logits, residuals and sampling.

Everything works on float64 numpy arrays over the vocabulary (the last axis) and accepts any
array-like, so the decode loop can pass ``tensor.numpy()`` straight in. Randomness comes only from
a caller-supplied :class:`numpy.random.Generator`. Notation follows Leviathan et al. (2023) and
Chen et al. (2023): ``q`` is the target distribution, ``p`` the draft distribution.

    >>> import numpy as np
    >>> q, p = warp_pair([2.0, 1.5, 0.0, -1.0], [0.0, 1.0, 2.0, -1.0], temperature=1.0, top_k=3)
    >>> bool(q[3] == 0.0 and p[3] == 0.0)          # top-k removed the same tail from both
    True
    >>> residual(q, p).round(3)                     # norm(max(0, q - p)): mass only where q > p
    array([0.824, 0.176, 0.   , 0.   ])
    >>> sample(q, np.random.default_rng(0)) in (0, 1, 2)
    True

Warping order (the usual one): temperature, then top-k on the logits, then top-p on the
renormalised top-k distribution. Verification is exact only for the *warped* target, and only if
the very same warp is applied to ``q`` and ``p`` (use :func:`warp_pair`).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

_TOP_P_FIRST_LOOK = 256  # top-p candidates examined before falling back to a full sort

__all__ = [
    "FloatArray",
    "IntArray",
    "NoMassError",
    "inverse_cdf",
    "inverse_cdf_batch",
    "one_hot",
    "residual",
    "sample",
    "sample_batch",
    "softmax",
    "warp",
    "warp_pair",
]


class NoMassError(ValueError):
    """Sampling was asked for from weights that are all zero."""


def softmax(logits: ArrayLike, axis: int = -1) -> FloatArray:
    """Softmax along ``axis``; ``-inf`` logits get 0; an all-``-inf`` row is an error."""
    x = np.asarray(logits, dtype=np.float64)
    top = np.max(x, axis=axis, keepdims=True)
    if np.any(np.isneginf(top)):
        raise ValueError("softmax: a row has no finite logit")
    # Subtracting the row maximum keeps exp() from overflowing and makes the result shift-invariant.
    e = np.exp(x - top)
    return e / e.sum(axis=axis, keepdims=True)


def one_hot(token: int | ArrayLike, vocab: int) -> FloatArray:
    """Point mass(es) on ``token``: shape ``(vocab,)`` for an int, else ``(*shape, vocab)``."""
    t = np.asarray(token, dtype=np.int64)
    if np.any(t < 0) or np.any(t >= vocab):
        raise ValueError(f"one_hot: token out of range for vocab {vocab}")
    out = np.zeros((*t.shape, vocab), dtype=np.float64)
    np.put_along_axis(out, t[..., None], 1.0, axis=-1)
    return out


def warp(
    logits: ArrayLike,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
) -> FloatArray:
    """Turn logits into the sampling distribution: temperature, then top-k, then top-p.

    ``temperature == 0`` means greedy: a one-hot on the argmax, ties going to the lowest index
    (``numpy.argmax``); top-k/top-p cannot change that, since the argmax survives both.
    Ties inside top-k and at the top-p boundary are also broken towards the lowest index, so the
    result is a deterministic function of the logits. Works row-wise on ``(..., V)``.

    Apply the same call to the target and the draft logits (:func:`warp_pair`): the verifier is
    exact for the warped target only when ``p`` was warped identically.
    """
    x = np.asarray(logits, dtype=np.float64)
    vocab = x.shape[-1]
    _check_warp_args(vocab, temperature, top_k, top_p)
    if temperature == 0:
        return one_hot(np.argmax(x, axis=-1), vocab)
    probs = softmax(x / temperature)
    if top_k is not None and top_k < vocab:
        # Temperature > 0 preserves order, so ranking raw logits equals ranking probabilities,
        # and it is exactly invariant to adding a constant to the logits.
        probs = np.where(_top_k_mask(x, top_k), probs, 0.0)
        probs /= probs.sum(axis=-1, keepdims=True)
    if top_p is not None and top_p < 1.0:
        probs = _top_p(probs, top_p)
    return probs


def warp_pair(
    q_logits: ArrayLike,
    p_logits: ArrayLike | None,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
) -> tuple[FloatArray, FloatArray | None]:
    """Warp target and draft logits alike; ``p_logits=None`` (deterministic draft) stays None."""
    q = warp(q_logits, temperature, top_k, top_p)
    p = None if p_logits is None else warp(p_logits, temperature, top_k, top_p)
    return q, p


def residual(q: ArrayLike, p: ArrayLike) -> FloatArray:
    """``norm(max(0, q - p))``: where to sample after the draft token was rejected.

    Degenerate case: when ``q == p`` (or ``q <= p`` everywhere) the positive part is empty. The
    rejection probability is ``sum(max(0, p - q)) = sum(max(0, q - p)) = 0`` then, so the
    residual is never sampled; we still return ``q`` (a valid distribution) instead of dividing
    by zero, so a rounding-level rejection cannot crash the loop. Works row-wise on ``(..., V)``.
    """
    qa = np.asarray(q, dtype=np.float64)
    r = np.maximum(qa - np.asarray(p, dtype=np.float64), 0.0)
    mass = r.sum(axis=-1, keepdims=True)
    empty = mass <= 0.0
    if not np.any(empty):
        return r / mass
    return np.where(empty, qa, r / np.where(empty, 1.0, mass))


def sample(weights: ArrayLike, rng: np.random.Generator) -> int:
    """Draw one index from non-negative ``weights`` of shape ``(V,)`` (normalised implicitly)."""
    return inverse_cdf(weights, rng.random())


def inverse_cdf(weights: ArrayLike, u: float) -> int:
    """The index whose CDF bracket holds ``u * sum(weights)``, for a uniform ``u`` in [0, 1).

    O(V), and never an index of zero weight. Split from :func:`sample` so a verifier can draw all
    its uniforms in one generator call (each numpy call costs microseconds at small V).
    """
    w = np.asarray(weights, dtype=np.float64)
    cdf = w.cumsum()  # array methods: np.cumsum's dispatch alone costs microseconds at small V
    total = cdf[-1]
    if not total > 0.0:
        raise NoMassError("sample: weights have no positive mass")
    # side="right" skips zero-weight entries: it returns the first i with cdf[i] > u·total.
    i = int(cdf.searchsorted(u * total, side="right"))
    if i >= w.shape[0]:  # u·total rounded up to total: fall back to the last positive entry
        i = int(np.flatnonzero(w > 0.0)[-1])
    return i


def sample_batch(weights: ArrayLike, rng: np.random.Generator) -> IntArray:
    """Draw one index per row of non-negative ``weights`` ``(B, V)``; returns shape ``(B,)``."""
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 2:
        raise ValueError(f"sample_batch: expected (B, V) weights, got shape {w.shape}")
    return inverse_cdf_batch(w, rng.random(w.shape[0]))


def inverse_cdf_batch(weights: ArrayLike, u: ArrayLike) -> IntArray:
    """Row-wise :func:`inverse_cdf`: ``weights`` ``(B, V)``, uniforms ``u`` ``(B,)``."""
    w = np.asarray(weights, dtype=np.float64)
    cdf = w.cumsum(axis=-1)
    total = cdf[:, -1]
    if not np.all(total > 0.0):
        raise NoMassError("sample_batch: a row has no positive mass")
    # Counting cdf entries <= u·total is searchsorted(side="right") on a non-decreasing cdf.
    idx = np.sum(cdf <= (np.asarray(u, dtype=np.float64) * total)[:, None], axis=-1)
    over = idx >= w.shape[1]
    if np.any(over):  # same rounding guard as inverse_cdf(): last positive entry of those rows
        idx[over] = w.shape[1] - 1 - np.argmax(w[over, ::-1] > 0.0, axis=-1)
    return idx.astype(np.int64)


def _check_warp_args(
    vocab: int, temperature: float, top_k: int | None, top_p: float | None
) -> None:
    if vocab < 1:
        raise ValueError("warp: empty vocabulary")
    if not temperature >= 0.0:
        raise ValueError(f"warp: temperature must be >= 0, got {temperature}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"warp: top_k must be >= 1, got {top_k}")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise ValueError(f"warp: top_p must be in (0, 1], got {top_p}")


def _top_k_mask(x: FloatArray, k: int) -> NDArray[np.bool_]:
    """Keep the k largest entries per row, ties at the k-th value going to the lowest indices.

    O(V) via ``np.partition`` rather than a full sort.
    """
    vocab = x.shape[-1]
    kth = np.partition(x, vocab - k, axis=-1)[..., vocab - k : vocab - k + 1]
    above = x > kth
    still_needed = k - above.sum(axis=-1, keepdims=True)
    tie = x == kth
    return above | (tie & (np.cumsum(tie, axis=-1) <= still_needed))


def _top_p(probs: FloatArray, top_p: float) -> FloatArray:
    """Keep the smallest prefix (by decreasing probability, then index) whose mass is >= top_p."""
    out = np.empty_like(probs)
    for idx in np.ndindex(probs.shape[:-1]):
        out[idx] = _top_p_row(probs[idx], top_p)
    return out


def _top_p_row(row: FloatArray, top_p: float) -> FloatArray:
    vocab = row.size
    # The kept prefix is usually short: look among the largest entries first (O(V) partition),
    # and sort the whole vocabulary only if they do not hold top_p of the mass.
    for k in (min(vocab, _TOP_P_FIRST_LOOK), vocab):
        kth = np.partition(row, vocab - k)[vocab - k]
        # All entries >= the k-th largest (ties included) form a prefix of the sorted order.
        cand = np.flatnonzero((row >= kth) & (row > 0.0))
        vals = row[cand]
        if vals.sum() >= top_p:
            break
    order = np.argsort(-vals, kind="stable")  # cand is ascending: ties stay in index order
    sorted_vals = vals[order]
    before = np.concatenate(([0.0], np.cumsum(sorted_vals)[:-1]))  # mass strictly before each
    keep = cand[order[before < top_p]]
    out = np.zeros_like(row)
    out[keep] = row[keep]
    return out / out.sum()

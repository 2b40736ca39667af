"""What a sampled tree's later siblings would have accepted, measured on a chain's rejections.

A tree's value over a chain is in its siblings: when the first child is rejected, the verifier
tries the next one against the residual target (``picker.verify.verify_sample_tree``). The policy
needs the conditional acceptance ``s_k`` of the k-th sibling given that ranks 1..k-1 were rejected.
Assuming ``s_k = α`` (the sibling model in ``policies.theory``) overstates sampled trees: after a
rejection the residual keeps only the mass the draft *under*-proposed, where the draft is least
likely to draw from. This module measures ``s_k`` from the rejections a chain run already has, at no
extra target forward: at a rejected position i both distributions are known (``q_i`` the target,
``p_i`` the draft, ``d`` the rejected token), so the later siblings' odds can be computed.

Regime: siblings drawn one after another *without replacement* from ``p_i`` (Gumbel-top-k), the
regime ``picker.verify`` calls ``"without_replacement"`` and Medusa's sampled trees use. Rank 2 is
exact, ``Σ_y min(p₂(y), r₁(y))``; ranks ≥ 3 depend on which tokens ranks 2.. drew, so one draw per
rank from a generator of their own (never the generation's) gives an unbiased estimate of the
expected counts, each weighted by the probability that the earlier ranks were rejected
(Rao-Blackwellised: no coin is flipped for acceptance).

    >>> import numpy as np
    >>> q = np.array([0.5, 0.3, 0.2]); p = np.array([0.2, 0.2, 0.6])   # d = 2 was rejected
    >>> reached, accepted = sibling_counts(q, p, 2, topk=2, rng=np.random.default_rng(0))
    >>> reached.tolist(), round(float(accepted[0]), 3)     # p₂ = (.5, .5); r₁ = (.75, .25, 0)
    ([1.0], 0.75)
"""

from __future__ import annotations

import numpy as np

from picker.sampling import FloatArray

__all__ = ["sibling_counts"]


def sibling_counts(q: FloatArray, p: FloatArray, d: int, *, topk: int,
                   rng: np.random.Generator) -> tuple[FloatArray, FloatArray]:
    """Expected (reached, accepted) counts of ranks 2..``topk`` after rank 1 (``d``) was rejected.

    ``q``, ``p``: the target's and the draft's (warped) distributions at the rejected position.
    Returns two arrays of length ``topk - 1``; ``accepted[j] / reached[j]`` estimates ``s_{j+2}``.
    Ranks past the draft's support are not reached (a tree cannot draw them either).
    """
    if topk < 1:
        raise ValueError("topk must be at least 1")
    reached = np.zeros(topk - 1)
    accepted = np.zeros(topk - 1)
    r = _residual(q, p)
    q, draft = np.asarray(q, dtype=float), np.array(p, dtype=float)
    weight = 1.0  # probability that every earlier rank was rejected
    drawn = d
    for j in range(topk - 1):
        draft[drawn] = 0.0
        mass = draft.sum()
        if not mass > 0.0 or weight <= 0.0:
            break
        p_k = draft / mass
        odds = np.minimum(p_k, r)  # P(rank k draws y and accepts it), per y
        reached[j] = weight
        accepted[j] = weight * float(odds.sum())
        # The next rank's odds depend on which token this rank drew: draw one, keep its rejection.
        y = int(rng.choice(p_k.size, p=p_k))
        weight *= 1.0 - float(odds[y] / p_k[y])
        r = _residual(r, p_k)
        drawn = y
        draft = p_k
    return reached, accepted


def _residual(q: FloatArray, p: FloatArray) -> FloatArray:
    """``norm(max(0, q - p))``; ``q`` itself when that is empty (rejection had probability 0)."""
    w = np.maximum(q - p, 0.0)
    total = w.sum()
    return w / total if total > 0.0 else q

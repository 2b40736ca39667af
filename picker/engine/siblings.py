"""What a sampled tree's later siblings would have accepted, measured on a chain's rejections.

A tree's value over a chain is in its siblings: when the first child is rejected, the verifier
tries the next one against the residual target (``picker.engine.verify.verify_sample_tree``). The policy
needs the conditional acceptance ``s_k`` of the k-th sibling given that ranks 1..k-1 were rejected.
Assuming ``s_k = α`` (the sibling model in ``policies.theory``) overstates sampled trees: after a
rejection the residual keeps only the mass the draft *under*-proposed, where the draft is least
likely to draw from. This module measures ``s_k`` from the rejections a chain run already has, at no
extra target forward: at a rejected position i both distributions are known (``q_i`` the target,
``p_i`` the draft, ``d`` the rejected token), so the later siblings' odds can be computed.

Greedy (T = 0): a tree's children are the drafter's top-k tokens and the verifier accepts the one
equal to the target's argmax, so rank r is accepted exactly when the target's token is the drafter's
r-th choice: :func:`greedy_sibling_counts` reads that rank from the drafter's scores at the
rejected position (the optional profiling hook ``last_scores()`` of drafters that rank tokens).

:class:`SiblingProbe` is the observer the profiler attaches to the loop
(``picker.engine.loop.serve(..., observer=probe)``): none of this rides in the drafter contract.

Sampling: siblings drawn one after another *without replacement* from ``p_i`` (Gumbel-top-k), the
regime ``picker.engine.verify`` calls ``"without_replacement"`` and Medusa's sampled trees use. Rank 2 is
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

import time

import numpy as np

from picker.engine.drafting import Draft, Drafter, SamplingParams
from picker.engine.sampling import FloatArray, residual, warp
from picker.engine.verify import VerifyResult

__all__ = ["SiblingProbe", "greedy_sibling_counts", "sibling_counts"]
Counts = tuple[tuple[float, ...], tuple[float, ...]]


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
    r = residual(q, p)  # the verifier's target after rank 1 was rejected
    draft = np.array(p, dtype=float)
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
        r = residual(r, p_k)
        drawn = y
        draft = p_k
    return reached, accepted


def greedy_sibling_counts(scores: FloatArray, target: int, drafted: int, *,
                          topk: int) -> tuple[FloatArray, FloatArray] | None:
    """(reached, accepted) of ranks 2..``topk`` of a greedy top-k tree at a rejected position.

    ``scores``: the drafter's scores over the vocabulary there (any monotone transform of its
    probabilities; ties rank the lower id first); ``target``: the target's argmax; ``drafted``: the
    rejected token. Rank r is reached when the target's token is not among ranks 1..r-1 and accepted
    when it is rank r. None when ``drafted`` is not the drafter's own first choice (then its ranking
    does not describe what its tree would hold).

        >>> greedy_sibling_counts(np.array([0.1, 0.5, 0.3, 0.1]), target=2, drafted=1, topk=4)
        (array([1., 0., 0.]), array([1., 0., 0.]))
    """
    s = np.asarray(scores, dtype=float)

    def rank(token: int) -> int:
        return int((s > s[token]).sum() + (s[:token] == s[token]).sum())

    if rank(drafted) != 0 or target == drafted:
        return None
    r = rank(target)  # 0-based; >= 1 here
    ranks = np.arange(1, topk)  # 0-based ranks of siblings 2..topk
    return (r >= ranks).astype(float), (r == ranks).astype(float)


class SiblingProbe:
    """Loop observer: at each rejection of a chain, what ranks 2..``topk`` of a tree would have
    accepted there -- a sampled tree's when sampling (the draft sent ``p``), a greedy top-k tree's
    at T = 0 (drafters with ``last_scores()``). It draws from its own generator, so the output is
    unchanged. ``steps[request]`` holds one ``(reached, accepted)`` per step, empty where nothing
    was measured; ``seconds`` is its own time (the loop keeps it out of decoding time).
    """

    def __init__(self, topk: int, seed: int = 0) -> None:
        self.topk, self.rng = topk, np.random.default_rng(seed)
        self.steps: dict[int, list[Counts]] = {}
        self.seconds = 0.0

    def on_step(self, request: int, drafter: Drafter | None, draft: Draft, result: VerifyResult,
                q_logits: np.ndarray, sampling: SamplingParams) -> None:
        t0 = time.perf_counter()
        counts = self._counts(drafter, draft, result, q_logits, sampling)
        self.steps.setdefault(request, []).append(
            ((), ()) if counts is None else (tuple(map(float, counts[0])), tuple(map(float, counts[1]))))
        self.seconds += time.perf_counter() - t0

    def _counts(self, drafter: Drafter | None, draft: Draft, result: VerifyResult, q_logits: np.ndarray,
                sampling: SamplingParams) -> tuple[FloatArray, FloatArray] | None:
        k = result.num_accepted  # the rejected position: q_k and the draft's ranking are known
        if self.topk < 2 or not draft.is_chain or k >= len(draft):
            return None
        if sampling.greedy:
            ranked = getattr(drafter, "last_scores", None)  # optional profiling hook
            scores = ranked() if ranked is not None else None
            if scores is None:
                return None
            return greedy_sibling_counts(scores[k], int(np.argmax(q_logits[k])), draft.tree.tokens[k],
                                         topk=self.topk)
        if draft.p is None:
            return None
        q_k = warp(q_logits[k], sampling.temperature, sampling.top_k, sampling.top_p)
        return sibling_counts(q_k, draft.p[k], draft.tree.tokens[k], topk=self.topk, rng=self.rng)

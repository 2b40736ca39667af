"""The counterfactual sibling odds measured on chain rejections agree with the real tree verifier.

The reference is ``picker.engine.verify.verify_sample_tree`` itself: a one-level tree whose k children
are drawn without replacement from p (Gumbel-top-k, as Medusa's sampled trees draw them), verified
many times; the rank that gets accepted gives each conditional rate s_r. The estimate is what the
profiler computes: rank 1 drawn from p and rejected by ``verify_sample_chain``, then
``sibling_counts`` on that rejection.
"""

from __future__ import annotations

import numpy as np
import pytest

from picker.engine.siblings import sibling_counts
from picker.engine.tree import TokenTree
from picker.engine.verify import verify_sample_chain, verify_sample_tree

TRIALS = 20_000


def _pair(seed: int, v: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    q = rng.dirichlet(np.full(v, 0.6))
    p = 0.5 * q + 0.5 * rng.dirichlet(np.full(v, 0.6))  # a draft that partly agrees with the target
    return q, p


def _tree_rates(q: np.ndarray, p: np.ndarray, k: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(reached, accepted) per rank from the verifier on sampled one-level trees."""
    reached, accepted = np.zeros(k), np.zeros(k)
    q_rows = np.vstack([q] + [q] * k)  # q at the root, then after each child (unused: leaves)
    p_rows = np.vstack([p] * k)
    for _ in range(TRIALS):
        keys = np.log(p) + rng.gumbel(size=p.size)
        kids = np.argsort(-keys)[:k]
        tree = TokenTree(tuple(int(t) for t in kids), (-1,) * k)
        result = verify_sample_tree(tree, p_rows, q_rows, rng, "without_replacement")
        rank = result.accepted_nodes[0] if result.accepted_nodes else k
        reached[: min(rank + 1, k)] += 1
        if rank < k:
            accepted[rank] += 1
    return reached, accepted


def _counterfactual_rates(q: np.ndarray, p: np.ndarray, k: int,
                          rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    reached, accepted = np.zeros(k - 1), np.zeros(k - 1)
    q_rows = np.vstack([q, q])
    for _ in range(TRIALS):
        d = int(rng.choice(p.size, p=p))
        if verify_sample_chain([d], p[None], q_rows, rng).num_accepted:
            continue
        r, a = sibling_counts(q, p, d, topk=k, rng=rng)
        reached += r
        accepted += a
    return reached, accepted


@pytest.mark.parametrize("seed,v,k", [(0, 5, 3), (1, 8, 4), (2, 4, 4)])
def test_counterfactual_sibling_odds_match_the_tree_verifier(seed: int, v: int, k: int) -> None:
    q, p = _pair(seed, v)
    rng = np.random.default_rng(100 + seed)
    t_reached, t_accepted = _tree_rates(q, p, k, rng)
    c_reached, c_accepted = _counterfactual_rates(q, p, k, rng)
    for r in range(1, k):
        n_tree = t_reached[r]
        if n_tree < 500:
            continue  # a rank the verifier rarely reaches: too few trials to compare
        s_tree = t_accepted[r] / n_tree
        s_cf = c_accepted[r - 1] / c_reached[r - 1]
        # Binomial standard error of the tree's rate; the counterfactual's is smaller (no coin).
        se = np.sqrt(max(s_tree * (1 - s_tree), 1e-4) / n_tree)
        assert abs(s_cf - s_tree) < 4 * se + 0.005, (r, s_cf, s_tree, se)


def test_rank_two_is_exact() -> None:
    q, p = _pair(3, 6)
    d = int(np.argmax(p - q))  # a token the draft over-proposes
    reached, accepted = sibling_counts(q, p, d, topk=2, rng=np.random.default_rng(0))
    residual = np.maximum(q - p, 0)
    residual /= residual.sum()
    p2 = p.copy()
    p2[d] = 0
    p2 /= p2.sum()
    assert reached[0] == 1.0
    assert accepted[0] == pytest.approx(np.minimum(p2, residual).sum(), abs=1e-12)


def test_a_draft_with_one_token_has_no_second_sibling() -> None:
    q = np.array([0.2, 0.8])
    p = np.array([1.0, 0.0])
    reached, accepted = sibling_counts(q, p, 0, topk=3, rng=np.random.default_rng(0))
    assert reached.tolist() == [0.0, 0.0] and accepted.tolist() == [0.0, 0.0]

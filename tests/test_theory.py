"""Speedup theory: closed forms against hand values, Monte Carlo, and real rejection sampling."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from policies import theory

STEPS = 200_000  # Monte-Carlo steps per check (>= 1e5 as the theory's CI needs)


def _assert_within_ci(samples: np.ndarray, expected: float, z: float = 5.0) -> None:
    """Mean of ``samples`` within z standard errors of ``expected`` (seeded, so never flaky)."""
    se = samples.std(ddof=1) / np.sqrt(len(samples))
    assert abs(samples.mean() - expected) <= z * se + 1e-12, (samples.mean(), expected, se)


# --- closed forms -------------------------------------------------------------------------------

@pytest.mark.parametrize("alpha", [0.0, 0.1, 0.5, 0.8, 0.95, 1.0])
@pytest.mark.parametrize("n", [0, 1, 3, 8])
def test_iid_matches_geometric_sum(alpha: float, n: int) -> None:
    direct = sum(alpha**k for k in range(n + 1))
    assert theory.expected_length_iid(alpha, n) == pytest.approx(direct, rel=1e-12)


def test_iid_limits_and_stability_near_one() -> None:
    assert theory.expected_length_iid(1.0, 7) == 8.0
    assert theory.expected_length_iid(0.0, 7) == 1.0
    # The naive (1 - a^(n+1)) / (1 - a) loses digits here; the expm1 form must not.
    assert theory.expected_length_iid(1.0 - 1e-12, 7) == pytest.approx(8.0, rel=1e-9)


def test_iid_vectorises_over_alpha_and_n() -> None:
    alphas = np.array([[0.2], [0.6], [0.9]])
    ns = np.array([1, 4, 10])
    grid = theory.expected_length_iid(alphas, ns)
    assert isinstance(grid, np.ndarray) and grid.shape == (3, 3)
    for (i, a), (j, n) in itertools.product(enumerate(alphas[:, 0]), enumerate(ns)):
        assert grid[i, j] == pytest.approx(theory.expected_length_iid(float(a), int(n)))


@pytest.mark.parametrize("alpha, n", [(-0.1, 3), (1.2, 3), (0.5, -1), (0.5, 2.5)])
def test_iid_rejects_bad_input(alpha: float, n: float) -> None:
    with pytest.raises(ValueError):
        theory.expected_length_iid(alpha, np.asarray(n))


def test_leviathan_table1_speeds() -> None:
    # Leviathan et al. 2023 Table 1 (c = 0): α=0.8, γ=5 -> 3.69x; α=0.9, γ=10 -> 6.86x.
    assert theory.speedup(theory.expected_length_iid(0.8, 5), 5, 0.0) == pytest.approx(3.69, abs=0.005)
    assert theory.speedup(theory.expected_length_iid(0.9, 10), 10, 0.0) == pytest.approx(6.86, abs=0.005)


def test_positions_hand_value_and_iid_case() -> None:
    assert theory.expected_length_positions([0.9, 0.5]) == pytest.approx(1 + 0.9 + 0.45)
    assert theory.expected_length_positions([]) == 1.0
    chain = theory.expected_length_iid(0.7, 5)
    assert theory.expected_length_positions([0.7] * 5) == pytest.approx(chain)


def test_tree_hand_value() -> None:
    # root -> A (0.6) -> C (0.5); root -> B (0.3).  E[L] = 1 + 0.6 + 0.3 + 0.6*0.5
    parents, accept = [-1, -1, 0], [0.6, 0.3, 0.5]
    assert theory.expected_length_tree(parents, accept) == pytest.approx(2.2)
    assert list(theory.tree_depths(parents)) == [1, 1, 2]


def test_tree_chain_equals_positions() -> None:
    accept = [0.9, 0.8, 0.6, 0.3]
    assert theory.expected_length_tree([-1, 0, 1, 2], accept) == pytest.approx(
        theory.expected_length_positions(accept))


@pytest.mark.parametrize("parents, accept", [
    ([-1, -1], [0.7, 0.6]),      # siblings sum past 1
    ([1, -1], [0.5, 0.5]),       # parent after child
    ([-1, 0], [0.5]),            # length mismatch
])
def test_tree_rejects_invalid_trees(parents: list[int], accept: list[float]) -> None:
    with pytest.raises(ValueError):
        theory.expected_length_tree(parents, accept)


# --- inversion, speedup, break-even, best N ------------------------------------------------------

@pytest.mark.parametrize("alpha", [0.05, 0.3, 0.62, 0.9, 0.999])
@pytest.mark.parametrize("n", [1, 4, 7])
def test_alpha_from_expected_length_round_trips(alpha: float, n: int) -> None:
    tau = float(theory.expected_length_iid(alpha, n))
    assert theory.alpha_from_expected_length(tau, n) == pytest.approx(alpha, abs=1e-9)


def test_alpha_from_expected_length_edges() -> None:
    assert theory.alpha_from_expected_length(1.0, 4) == 0.0
    assert theory.alpha_from_expected_length(5.0, 4) == 1.0
    with pytest.raises(ValueError, match="bonus"):
        theory.alpha_from_expected_length(5.5, 4)  # τ > N+1: reported without the bonus token?
    with pytest.raises(ValueError):
        theory.alpha_from_expected_length(0.5, 4)


@pytest.mark.parametrize("c", [0.0, 0.02, 0.1, 0.35, 0.7])
def test_break_even_is_alpha_equals_c_for_one_draft(c: float) -> None:
    # FACTS: "speculation can pay only if α > c" is the N = 1, v = 1 case.
    alpha_star = theory.break_even_alpha(1, c)
    assert alpha_star == pytest.approx(c, abs=1e-9)
    if c > 0:
        assert theory.speedup(1 + alpha_star, 1, c) == pytest.approx(1.0)
        assert theory.speedup(1 + c - 0.01, 1, c) < 1.0 < theory.speedup(1 + c + 0.01, 1, c)


@pytest.mark.parametrize("n, c, v", [(4, 0.05, 1.0), (8, 0.1, 1.3), (3, 0.0, 2.0)])
def test_break_even_gives_unit_speedup(n: int, c: float, v: float) -> None:
    alpha_star = theory.break_even_alpha(n, c, v)
    assert theory.speedup(theory.expected_length_iid(alpha_star, n), n, c, v) == pytest.approx(1.0)


def test_break_even_sentinels() -> None:
    assert theory.break_even_alpha(4, 0.0, 1.0) == 0.0   # free drafts, free verify: any α pays
    assert theory.break_even_alpha(4, 0.0, 0.5) == 0.0
    assert theory.break_even_alpha(4, 1.0, 1.0) == 1.0   # N·c + v = N + 1: nothing pays
    assert theory.break_even_alpha(2, 0.5, 3.0) == 1.0
    assert theory.break_even_alpha(2, 0.0, 3.0) == 1.0   # exactly N + 1


def test_break_even_rises_with_verify_cost() -> None:
    values = [theory.break_even_alpha(4, 0.05, v) for v in (1.0, 1.5, 2.0, 3.0)]
    assert values == sorted(values) and values[0] < values[-1]


def test_corollary_3_9_one_draft_pays_when_alpha_above_c() -> None:
    for alpha, c in [(0.3, 0.2), (0.6, 0.5), (0.05, 0.01)]:
        s1 = theory.speedup(theory.expected_length_iid(alpha, 1), 1, c)
        assert s1 >= (1 + alpha) / (1 + c) - 1e-12 and s1 > 1.0


@pytest.mark.parametrize("alpha, c, n_star, s_star", [
    # Optimal γ from Leviathan Thm 3.8, as tabulated in research/policies.md §1 (derived there).
    (0.8, 0.05, 8, 3.09), (0.5, 0.2, 1, 1.25), (0.9, 0.02, 19, 6.37), (0.7, 0.1, 4, 1.98),
])
def test_best_n_matches_tabulated_optimum(alpha: float, c: float, n_star: int, s_star: float) -> None:
    n, s = theory.best_n(alpha, c, n_max=30)
    assert n == n_star and s == pytest.approx(s_star, abs=0.005)


def test_best_n_with_growing_verify_cost_drafts_less() -> None:
    free, _ = theory.best_n(0.8, 0.02)
    costly, _ = theory.best_n(0.8, 0.02, v_of_n=lambda n: 1.0 + 0.15 * n)
    assert costly < free


def test_best_n_positions_and_no_speculation() -> None:
    n, s = theory.best_n([0.9, 0.9, 0.1, 0.1], c=0.05)
    assert n == 2 and s == pytest.approx((1 + 0.9 + 0.81) / 1.1)
    n0, s0 = theory.best_n(0.05, c=0.3, n_min=0)
    assert (n0, s0) == (0, 1.0)


# --- trees ---------------------------------------------------------------------------------------

def test_sibling_acceptance_is_a_distribution() -> None:
    s = theory.sibling_acceptance(0.6, 5)
    assert s[0] == pytest.approx(0.6) and s[1] == pytest.approx(0.24)
    assert s.sum() == pytest.approx(1 - 0.4**5)


def test_best_tree_topk1_is_the_chain() -> None:
    parents, accept = theory.best_tree(theory.sibling_acceptance(0.7, 1), 6)
    assert parents == [-1, 0, 1, 2, 3, 4]
    chain = theory.expected_length_iid(0.7, 6)
    assert theory.expected_length_tree(parents, accept) == pytest.approx(chain)


def test_best_tree_respects_budget_depth_and_beats_the_chain() -> None:
    s = theory.sibling_acceptance(0.6, 4)
    parents, accept = theory.best_tree(s, 20, max_depth=4)
    assert len(parents) == 20 and theory.tree_depths(parents).max() <= 4
    assert all(p < i for i, p in enumerate(parents))
    assert theory.expected_length_tree(parents, accept) > theory.expected_length_iid(0.6, 4)


def _random_tree(s: np.ndarray, n: int, rng: np.random.Generator) -> tuple[list[int], list[float]]:
    """A random n-node tree whose k-th child exists only with its elder siblings."""
    parents: list[int] = []
    accept: list[float] = []
    kids: dict[int, int] = {}
    while len(parents) < n:
        parent = int(rng.integers(-1, len(parents)))
        rank = kids.get(parent, 0)
        if rank >= len(s):
            continue
        kids[parent] = rank + 1
        parents.append(parent)
        accept.append(float(s[rank]))
    return parents, accept


def test_best_tree_beats_random_trees_of_the_same_size() -> None:
    rng = np.random.default_rng(7)
    s = theory.sibling_acceptance(0.55, 3)
    best = theory.expected_length_tree(*theory.best_tree(s, 12))
    for _ in range(300):
        assert theory.expected_length_tree(*_random_tree(s, 12, rng)) <= best + 1e-12


# --- Monte Carlo ---------------------------------------------------------------------------------

@pytest.mark.parametrize("alpha, n", [(0.3, 3), (0.75, 6), (0.95, 10)])
def test_simulated_chain_matches_iid_formula(alpha: float, n: int) -> None:
    lengths = theory.simulate_chain(alpha, STEPS, np.random.default_rng(1), n=n)
    assert lengths.min() >= 1 and lengths.max() <= n + 1
    _assert_within_ci(lengths, float(theory.expected_length_iid(alpha, n)))


def test_simulated_chain_matches_positions_formula() -> None:
    accept = [0.92, 0.8, 0.65, 0.5, 0.4]
    lengths = theory.simulate_chain(accept, STEPS, np.random.default_rng(2))
    _assert_within_ci(lengths, theory.expected_length_positions(accept))


@pytest.mark.parametrize("tree", [
    ([-1, -1, 0, 0, 2, 1], [0.6, 0.3, 0.5, 0.4, 0.7, 0.9]),
    theory.best_tree(theory.sibling_acceptance(0.65, 3), 15),
])
def test_simulated_tree_matches_tree_formula(tree: tuple[list[int], list[float]]) -> None:
    parents, accept = tree
    lengths = theory.simulate_tree(parents, accept, STEPS, np.random.default_rng(3))
    assert lengths.max() <= theory.tree_depths(parents).max() + 1
    _assert_within_ci(lengths, theory.expected_length_tree(parents, accept))


def _leviathan_chain(p: np.ndarray, q: np.ndarray, n: int, steps: int,
                     rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Speculative sampling with a draft p and target q, the same at every position.

    Draft d_i ~ p; accept with min(1, q(d_i)/p(d_i)); at the first rejection the emitted token is
    drawn from norm(max(0, q − p)). Returns (tokens per verify, first emitted token).
    """
    vocab = len(p)
    drafts = rng.choice(vocab, size=(steps, n), p=p)
    accepted = rng.random((steps, n)) < np.minimum(1.0, q[drafts] / p[drafts])
    lengths = 1 + np.cumprod(accepted, axis=1).sum(axis=1)
    residual = np.maximum(q - p, 0.0)
    resampled = rng.choice(vocab, size=steps, p=residual / residual.sum())
    first = np.where(accepted[:, 0], drafts[:, 0], resampled)
    return lengths, first


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_rejection_sampling_matches_expected_length_iid(seed: int) -> None:
    rng = np.random.default_rng(seed)
    p, q = rng.dirichlet(np.ones(8)), rng.dirichlet(np.ones(8))
    alpha = float(np.minimum(p, q).sum())  # Leviathan Cor. 3.6
    n = 4
    lengths, first = _leviathan_chain(p, q, n, STEPS, rng)
    _assert_within_ci(lengths, float(theory.expected_length_iid(alpha, n)))
    # The algorithm is exact: the first emitted token is distributed as the target q.
    from scipy.stats import chisquare

    counts = np.bincount(first, minlength=len(q))
    assert chisquare(counts, q * STEPS).pvalue > 1e-4

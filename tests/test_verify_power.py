"""The chi-square harness has power: it rejects deliberately broken verifiers and a planted bias.

Each broken verifier below is the textbook algorithm with one bug, written here (vectorised, so
10^5 samples take well under a second). Each goes through the very same harness and threshold
(`chain_pvalues` / `tree_pvalues`, ALPHA, N_SAMPLES) that the real verifiers pass in
``test_verify_chain.py`` and ``test_verify_tree.py``; a bug-free control built the same way passes.

Power against a small bias: a verifier whose output is ``(1 - eps) q + eps * delta_t`` is a
chi-square alternative with noncentrality ``lambda = n * eps^2 * (1 - q_t) / q_t`` on the first
token, so the hardest place to plant it is the mode of q. The tests below size n for that worst
case, check the analytic power against a Monte Carlo estimate, and run the planted verifier.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from scipy import stats

from picker.engine.sampling import FloatArray, IntArray, inverse_cdf_batch, one_hot, residual, sample_batch
from picker.engine.verify import BatchVerifyResult, verify_sample_chain_batch
from tests.test_verify_chain import (
    ALPHA,
    CHAIN_CASES,
    N_SAMPLES,
    START,
    ChainCase,
    V,
    chain_pvalues,
    gof_pvalue_counts,
)
from tests.test_verify_tree import RANDOM, TreeCase, tree_pvalues

CASE = next(c for c in CHAIN_CASES if c.name == "random_pair")  # N = 3
CASE_N1 = next(c for c in CHAIN_CASES if c.name == "random_pair_single_draft")  # N = 1


def _result(n_acc: IntArray, drafts: IntArray, extra: IntArray) -> BatchVerifyResult:
    batch, n = drafts.shape
    pos = np.arange(n)[None, :]
    nodes = np.where(pos < n_acc[:, None], pos, -1)
    tokens = np.full((batch, n + 1), -1, dtype=np.int64)
    tokens[:, :n] = np.where(nodes >= 0, drafts, -1)
    tokens[np.arange(batch), n_acc] = extra
    return BatchVerifyResult(n_acc, tokens, nodes)


# ---------------------------------------------------------------------------------------------
# Broken chain verifiers
# ---------------------------------------------------------------------------------------------


def textbook_chain(bug: str | None) -> Callable[..., BatchVerifyResult]:
    """Vectorised speculative sampling of chains, with one named bug (None: the correct one)."""

    def verify(
        drafts: IntArray, p: Any, q: FloatArray, rng: np.random.Generator
    ) -> BatchVerifyResult:
        batch, n = drafts.shape
        rows = np.arange(batch)
        p3 = one_hot(drafts, V) if p is None else p
        q_d = q[rows[:, None], np.arange(n), drafts]
        p_d = p3[rows[:, None], np.arange(n), drafts]
        # BUG "ratio_inverted": accept with min(1, p/q) instead of min(1, q/p).
        ratio = p_d / np.maximum(q_d, 1e-300) if bug == "ratio_inverted" else q_d / p_d
        ok = rng.random((batch, n)) < ratio
        n_acc = np.where(ok.all(axis=1), n, np.argmin(ok, axis=1))
        rej = n_acc < n
        q_k = q[rows, n_acc]
        weights = q_k.copy()
        # BUG "residual_is_q": the correction is drawn from q_i rather than norm(max(0, q_i - p_i)).
        if bug != "residual_is_q":
            weights[rej] = np.maximum(q_k[rej] - p3[rows[rej], n_acc[rej]], 0.0)
        extra = sample_batch(weights, rng)
        if bug == "residual_unnormalised":
            # BUG: inverse CDF over the unnormalised positive part with u in [0, 1); when u is
            # beyond its mass the index runs off the end and is clamped to the last token.
            cdf = np.cumsum(weights[rej], axis=1)
            u = rng.random(int(rej.sum()))
            extra[rej] = np.minimum((cdf <= u[:, None]).sum(axis=1), V - 1)
        if bug == "bonus_from_last_q":
            # BUG: after full acceptance the bonus is drawn from q_N (the last draft's row),
            # not from q_{N+1}.
            full = np.flatnonzero(~rej)
            extra[full] = sample_batch(q[full, n - 1], rng)
        return _result(n_acc, drafts, extra)

    return verify


CHAIN_BUGS = [
    ("residual_is_q", CASE),
    ("residual_unnormalised", CASE),
    ("bonus_from_last_q", CASE_N1),
    ("ratio_inverted", CASE),
]


def test_textbook_control_passes() -> None:
    """The broken verifiers' bug-free twin passes the same test: failures below are the bugs'."""
    for case in (CASE, CASE_N1):
        p_first, p_joint = chain_pvalues(case, textbook_chain(None))
        assert p_first > ALPHA and p_joint > ALPHA, (case.name, p_first, p_joint)


@pytest.mark.parametrize(("bug", "case"), CHAIN_BUGS, ids=[b for b, _ in CHAIN_BUGS])
def test_harness_rejects_broken_chain_verifier(bug: str, case: ChainCase) -> None:
    p_first, p_joint = chain_pvalues(case, textbook_chain(bug))
    assert min(p_first, p_joint) < ALPHA, f"{bug} went unnoticed: p = {p_first:.3g}, {p_joint:.3g}"


# ---------------------------------------------------------------------------------------------
# Broken tree verifiers (one level of siblings, where recursive rejection does its work)
# ---------------------------------------------------------------------------------------------


def textbook_one_level_tree(bug: str | None) -> Callable[..., BatchVerifyResult]:
    """Vectorised recursive rejection over the root's children, with one named bug."""

    def verify(
        parents: tuple[int, ...],
        tok: IntArray,
        p: Any,
        q: FloatArray,
        rng: np.random.Generator,
        siblings: str = "iid",
    ) -> BatchVerifyResult:
        assert all(par == -1 for par in parents) and siblings == "iid"
        batch, k = tok.shape
        running = q[:, 0].copy()
        chosen = np.full(batch, -1, dtype=np.int64)
        for c in range(k):
            t = np.flatnonzero(chosen < 0)
            x = tok[t, c]
            p_c = one_hot(x, V) if p is None else p[t, c]
            # BUG "sibling_order_ignored": every sibling is tested against the original q.
            target = q[t, 0] if bug == "sibling_order_ignored" else running[t]
            i = np.arange(t.size)
            acc = rng.random(t.size) * p_c[i, x] < target[i, x]
            chosen[t[acc]] = c
            # BUG "residual_not_updated": a rejected sibling's token stays in q.
            if bug != "residual_not_updated":
                running[t[~acc]] = residual(running[t[~acc]], p_c[~acc])
        hit = chosen >= 0
        weights = running
        weights[hit] = q[np.flatnonzero(hit), 1 + chosen[hit]]
        extra = inverse_cdf_batch(weights, rng.random(batch))
        nodes = np.where(hit, chosen, -1)[:, None]
        tokens = np.stack(
            [
                np.where(hit, tok[np.arange(batch), np.maximum(chosen, 0)], extra),
                np.where(hit, extra, -1),
            ],
            1,
        )
        return BatchVerifyResult(hit.astype(np.int64), tokens, nodes)

    return verify


ONE_LEVEL = (-1, -1, -1)
TREE_BUGS = [
    ("sibling_order_ignored", TreeCase("iid_3_random", RANDOM, ONE_LEVEL, "iid", "iid")),
    (
        "residual_not_updated",
        TreeCase("topk_3_random", RANDOM, ONE_LEVEL, "top_k", "deterministic"),
    ),
]


@pytest.mark.parametrize(("bug", "case"), TREE_BUGS, ids=[b for b, _ in TREE_BUGS])
def test_harness_rejects_broken_tree_verifier(bug: str, case: TreeCase) -> None:
    p_first, p_joint = tree_pvalues(case, textbook_one_level_tree(None))
    assert p_first > ALPHA and p_joint > ALPHA, ("control", p_first, p_joint)
    p_first, p_joint = tree_pvalues(case, textbook_one_level_tree(bug))
    assert min(p_first, p_joint) < ALPHA, f"{bug} went unnoticed: p = {p_first:.3g}, {p_joint:.3g}"


# ---------------------------------------------------------------------------------------------
# Planted small bias: (1 - eps) q + eps * point mass
# ---------------------------------------------------------------------------------------------


def planted(eps: float, token: int) -> Callable[..., BatchVerifyResult]:
    """The real batched verifier, except that with probability eps a step emits just ``token``."""

    def verify(
        drafts: IntArray, p: Any, q: FloatArray, rng: np.random.Generator
    ) -> BatchVerifyResult:
        res = verify_sample_chain_batch(drafts, p, q, rng)
        hit = np.flatnonzero(rng.random(drafts.shape[0]) < eps)
        res.num_accepted[hit] = 0
        res.tokens[hit] = -1
        res.tokens[hit, 0] = token
        res.accepted_nodes[hit] = -1
        return res

    return verify


def analytic_power(eps: float, token: int, n: int) -> float:
    """Power of the first-token test against ``(1 - eps) q + eps delta_token`` (noncentral chi2)."""
    q = CASE.pair.tables()[0][START]
    biased = (1 - eps) * q
    biased[token] += eps
    lam = n * float(((biased - q) ** 2 / q).sum())
    crit = stats.chi2.ppf(1 - ALPHA, V - 1)
    return float(stats.ncx2.sf(crit, V - 1, lam))


MODE = int(np.argmax(CASE.pair.tables()[0][START]))  # q_t ~ 0.50: the hardest token to bias
TYPICAL = 0  # q_t ~ 0.22


def test_power_figures() -> None:
    """The numbers quoted in the report; the sample sizes below are chosen from them."""
    assert analytic_power(0.01, TYPICAL, N_SAMPLES) > 0.95
    assert analytic_power(0.02, MODE, N_SAMPLES) > 0.95
    assert analytic_power(0.01, MODE, N_SAMPLES) < 0.25  # too few samples for 1% on the mode...
    assert analytic_power(0.01, MODE, 4 * N_SAMPLES) > 0.95  # ...so that test uses 4 x 10^5


def test_analytic_power_matches_monte_carlo() -> None:
    """Check the noncentral chi-square figure against repeated multinomial draws of the counts."""
    eps, n, reps = 0.01, 2 * N_SAMPLES, 400
    q = CASE.pair.tables()[0][START]
    biased = (1 - eps) * q
    biased[MODE] += eps
    counts = np.random.default_rng(17).multinomial(n, biased, size=reps)
    rejected = np.mean([gof_pvalue_counts(c, q) < ALPHA for c in counts])
    expect = analytic_power(eps, MODE, n)  # about 0.64
    assert abs(rejected - expect) < 4 * np.sqrt(expect * (1 - expect) / reps)


@pytest.mark.parametrize(
    ("eps", "token", "n"),
    [(0.01, TYPICAL, N_SAMPLES), (0.02, MODE, N_SAMPLES), (0.01, MODE, 4 * N_SAMPLES)],
    ids=["1pct_typical_1e5", "2pct_mode_1e5", "1pct_mode_4e5"],
)
def test_harness_detects_planted_bias(eps: float, token: int, n: int) -> None:
    p_first, _ = chain_pvalues(CASE, planted(eps, token), n_samples=n, seed=21)
    assert p_first < ALPHA, f"planted {eps:.0%} bias on token {token} missed: p = {p_first:.3g}"

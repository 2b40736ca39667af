"""Chain verification: hand-computed cases, greedy equivalence, and chi-square tests with power.

The statistical harness lives here and is shared with ``test_verify_tree.py`` and
``test_verify_power.py``: a toy target and draft language model over V = 6 tokens whose next-token
distribution depends only on the last token (so the exact law of the first two emitted tokens is
``q(t1 | s0) q(t2 | t1)``), a decode loop that drafts, verifies and keeps going until two tokens are
out, and :func:`gof_pvalue`, a chi-square goodness-of-fit test. ``test_verify_power.py`` feeds the
very same harness deliberately broken verifiers and asserts that it rejects every one of them.

Samples are 10^5 per case and seeds are fixed, so a run is deterministic; ALPHA = 1e-3 keeps a
false failure under a new seed rare. The harness drives the batched verifiers (10^5 samples in a
fraction of a second); coupling tests show that the single-sequence verifiers the decode loop calls
return the very same tokens for the same generator state, and ``pytest -m slow`` also pushes them
through the harness directly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from scipy import stats

from picker.engine.sampling import FloatArray, IntArray, sample_batch, warp, warp_pair
from picker.engine.verify import (
    BatchVerifyResult,
    VerifyResult,
    verify_greedy_chain,
    verify_sample_chain,
    verify_sample_chain_batch,
)

ALPHA = 1e-3
N_SAMPLES = 100_000
V = 6
START = 0  # the pending token every sampled continuation starts from

ChainVerifier = Callable[[list[int], Any, FloatArray, np.random.Generator], VerifyResult]
BatchChainVerifier = Callable[[IntArray, Any, FloatArray, np.random.Generator], BatchVerifyResult]


# ---------------------------------------------------------------------------------------------
# The harness
# ---------------------------------------------------------------------------------------------


def gof_pvalue(cells: IntArray, probs: FloatArray) -> float:
    """Chi-square goodness of fit of outcomes (cell indices) against exact probabilities."""
    probs = np.asarray(probs, dtype=np.float64).ravel()
    counts = np.bincount(cells, minlength=probs.size)
    if counts.size > probs.size:
        return 0.0
    return gof_pvalue_counts(counts, probs)


def gof_pvalue_counts(counts: IntArray, probs: FloatArray) -> float:
    """:func:`gof_pvalue` from cell counts.

    An outcome the target gives probability 0 is an outright failure (p-value 0). Cells expected
    fewer than 5 times are pooled so that the chi-square approximation holds.
    """
    counts = np.asarray(counts, dtype=np.float64)
    if np.any(counts[probs <= 0.0] > 0):
        return 0.0
    expected = counts.sum() * probs
    big = expected >= 5.0
    small = ~big & (probs > 0.0)
    obs, exp = list(counts[big]), list(expected[big])
    if small.any():
        obs.append(counts[small].sum())
        exp.append(expected[small].sum())
        if exp[-1] < 5.0 and len(exp) > 1:  # still too small: merge the pool into the smallest cell
            j = int(np.argmin(exp[:-1]))
            obs[j] += obs.pop()
            exp[j] += exp.pop()
    if len(exp) < 2:
        return 1.0
    return float(stats.chisquare(obs, exp).pvalue)


@dataclass(frozen=True)
class ToyPair:
    """Target and draft next-token logits (rows: last token) plus the warp applied to both."""

    q_logits: FloatArray
    p_logits: FloatArray
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None

    def tables(self) -> tuple[FloatArray, FloatArray]:
        """Warped target table Q and draft table P, each (V, V): row = last token."""
        q, p = warp_pair(self.q_logits, self.p_logits, self.temperature, self.top_k, self.top_p)
        assert p is not None
        return q, p

    def joint(self) -> FloatArray:
        """Exact law of the first two emitted tokens, flattened as t1 * V + t2."""
        q, _ = self.tables()
        return (q[START][:, None] * q).ravel()


def draw_chains(
    p_table: FloatArray, ctx: IntArray, n: int, greedy: bool, rng: np.random.Generator
) -> IntArray:
    """Draft chains of length n for every context at once: sampled from P, or argmax of P."""
    out = np.empty((ctx.size, n), dtype=np.int64)
    last = ctx
    for j in range(n):
        last = np.argmax(p_table[last], axis=-1) if greedy else sample_batch(p_table[last], rng)
        out[:, j] = last
    return out


@dataclass(frozen=True)
class ChainCase:
    name: str
    pair: ToyPair
    n_draft: int
    deterministic: bool = False  # greedy drafts from P, verified with p=None (one-hot p)


def per_sample_chain(verify_one: ChainVerifier) -> BatchChainVerifier:
    """Run a single-chain verifier row by row, so the batched harness can test it too."""

    def batched(
        drafts: IntArray, p: Any, q: FloatArray, rng: np.random.Generator
    ) -> BatchVerifyResult:
        rows = [
            verify_one(d, None if p is None else p[j], q[j], rng)
            for j, d in enumerate(drafts.tolist())
        ]
        return stack_results(rows, drafts.shape[1])

    return batched


def stack_results(rows: list[VerifyResult], depth: int) -> BatchVerifyResult:
    """Pack single results into the batched layout (-1 padded)."""
    tokens = np.full((len(rows), depth + 1), -1, dtype=np.int64)
    nodes = np.full((len(rows), depth), -1, dtype=np.int64)
    for j, r in enumerate(rows):
        tokens[j, : len(r.tokens)] = r.tokens
        nodes[j, : r.num_accepted] = r.accepted_nodes
    return BatchVerifyResult(
        np.array([r.num_accepted for r in rows], dtype=np.int64), tokens, nodes
    )


def collect_two(
    out: IntArray, have: IntArray, ctx: IntArray, todo: IntArray, res: BatchVerifyResult
) -> None:
    """Append each row's emitted tokens (up to two in all) and move its context to the last one."""
    emitted = res.num_accepted + 1
    for j in range(2):
        sel = (j < emitted) & (have[todo] + j < 2)
        rows = todo[sel]
        out[rows, have[rows] + j] = res.tokens[sel, j]
    have[todo] = np.minimum(2, have[todo] + emitted)
    ctx[todo] = res.tokens[np.arange(todo.size), res.num_accepted]  # Markov toy: last token


def run_chain(
    case: ChainCase, verifier: BatchChainVerifier, n_samples: int = N_SAMPLES, seed: int = 0
) -> tuple[IntArray, IntArray]:
    """Decode until two tokens are out, per sample; return them (n, 2) and step-1 acceptances."""
    q_table, p_table = case.pair.tables()
    draft_rng, verify_rng = np.random.default_rng([seed, 1]), np.random.default_rng([seed, 2])
    out = np.full((n_samples, 2), -1, dtype=np.int64)
    have = np.zeros(n_samples, dtype=np.int64)
    ctx = np.full(n_samples, START, dtype=np.int64)
    first_accepted: IntArray | None = None
    while (todo := np.flatnonzero(have < 2)).size:
        drafts = draw_chains(p_table, ctx[todo], case.n_draft, case.deterministic, draft_rng)
        contexts = np.concatenate([ctx[todo, None], drafts], axis=1)
        q_all = q_table[contexts]  # row i: target after the pending token and d_1..d_i
        p_all = None if case.deterministic else p_table[contexts[:, :-1]]
        res = verifier(drafts, p_all, q_all, verify_rng)
        if first_accepted is None:
            first_accepted = res.num_accepted
        collect_two(out, have, ctx, todo, res)
    assert first_accepted is not None
    return out, first_accepted


def chain_pvalues(
    case: ChainCase, verifier: BatchChainVerifier, n_samples: int = N_SAMPLES, seed: int = 0
) -> tuple[float, float]:
    """p-values of (first token, first two tokens jointly) against the exact target law."""
    toks, _ = run_chain(case, verifier, n_samples, seed)
    q_table, _ = case.pair.tables()
    joint = toks[:, 0] * V + toks[:, 1]
    return gof_pvalue(toks[:, 0], q_table[START]), gof_pvalue(joint, case.pair.joint())


# ---------------------------------------------------------------------------------------------
# The cases
# ---------------------------------------------------------------------------------------------

_R = np.random.default_rng(20240601)
RANDOM_Q_LOGITS = _R.normal(size=(V, V)) * 1.5
RANDOM_P_LOGITS = _R.normal(size=(V, V)) * 1.5
_NEG = -np.inf


def _support(logits: FloatArray, keep: list[int]) -> FloatArray:
    out = np.full_like(logits, _NEG)
    out[:, keep] = logits[:, keep]
    return out


CHAIN_CASES = [
    ChainCase("p_equals_q", ToyPair(RANDOM_Q_LOGITS, RANDOM_Q_LOGITS), n_draft=3),
    ChainCase("random_pair", ToyPair(RANDOM_Q_LOGITS, RANDOM_P_LOGITS), n_draft=3),
    ChainCase("random_pair_single_draft", ToyPair(RANDOM_Q_LOGITS, RANDOM_P_LOGITS), n_draft=1),
    ChainCase(
        "disjoint_supports",
        ToyPair(_support(RANDOM_Q_LOGITS, [3, 4, 5]), _support(RANDOM_P_LOGITS, [0, 1, 2])),
        n_draft=2,
    ),
    ChainCase(
        "deterministic_drafts",
        ToyPair(RANDOM_Q_LOGITS, RANDOM_P_LOGITS),
        n_draft=3,
        deterministic=True,
    ),
    ChainCase("flat_p_peaked_q", ToyPair(RANDOM_Q_LOGITS * 2.5, RANDOM_P_LOGITS * 0.15), n_draft=2),
    ChainCase("peaked_p_flat_q", ToyPair(RANDOM_Q_LOGITS * 0.15, RANDOM_P_LOGITS * 2.5), n_draft=2),
    ChainCase(
        "warped_t07_topk4_topp085",
        ToyPair(RANDOM_Q_LOGITS, RANDOM_P_LOGITS, temperature=0.7, top_k=4, top_p=0.85),
        n_draft=3,
    ),
    ChainCase(
        "warped_t15_topp07_deterministic",
        ToyPair(RANDOM_Q_LOGITS, RANDOM_P_LOGITS, temperature=1.5, top_p=0.7),
        n_draft=2,
        deterministic=True,
    ),
]


# ---------------------------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CHAIN_CASES, ids=lambda c: c.name)
def test_sample_chain_matches_target(case: ChainCase) -> None:
    p_first, p_joint = chain_pvalues(case, verify_sample_chain_batch)
    assert p_first > ALPHA, f"first token differs from q: p = {p_first:.3g}"
    assert p_joint > ALPHA, f"first two tokens differ from q: p = {p_joint:.3g}"


@pytest.mark.slow  # ~10-30 s; the coupling test below covers the default run
def test_single_chain_verifier_matches_target_directly() -> None:
    """The single-chain verifier through the same harness (slower: one Python call per step)."""
    case = next(c for c in CHAIN_CASES if c.name == "warped_t07_topk4_topp085")
    p_first, p_joint = chain_pvalues(case, per_sample_chain(verify_sample_chain), seed=11)
    assert p_first > ALPHA and p_joint > ALPHA, (p_first, p_joint)


@pytest.mark.parametrize("deterministic", [False, True], ids=["sampled", "deterministic"])
@pytest.mark.parametrize("n_draft", [0, 1, 4])
def test_batched_and_single_chain_verifiers_are_one_function(
    n_draft: int, deterministic: bool
) -> None:
    """Coupling: same generator state, same inputs -> identical results, row by row.

    The chi-square tests run on the batched verifier; this makes them evidence for the single one.
    The inputs include the edge cases: p == q rows, one-hot rows (T = 0), disjoint supports.
    """
    g = np.random.default_rng(100 + n_draft)
    batch = 3000
    q = warp(g.normal(size=(batch, n_draft + 1, V)) * g.choice([0.3, 2.0, 6.0], size=(batch, 1, 1)))
    p = warp(g.normal(size=(batch, n_draft, V)) * 2.0)
    p[::7] = q[::7, :n_draft]  # p == q
    q[1::7] = warp(g.normal(size=(q[1::7].shape)), temperature=0.0)  # one-hot target
    p[2::7, :, :3], q[2::7, :, 3:] = 0.0, 0.0  # disjoint supports
    p[2::7] /= p[2::7].sum(-1, keepdims=True)
    q[2::7] /= q[2::7].sum(-1, keepdims=True)
    drafts = (
        np.stack([sample_batch(p[:, i], g) for i in range(n_draft)], 1)
        if n_draft
        else np.zeros((batch, 0), np.int64)
    )
    p_arg = None if deterministic else p
    batched = verify_sample_chain_batch(drafts, p_arg, q, np.random.default_rng(1))
    one_rng = np.random.default_rng(1)
    for j in range(batch):
        single = verify_sample_chain(drafts[j], None if p_arg is None else p_arg[j], q[j], one_rng)
        assert batched[j] == single, j


def test_first_draft_acceptance_rate_is_alpha() -> None:
    """P(d_1 accepted) = sum_x min(p(x), q(x)) (Leviathan et al., Definition 3.1)."""
    case = next(c for c in CHAIN_CASES if c.name == "random_pair")
    _, accepted = run_chain(case, verify_sample_chain_batch, n_samples=N_SAMPLES, seed=7)
    q_table, p_table = case.pair.tables()
    alpha = float(np.minimum(q_table[START], p_table[START]).sum())
    hits = int((accepted >= 1).sum())
    assert stats.binomtest(hits, accepted.size, alpha).pvalue > ALPHA


def test_greedy_chain_hand_computed() -> None:
    q = np.array([[0.1, 0.9, 0.0], [0.2, 0.3, 0.5], [0.6, 0.2, 0.2], [0.0, 0.0, 1.0]])
    assert verify_greedy_chain([1, 2, 0], q) == VerifyResult(3, (1, 2, 0, 2), (0, 1, 2))
    assert verify_greedy_chain([1, 1, 0], q) == VerifyResult(1, (1, 2), (0,))
    assert verify_greedy_chain([0, 2, 0], q) == VerifyResult(0, (1,), ())
    assert verify_greedy_chain([], q[:1]) == VerifyResult(0, (1,), ())


def test_greedy_chain_takes_logits_and_breaks_ties_low() -> None:
    logits = np.array([[3.0, 3.0, -1.0], [0.0, 5.0, 5.0]])
    assert verify_greedy_chain([1], logits) == VerifyResult(0, (0,), ())
    assert verify_greedy_chain([0], logits) == VerifyResult(1, (0, 1), (0,))


def test_greedy_speculation_reproduces_greedy_decoding() -> None:
    """Any drafts, greedy verification: the emitted text is exactly the target's greedy text."""
    q_table, _ = ToyPair(RANDOM_Q_LOGITS, RANDOM_P_LOGITS).tables()
    rng = np.random.default_rng(3)
    plain = [START]
    for _ in range(40):
        plain.append(int(np.argmax(q_table[plain[-1]])))
    text = [START]
    while len(text) < len(plain):
        draft = rng.integers(0, V, size=int(rng.integers(0, 5))).tolist()
        if rng.random() < 0.5 and draft:  # sometimes propose the right continuation
            draft = [int(np.argmax(q_table[t])) for t in text[-1:]] + draft[1:]
        res = verify_greedy_chain(draft, q_table[[text[-1], *draft]])
        text.extend(res.tokens)
    assert text[: len(plain)] == plain


def test_sampling_at_temperature_zero_is_greedy() -> None:
    rng = np.random.default_rng(5)
    for _ in range(200):
        n = int(rng.integers(0, 5))
        q, p = warp_pair(rng.normal(size=(n + 1, V)), rng.normal(size=(n, V)), temperature=0.0)
        assert p is not None
        draft = np.argmax(p, axis=-1).tolist()  # at T = 0 the draft is its own argmax
        expect = verify_greedy_chain(draft, q)
        assert verify_sample_chain(draft, p, q, rng) == expect
        assert verify_sample_chain(draft, None, q, rng) == expect


def test_sample_chain_hand_computed() -> None:
    q = np.array([[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]])
    # p = q: always accepted; the bonus comes from q_2, a point mass on token 2.
    assert verify_sample_chain([1], q[:1], q, np.random.default_rng(0)) == VerifyResult(
        1, (1, 2), (0,)
    )
    # q(d) = 0: always rejected, the correction comes from norm(max(0, q - p)) = point mass on 0.
    p = np.array([[0.0, 0.5, 0.5]])
    for seed in range(20):
        res = verify_sample_chain([2], p, q, np.random.default_rng(seed))
        assert res == VerifyResult(0, (0,), ())


def test_sample_chain_empty_draft_samples_q1() -> None:
    q = np.array([[0.0, 1.0, 0.0]])
    assert verify_sample_chain([], np.zeros((0, 3)), q, np.random.default_rng(0)) == VerifyResult(
        0, (1,), ()
    )


def test_sample_chain_is_reproducible_and_pure() -> None:
    q, p = warp_pair(
        np.random.default_rng(1).normal(size=(4, V)), np.random.default_rng(2).normal(size=(3, V))
    )
    assert p is not None
    q_before, p_before = q.copy(), p.copy()
    a = [verify_sample_chain([1, 2, 3], p, q, np.random.default_rng(9)) for _ in range(3)]
    assert a[0] == a[1] == a[2]
    np.testing.assert_array_equal(q, q_before)
    np.testing.assert_array_equal(p, p_before)


def test_sample_chain_input_errors() -> None:
    q = warp(np.zeros((3, 4)))
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="q: expected shape"):
        verify_sample_chain([1], None, q, rng)
    with pytest.raises(ValueError, match="p: expected shape"):
        verify_sample_chain([1, 2], q, q, rng)
    p = np.array([[1.0, 0.0, 0.0, 0.0], [0.25] * 4])
    with pytest.raises(ValueError, match="has p = 0"):
        verify_sample_chain([1, 2], p, q, rng)


def test_verify_result_checks_lengths() -> None:
    with pytest.raises(ValueError):
        VerifyResult(1, (3,), (0,))
    with pytest.raises(ValueError):
        VerifyResult(1, (3, 4), ())
    assert VerifyResult(1, (3, 4), (0,)).extra_token == 4

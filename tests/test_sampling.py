"""Probability helpers: property tests (hypothesis) and a few hand-computed cases."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from scipy import stats

from picker.engine.sampling import (
    FloatArray,
    NoMassError,
    inverse_cdf,
    inverse_cdf_batch,
    one_hot,
    residual,
    sample,
    sample_batch,
    softmax,
    warp,
    warp_pair,
)

TOL = 1e-9

finite = st.floats(-30.0, 30.0, allow_nan=False, width=64)
logit_rows = st.integers(1, 40).flatmap(lambda v: arrays(np.float64, (v,), elements=finite))
temperatures = st.sampled_from([0.05, 0.3, 0.7, 1.0, 1.5, 4.0])


@st.composite
def distributions(draw: st.DrawFn, vocab: int | None = None) -> FloatArray:
    """A probability vector from small integer weights: exact zeros and ties come up often."""
    v = vocab if vocab is not None else draw(st.integers(1, 30))
    w = draw(arrays(np.float64, (v,), elements=st.integers(0, 10)))
    assume(w.sum() > 0)
    return w / w.sum()


@st.composite
def pairs(draw: st.DrawFn) -> tuple[FloatArray, FloatArray]:
    v = draw(st.integers(1, 30))
    return draw(distributions(v)), draw(distributions(v))


def assert_distribution(x: FloatArray) -> None:
    assert np.all(x >= 0.0)
    np.testing.assert_allclose(x.sum(axis=-1), 1.0, atol=TOL, rtol=0)


# ---------------------------------------------------------------------------------------------
# softmax / warp
# ---------------------------------------------------------------------------------------------


@given(logit_rows, st.floats(-1e3, 1e3))
def test_softmax_is_a_shift_invariant_distribution(x: FloatArray, c: float) -> None:
    s = softmax(x)
    assert_distribution(s)
    np.testing.assert_allclose(softmax(x + c), s, atol=1e-12)


def test_softmax_handles_minus_infinity() -> None:
    np.testing.assert_allclose(softmax([0.0, -np.inf, 0.0]), [0.5, 0.0, 0.5])
    with pytest.raises(ValueError, match="no finite logit"):
        softmax([-np.inf, -np.inf])


@given(
    logit_rows,
    temperatures,
    st.one_of(st.none(), st.integers(1, 45)),
    st.one_of(st.none(), st.floats(0.01, 1.0)),
)
def test_warp_returns_a_distribution(
    x: FloatArray, t: float, k: int | None, top_p: float | None
) -> None:
    assert_distribution(warp(x, t, k, top_p))


@given(logit_rows, temperatures, st.integers(1, 45))
def test_top_k_keeps_the_k_largest(x: FloatArray, t: float, k: int) -> None:
    out = warp(x, t, top_k=k)
    kept = out > 0
    assert kept.sum() <= k
    assert kept[np.argmax(x)]
    if kept.sum() < x.size and (~kept).any():
        # Every kept logit is at least every dropped one (entries that underflow to 0 aside).
        dropped = x[~kept & (softmax(x / t) > 0)]
        if dropped.size:
            assert x[kept].min() >= dropped.max()


def test_top_k_ties_go_to_the_lowest_index() -> None:
    out = warp([1.0, 2.0, 2.0, 2.0, 0.0], 1.0, top_k=2)
    assert (out > 0).tolist() == [False, True, True, False, False]


@given(logit_rows, temperatures, st.one_of(st.none(), st.integers(1, 45)), st.floats(0.01, 0.999))
def test_top_p_keeps_the_smallest_prefix_with_enough_mass(
    x: FloatArray, t: float, k: int | None, top_p: float
) -> None:
    before = warp(x, t, top_k=k)  # top-p acts on the top-k distribution
    out = warp(x, t, top_k=k, top_p=top_p)
    kept = out > 0
    mass = before[kept].sum()
    assert mass >= top_p - TOL  # enough mass...
    assert mass - before[kept].min() < top_p + TOL  # ...and no kept token could be spared
    dropped = before[~kept]
    if dropped.size:
        assert before[kept].min() >= dropped.max()  # a prefix in order of probability
    np.testing.assert_allclose(out[kept], before[kept] / mass, rtol=1e-9)


@pytest.mark.parametrize("scale", [0.05, 1.0, 8.0])
@pytest.mark.parametrize("top_p", [0.3, 0.9, 0.999])
def test_top_p_matches_a_full_sort_on_large_vocabularies(scale: float, top_p: float) -> None:
    """Large V exercises both the partial look at the top entries and the full-sort fallback."""
    g = np.random.default_rng(int(scale * 100 + top_p * 1000))
    x = np.round(g.normal(size=(3, 2000)) * scale, 1)  # rounding makes ties
    out = warp(x, 1.0, top_p=top_p)
    for row, got in zip(softmax(x), out, strict=True):
        order = np.lexsort((np.arange(row.size), -row))  # by probability, then index
        before = np.concatenate(([0.0], np.cumsum(row[order])[:-1]))
        keep = np.zeros(row.size, dtype=bool)
        keep[order[before < top_p]] = True
        np.testing.assert_array_equal(got > 0, keep)


def test_top_p_hand_computed() -> None:
    probs = np.array([0.1, 0.4, 0.3, 0.2])
    out = warp(np.log(probs), 1.0, top_p=0.7)  # 0.4 + 0.3 = 0.7 reaches p: stop there
    np.testing.assert_allclose(out, [0.0, 4 / 7, 3 / 7, 0.0])
    out = warp(np.log(probs), 1.0, top_p=0.71)
    np.testing.assert_allclose(out, [0.0, 4 / 9, 3 / 9, 2 / 9])


@given(logit_rows)
def test_temperature_zero_is_argmax_with_lowest_index_ties(x: FloatArray) -> None:
    out = warp(x, 0.0, top_k=3, top_p=0.5)
    assert out.tolist() == one_hot(int(np.argmax(x)), x.size).tolist()
    assert warp([2.0, 5.0, 5.0], 0.0).tolist() == [0.0, 1.0, 0.0]


@given(arrays(np.float64, (8,), elements=st.integers(-80, 80).map(lambda i: i / 8)))
def test_low_temperature_tends_to_argmax(x: FloatArray) -> None:
    top2 = np.sort(x)[-2:]
    assume(top2[1] - top2[0] >= 0.125)  # a unique maximum, by at least one grid step
    np.testing.assert_allclose(warp(x, 1e-3), warp(x, 0.0), atol=1e-20)


@given(
    arrays(np.float64, (12,), elements=st.integers(-160, 160).map(lambda i: i / 8)),
    st.integers(-400, 400).map(lambda i: i / 8),
    temperatures,
    st.one_of(st.none(), st.integers(1, 12)),
    st.one_of(st.none(), st.floats(0.05, 0.95)),
)
def test_warp_is_invariant_to_adding_a_constant(
    x: FloatArray, c: float, t: float, k: int | None, top_p: float | None
) -> None:
    # Grid values keep x + c exact, so top-k sees identical orderings; top-p boundaries that
    # rounding could flip are excluded.
    if top_p is not None:
        cums = np.cumsum(np.sort(warp(x, t, top_k=k))[::-1])
        assume(np.min(np.abs(cums - top_p)) > 1e-9)
    np.testing.assert_allclose(warp(x + c, t, k, top_p), warp(x, t, k, top_p), atol=1e-12)


@given(
    st.integers(1, 5), st.integers(1, 20), temperatures, st.integers(1, 20), st.floats(0.05, 1.0)
)
def test_warp_works_row_wise(rows: int, v: int, t: float, k: int, top_p: float) -> None:
    x = np.random.default_rng(rows * 100 + v).normal(size=(rows, v)) * 3
    batched = warp(x, t, k, top_p)
    for r in range(rows):
        np.testing.assert_allclose(batched[r], warp(x[r], t, k, top_p), atol=1e-15)


def test_warp_pair_applies_the_same_warp() -> None:
    ql, pl = np.array([3.0, 1.0, 0.5, -2.0]), np.array([0.0, 2.0, 1.0, 1.0])
    q, p = warp_pair(ql, pl, 0.8, 3, 0.9)
    assert p is not None
    np.testing.assert_array_equal(q, warp(ql, 0.8, 3, 0.9))
    np.testing.assert_array_equal(p, warp(pl, 0.8, 3, 0.9))
    q2, none = warp_pair(ql, None, 0.8)
    assert none is None and np.array_equal(q2, warp(ql, 0.8))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"temperature": -1.0}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"top_k": 0}, "top_k"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
    ],
)
def test_warp_rejects_bad_arguments(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        warp([1.0, 2.0], **kwargs)


# ---------------------------------------------------------------------------------------------
# residual
# ---------------------------------------------------------------------------------------------


@given(pairs())
def test_residual_is_a_distribution_on_q_above_p(qp: tuple[FloatArray, FloatArray]) -> None:
    q, p = qp
    assume(np.maximum(q - p, 0).sum() > 1e-12)
    r = residual(q, p)
    assert_distribution(r)
    assert np.all(r[q <= p] == 0.0)
    np.testing.assert_allclose(r, np.maximum(q - p, 0) / np.maximum(q - p, 0).sum(), atol=1e-12)


@given(pairs())
def test_accept_then_residual_reproduces_q(qp: tuple[FloatArray, FloatArray]) -> None:
    """The lemma behind exactness: p(x) min(1, q/p) + P(reject) residual(x) = q(x)."""
    q, p = qp
    accept = np.minimum(p, q)  # p(x) * min(1, q(x)/p(x)), also where p(x) = 0
    reject = 1.0 - accept.sum()
    np.testing.assert_allclose(accept + reject * residual(q, p), q, atol=1e-12)


@given(distributions())
def test_residual_of_equal_distributions_is_q(q: FloatArray) -> None:
    np.testing.assert_array_equal(residual(q, q), q)


def test_residual_works_row_wise_with_a_degenerate_row() -> None:
    q = np.array([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]])
    p = np.array([[0.5, 0.5, 0.0], [0.4, 0.4, 0.2]])
    np.testing.assert_allclose(residual(q, p), [[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]])


# ---------------------------------------------------------------------------------------------
# sampling
# ---------------------------------------------------------------------------------------------


@given(distributions(), st.floats(0.0, 1.0, exclude_max=True))
def test_inverse_cdf_never_returns_a_zero_weight_index(w: FloatArray, u: float) -> None:
    i = inverse_cdf(w, u)
    assert 0 <= i < w.size and w[i] > 0
    assert w[inverse_cdf(w, np.nextafter(1.0, 0.0))] > 0  # the largest uniform a generator gives
    assert inverse_cdf_batch(w[None], np.array([u]))[0] == i


@given(st.integers(1, 6), st.integers(1, 20), st.integers(0, 2**31))
def test_batched_inverse_cdf_matches_the_single_one(rows: int, v: int, seed: int) -> None:
    g = np.random.default_rng(seed)
    w = g.random((rows, v)) * (g.random((rows, v)) < 0.6)
    w[:, g.integers(v)] += 0.1  # every row has some mass
    u = g.random(rows)
    assert inverse_cdf_batch(w, u).tolist() == [inverse_cdf(w[r], u[r]) for r in range(rows)]


def test_sample_follows_the_distribution() -> None:
    probs = np.array([0.5, 0.0, 0.2, 0.25, 0.05])
    draws = sample_batch(np.tile(probs, (100_000, 1)), np.random.default_rng(0))
    counts = np.bincount(draws, minlength=5)
    assert counts[1] == 0
    assert stats.chisquare(counts[probs > 0], 100_000 * probs[probs > 0]).pvalue > 1e-3
    rng = np.random.default_rng(1)
    single = np.bincount(
        [sample(probs * 3.0, rng) for _ in range(20_000)], minlength=5
    )  # unnormalised
    assert single[1] == 0
    assert stats.chisquare(single[probs > 0], 20_000 * probs[probs > 0]).pvalue > 1e-3


def test_sampling_without_mass_fails_loudly() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(NoMassError):
        sample(np.zeros(3), rng)
    with pytest.raises(NoMassError):
        sample_batch(np.array([[0.2, 0.8], [0.0, 0.0]]), rng)
    with pytest.raises(ValueError, match="expected"):
        sample_batch(np.ones(3), rng)


def test_one_hot() -> None:
    assert one_hot(2, 4).tolist() == [0.0, 0.0, 1.0, 0.0]
    assert one_hot(np.array([[0], [3]]), 4).shape == (2, 1, 4)
    with pytest.raises(ValueError, match="out of range"):
        one_hot(4, 4)


@settings(max_examples=25)
@given(st.integers(0, 2**31))
def test_warp_is_cheap_enough_for_a_32k_vocabulary(seed: int) -> None:
    """Smoke test at a realistic vocabulary size: still a distribution, top-k respected."""
    x = np.random.default_rng(seed).normal(size=32_000) * 4
    out = warp(x, 0.8, top_k=50, top_p=0.9)
    assert_distribution(out)
    assert 1 <= (out > 0).sum() <= 50

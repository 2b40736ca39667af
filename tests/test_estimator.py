"""The policy estimator: scikit-learn's estimator contract, the unfitted analytic base, the correction."""

from __future__ import annotations

import math
import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV
from sklearn.utils.estimator_checks import parametrize_with_checks

from policies.estimator import SpeedupEstimator

# No check is expected to fail. (The constant-shift variant and the cross-validated shrinkage, which
# may switch the correction off, declare the `poor_score` tag: by design they need not fit arbitrary
# regression data, which is what that tag is for. shrinkage=1.0 runs the full-score checks.)
EXPECTED_FAILED: dict[str, str] = {}


@parametrize_with_checks([SpeedupEstimator(), SpeedupEstimator(shrinkage=1.0), SpeedupEstimator(correction="constant"),
                          SpeedupEstimator(interval_method="quantile", min_rows=10)],
                         expected_failed_checks=lambda est: EXPECTED_FAILED)
def test_sklearn_contract(estimator, check) -> None:
    check(estimator)


def _data(n: int = 240, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows whose measured speedup = base x a factor that depends on feature 1 (plus noise)."""
    rng = np.random.default_rng(seed)
    base = rng.uniform(0.8, 2.5, n)
    x1 = rng.uniform(0, 1, n)
    x2 = rng.normal(size=n)
    X = np.column_stack([np.log(base), x1, x2])
    y = base * np.exp(-0.3 * x1 + rng.normal(0, 0.03, n))
    groups = np.arange(n) % 6
    return X, y, groups


def test_unfitted_predicts_the_analytic_base() -> None:
    X = np.array([[np.log(1.5), 0.0], [np.log(0.9), 1.0]])
    est = SpeedupEstimator()
    np.testing.assert_allclose(est.predict(X), [1.5, 0.9])
    lo, hi = est.predict_interval(X)
    np.testing.assert_allclose(lo, [1.5 * 0.75, 0.9 * 0.75])
    np.testing.assert_allclose(hi, [1.5 * 1.25, 0.9 * 1.25])


def test_correction_beats_the_base_and_the_range_covers() -> None:
    X, y, groups = _data()
    Xt, yt, _ = _data(seed=1)
    est = SpeedupEstimator().fit(X, y, groups=groups)
    base_err = np.median(np.abs(np.exp(Xt[:, 0]) - yt) / yt)
    fit_err = np.median(np.abs(est.predict(Xt) - yt) / yt)
    assert fit_err < base_err / 3
    lo, hi = est.predict_interval(Xt)
    assert np.mean((yt >= lo) & (yt <= hi)) >= 0.8
    assert est.cv_error_["folds"] == "groups" and est.cv_error_["rows"] == len(y)
    assert est.cv_error_["median_rel_error"] < 0.1


def test_few_rows_fall_back_to_a_constant_shift() -> None:
    X, y, _ = _data(n=12)
    est = SpeedupEstimator(min_rows=30, shrinkage=1.0).fit(X, y)
    assert est.correction_ is None
    np.testing.assert_allclose(est.log_correction(X), est.offset_)


def test_cv_shrinkage_keeps_a_correction_that_transfers() -> None:
    X, y, groups = _data()
    est = SpeedupEstimator().fit(X, y, groups=groups)
    assert est.shrinkage_ == 1.0 and est.cv_error_["shrinkage"] == 1.0
    assert est.cv_error_["median_rel_error"] < est.cv_error_["median_rel_error_analytic"] / 3


def test_cv_shrinkage_switches_off_a_correction_that_does_not_transfer() -> None:
    """The residual follows feature 1 with a sign that flips from group to group: a correction fitted
    on some groups points the wrong way on the others, so the analytic base alone is kept."""
    rng = np.random.default_rng(3)
    n = 240
    base, x1, groups = rng.uniform(0.8, 2.5, n), rng.uniform(0, 1, n), np.arange(n) % 6
    sign = np.where(groups % 2 == 0, 1.0, -1.0)
    X = np.column_stack([np.log(base), x1, rng.normal(size=n)])
    y = base * np.exp(0.4 * sign * x1 + rng.normal(0, 0.02, n))
    est = SpeedupEstimator().fit(X, y, groups=groups)
    assert est.shrinkage_ == 0.0
    np.testing.assert_allclose(est.predict(X), base)
    forced = SpeedupEstimator(shrinkage=1.0).fit(X, y, groups=groups)
    assert forced.cv_error_["median_rel_error"] > est.cv_error_["median_rel_error"]


def test_fixed_shrinkage_scales_the_correction() -> None:
    X, y, groups = _data()
    full = SpeedupEstimator(shrinkage=1.0).fit(X, y, groups=groups)
    half = SpeedupEstimator(shrinkage=0.5).fit(X, y, groups=groups)
    np.testing.assert_allclose(half.log_correction(X), 0.5 * full.log_correction(X))


def test_no_correction_keeps_the_base_but_learns_the_range() -> None:
    X, y, _ = _data()
    est = SpeedupEstimator(correction="none").fit(X, y)
    np.testing.assert_allclose(est.predict(X), np.exp(X[:, 0]))
    lo, hi = est.predict_interval(X)
    assert np.all(lo <= est.predict(X)) and np.all(hi >= est.predict(X))


def test_quantile_range() -> None:
    X, y, groups = _data()
    est = SpeedupEstimator(interval_method="quantile").fit(X, y, groups=groups)
    lo, hi = est.predict_interval(X)
    assert np.mean((y >= lo) & (y <= hi)) >= 0.8


def test_clone_and_grid_search_compose() -> None:
    X, y, _ = _data(n=80)
    est = SpeedupEstimator(boosting_rounds=20)
    assert clone(est).get_params() == est.get_params()
    search = GridSearchCV(est, {"max_depth": [2, 3]}, cv=3).fit(X, y)
    assert search.best_params_["max_depth"] in (2, 3)


@pytest.mark.parametrize("bad", [{"correction": "magic"}, {"interval": (0.9, 0.1)},
                                 {"interval_method": "bayes"}, {"shrinkage": 1.5}, {"shrinkage": "auto"}])
def test_bad_parameters_fail_at_fit(bad: dict) -> None:
    X, y, _ = _data(n=20)
    with pytest.raises(ValueError):
        SpeedupEstimator(**bad).fit(X, y)


def test_non_positive_speedups_are_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        SpeedupEstimator().fit([[0.0], [0.1]], [1.0, -1.0])


# ----------------------------------------------------------------------------- candidate rows

from picker.engine.plugins import Capabilities  # noqa: E402
from picker.inputs.hardware import get_hardware  # noqa: E402
from policies import analytic  # noqa: E402
from policies.cell_evidence import evidence_from_cell  # noqa: E402
from policies.encoding import FEATURES, feature_matrix  # noqa: E402
from policies.evidence import Candidate, CostEvidence, Evidence  # noqa: E402
from policies.roofline import ModelShape  # noqa: E402
from policies.speedup_model import base_range, base_speedup, step_ratio  # noqa: E402

DRAFT = Capabilities(needs_draft_model=True)
CTX = analytic.CostContext(ModelShape.from_params(8e9), get_hardware("h100-sxm"), "vllm", 2048,
                           draft=ModelShape.from_params(1e9))


def test_without_measured_costs_the_base_is_the_analytic_model() -> None:
    c = Candidate(DRAFT, depth=4, evidence=Evidence(0.8, 0.7, 0.9), ctx=CTX, batch=8)
    cost = analytic.config_cost(DRAFT, analytic.chain(4), CTX, 8)
    assert base_speedup(c) == pytest.approx(analytic.speedup(analytic.chain(4), 0.8, cost))
    mean, lo, hi = base_range(c)
    assert lo < mean < hi


def test_measured_costs_batch_and_prefill_enter_as_stated() -> None:
    curve = ((1.0, 1.0), (8.0, 1.2), (64.0, 4.0))
    ev = Evidence(0.8, 0.8, 0.8, "measured", cost=CostEvidence(draft_unit=0.1, verify=curve))
    one = Candidate(DRAFT, depth=4, evidence=ev)
    many = Candidate(DRAFT, depth=4, evidence=ev, batch=8)       # 8 x 5 tokens in flight
    assert base_speedup(many) < base_speedup(one)
    fixed = Candidate(DRAFT, depth=4, evidence=Evidence(0.8, 0.8, 0.8, "measured", cost=CostEvidence(
        draft_unit=0.1, verify=curve, fixed_steps=48.0, output_tokens=48.0)))
    assert 1.0 < base_speedup(fixed) < base_speedup(one)        # the prefill is not sped up


def test_per_position_rates_set_the_expected_length() -> None:
    flat = CostEvidence(0.0, verify=((1.0, 1.0), (9.0, 1.0)))
    ev = Evidence(0.5, 0.5, 0.5, "measured", per_position=(1.0, 1.0), cost=flat)
    c = Candidate(DRAFT, depth=3, evidence=ev)
    assert base_speedup(c) == pytest.approx(1 + 1 + 1 + 0.5)    # two sure positions, the third at the tail alpha


def test_evidence_from_a_profiler_cell() -> None:
    cell = {"num_draft_tokens": 4, "alpha_iid": 0.7, "alpha_iid_ci": [0.6, 0.8], "per_position": [0.9, 0.6],
            "decode_steps": 100, "draft_steps": 50, "draft_tokens": 150, "draft_s_per_token": 0.002,
            "verify_s_per_step": 0.011, "v_vs_plain_forward": 1.1, "tokens": 300, "seconds": 2.5, "samples": 5,
            "accepted_tokens": 95}
    ev = evidence_from_cell(cell, Capabilities(deterministic_draft=True, draft_cost="cpu_lookup"))
    assert ev.source == "measured" and ev.alpha == 0.7 and ev.per_position == (0.9, 0.6)
    # Output of drafting steps over the output of all steps, cut tokens included (50 empty steps).
    assert ev.cost.draft_share == pytest.approx((50 + 95) / (50 + 95 + 50))
    assert ev.cost.nodes_per_token == pytest.approx(0.75)       # 3 of 4 nominal drafts per drafting step
    assert ev.cost.draft_unit == pytest.approx(0.002 * 150 / 100 / 0.01)  # one lookup per step, plain step 10 ms
    assert ev.cost.verify[-1][1] == pytest.approx(1.2)          # mean 1.1 mixes drafting (1.2) and empty steps (1.0)


def test_feature_rows_start_with_the_log_base() -> None:
    c = Candidate(DRAFT, depth=4, evidence=Evidence(0.8, 0.7, 0.9), ctx=CTX)
    X = feature_matrix([c, c])
    assert X.shape == (2, len(FEATURES)) and X[0, 0] == pytest.approx(np.log(base_speedup(c)))
    assert SpeedupEstimator().predict(X)[0] == pytest.approx(base_speedup(c))


def test_lookup_draft_share_carries_across_draft_lengths() -> None:
    from policies.speedup_model import draft_step_share

    # 90% of the text is matchable; at E[L] = 4.2 that is 69% of steps, at E[L] = 1.5 it is 86%.
    assert draft_step_share(0.9, 4.2) == pytest.approx(0.682, abs=1e-3)
    assert draft_step_share(0.9, 1.5) == pytest.approx(0.857, abs=1e-3)
    lookup = Capabilities(deterministic_draft=True, draft_cost="cpu_lookup")
    cost = CostEvidence(0.0, draft_share=0.5, verify=((1.0, 1.0), (9.0, 1.0)))
    c = Candidate(lookup, depth=2, evidence=Evidence(1.0, 1.0, 1.0, "measured", cost=cost))
    assert base_speedup(c) == pytest.approx(1 / (0.5 / 3 + 0.5))   # half the text at 3 tokens a step


def test_a_live_cell_without_step_timings_still_carries_its_draft_share() -> None:
    """llama.cpp reports acceptance over the steps that drafted: with no cost evidence (no step
    timings, or costs that do not transfer) φ still comes with α, and the roofline's step ratio is
    charged only on the steps that draft."""
    lookup = Capabilities(deterministic_draft=True, draft_cost="cpu_lookup")
    cell = {"num_draft_tokens": 4, "alpha": 0.6, "decode_steps": 446, "draft_steps": 83, "draft_tokens": 329,
            "accepted_tokens": 212}
    ev = evidence_from_cell(cell, lookup)
    assert ev.cost is None and ev.draft_share == pytest.approx((83 + 212) / (83 + 212 + 446 - 83))
    every_step = Candidate(lookup, depth=4, evidence=replace(ev, draft_share=1.0), ctx=CTX)
    matched_only = Candidate(lookup, depth=4, evidence=ev, ctx=CTX)
    assert base_speedup(matched_only) < base_speedup(every_step)
    assert 1.0 < step_ratio(matched_only) < step_ratio(every_step)


def test_lookahead_keeps_its_measured_tokens_per_step_across_n() -> None:
    lookahead = Capabilities(deterministic_draft=True, draft_cost="in_forward")
    cost = CostEvidence(0.0, verify=((1.0, 1.0), (64.0, 1.0)))
    ev = Evidence(0.8, 0.8, 0.8, "measured", per_position=(0.9, 0.8), cost=cost, tau=2.5)
    for n in (1, 4, 8):
        assert base_speedup(Candidate(lookahead, depth=n, evidence=ev)) == pytest.approx(2.5)


def test_correction_is_not_carried_beyond_its_domain() -> None:
    """Fitted at temperature 0 only: rows at temperature 1 get the analytic base and its wider range."""
    X, y, groups = _data()
    X0 = np.column_stack([X, np.zeros(len(X))])
    est = SpeedupEstimator(shrinkage=1.0, domain_columns=(3,)).fit(X0, y, groups=groups)
    X1 = X0.copy()
    X1[:, 3] = 1.0
    np.testing.assert_allclose(est.predict(X1), np.exp(X1[:, 0]))
    assert not np.allclose(est.predict(X0), np.exp(X0[:, 0]))
    assert est.in_domain(X0).all() and not est.in_domain(X1).any()
    lo, hi = est.predict_interval(X1)
    assert np.all(lo <= est.predict(X1)) and np.all(hi >= est.predict(X1))
    with pytest.raises(ValueError, match="domain_columns"):
        SpeedupEstimator(domain_columns=(9,)).fit(X0, y)


def _chain_cell(n: int, per_step_draft: float, steps: int = 10, plain: float = 0.01) -> dict:
    """A summary cell whose drafting costs ``per_step_draft`` plain steps per step."""
    drafted = n * steps
    return {"num_draft_tokens": n, "decode_steps": steps, "v_vs_plain_forward": 1.2,
            "verify_s_per_step": 1.2 * plain, "draft_s_per_token": per_step_draft * plain * steps / drafted,
            "draft_tokens": drafted, "draft_steps": steps, "alpha_iid": 0.6}


def test_a_tree_drafts_over_its_top_k_nodes_at_each_later_depth() -> None:
    """Depth 1 drafts from the root; depths 2..D run the drafter over top-k nodes, charged at the
    verify curve's ratio for k tokens. A chain (top-k 1) and Medusa's heads are as before."""
    from policies.speedup_model import step_ratio, tree_width

    layer = Capabilities(needs_hidden_states=True, tree=True, draft_cost="target_layer")
    curve = ((1.0, 1.0), (4.0, 1.3), (16.0, 1.6))
    ev = Evidence(0.8, 0.8, 0.8, "measured", cost=CostEvidence(0.25, verify=curve, draft_fixed=0.1))
    tree = Candidate(layer, depth=4, topk=4, tokens=12, evidence=ev)
    chain = Candidate(layer, depth=4, evidence=ev)
    assert tree_width(chain, curve) == 1.0
    assert tree_width(tree, curve) == pytest.approx((1 + 3 * 1.3) / 4)
    verify_gap = step_ratio(replace(tree, caps=Capabilities(tree=True, draft_cost="in_forward"))) - \
        step_ratio(replace(chain, caps=Capabilities(tree=True, draft_cost="in_forward")))
    assert step_ratio(tree) - step_ratio(chain) == pytest.approx(verify_gap + 3 * 0.3 * 0.25)
    heads = Capabilities(trainable_heads=True, tree=True, draft_cost="heads")
    assert tree_width(replace(tree, caps=heads), curve) == 1.0


def test_two_chain_lengths_split_the_drafting_cost() -> None:
    from policies.cell_evidence import split_draft_cost
    from policies.speedup_model import step_ratio

    d0, d = 0.3, 0.2
    long, short = _chain_cell(8, d0 + 8 * d), _chain_cell(1, d0 + d)
    assert split_draft_cost(long, short, DRAFT) == pytest.approx((d0, d))
    assert split_draft_cost(long, _chain_cell(8, 1.0), DRAFT) is None          # same length: no line
    assert split_draft_cost(long, _chain_cell(1, 5.0), DRAFT) is None          # d <= 0: no line
    one = evidence_from_cell(long, DRAFT)                                      # all of it per forward
    two = evidence_from_cell(long, DRAFT, probe=short)
    assert one.cost.draft_fixed == 0.0 and two.cost.draft_fixed == pytest.approx(d0)
    n1 = [Candidate(DRAFT, depth=1, evidence=ev) for ev in (one, two)]
    n8 = [Candidate(DRAFT, depth=8, evidence=ev) for ev in (one, two)]
    # Both reproduce the profiled chain; only the split one charges N = 1 what it costs.
    assert step_ratio(n8[0]) == pytest.approx(step_ratio(n8[1]))
    assert step_ratio(n1[1]) - step_ratio(n1[0]) == pytest.approx(d0 + d - (d0 + 8 * d) / 8)


def test_the_last_step_is_cut_at_the_output_limit() -> None:
    from policies.speedup_model import steps_per_generation

    assert steps_per_generation(1.0, 48) == pytest.approx(47)                  # plain: T - 1 steps
    assert steps_per_generation(9.0, 49) == pytest.approx((48 + 4) / 9)        # overshoot (L - 1)/2
    assert steps_per_generation(9.0, 3) == 1.0                                 # at least one step
    curve = ((1.0, 1.0), (16.0, 1.0))
    short, long = (Candidate(DRAFT, depth=8, evidence=Evidence(
        0.95, 0.95, 0.95, "measured", cost=CostEvidence(0.0, verify=curve, output_tokens=t))) for t in (24, 4000))
    # At near-full acceptance a 24-token output wastes part of its last step; 4000 tokens do not.
    assert base_speedup(short) < 0.9 * base_speedup(long)


@pytest.mark.parametrize(("f", "e"), [(0.2, 9.0), (0.3, 8.0), (0.6, 5.0)])
def test_mixed_steps_overshoot_the_limit_by_their_long_steps(f: float, e: float) -> None:
    """Prompt lookup: a share f of steps drafts E tokens, the rest one. Counted step by step, the
    mean number of steps to emit 31 tokens matches the renewal formula; the all-drafting (L - 1)/2
    at the same mean counts too few (it leaves out that only the long steps overshoot)."""
    from policies.speedup_model import steps_per_generation

    rng = random.Random(0)
    runs, decode = 20000, 31
    total = 0
    for _ in range(runs):
        emitted = 0
        while emitted < decode:
            emitted += int(e) if rng.random() < f else 1
            total += 1
    simulated = total / runs
    mean = f * e + 1.0 - f
    assert steps_per_generation(mean, decode + 1, e) == pytest.approx(simulated, rel=0.02)
    if f <= 0.3:  # few long steps: the gap is widest
        assert abs(steps_per_generation(mean, decode + 1) - simulated) > 0.04 * simulated


def test_a_chains_spread_of_accept_lengths_sets_its_overshoot() -> None:
    """Accept lengths drawn from per-position rates, counted step by step: the steps to emit 31
    tokens match the renewal formula with the chain's E[L(L - 1)] (P(L > k) = a_1···a_k); a
    constant L at the same mean undercounts them."""
    from policies.speedup_model import drafted_length, drafted_moment, steps_per_generation

    pp = (0.95, 0.9, 0.9, 0.85, 0.8, 0.8, 0.8, 0.8)
    c = Candidate(DRAFT, depth=8, evidence=Evidence(0.8, 0.8, 0.8, "measured", per_position=pp))
    e, moment = drafted_length(c), drafted_moment(c)
    # E[L(L - 1)] from the distribution itself: P(L = l) = a_1···a_{l-1} (1 - a_l), L = 9 takes all.
    probs = [math.prod(pp[:lng - 1]) * (1 - pp[lng - 1]) for lng in range(1, 9)] + [math.prod(pp)]
    exact = sum(lng * (lng - 1) * p for lng, p in zip(range(1, 10), probs))
    assert sum(probs) == pytest.approx(1.0) and sum(lng * p for lng, p in zip(range(1, 10), probs)) == pytest.approx(e)
    assert moment == pytest.approx(exact)
    rng = random.Random(0)
    runs, decode, total = 20000, 31, 0
    for _ in range(runs):
        emitted = 0
        while emitted < decode:
            length = 1
            for p in pp:
                if rng.random() >= p:
                    break
                length += 1
            emitted += length
            total += 1
    simulated = total / runs
    assert steps_per_generation(e, decode + 1, None, moment) == pytest.approx(simulated, rel=0.005)
    assert steps_per_generation(e, decode + 1) < 0.99 * simulated


def test_live_cells_give_step_ratios_that_reproduce_their_speedup() -> None:
    """A live engine reports tokens/s against plain and acceptance, not step timings: the implied
    step ratio R at each measured N reproduces the measured speedup, and other N interpolate."""
    from policies.cell_evidence import live_step_points, live_step_ratio
    from policies.speedup_model import points_ratio, step_ratio

    # 10 requests of 48 tokens at 3 tokens a step: 16 decode steps each, the last cut to 2 tokens.
    cell = {"num_draft_tokens": 4, "speedup_vs_plain": 1.5, "tokens": 480, "samples": 10, "tau": 3.0,
            "decode_steps": 160}
    n, r = live_step_ratio(cell)
    assert n == 4 and r == pytest.approx(47 / (16 * 1.5))
    # Without step counts: the steps a 48-token generation takes at the accept length, cut included.
    assert live_step_ratio({**cell, "decode_steps": None})[1] == pytest.approx(r)
    assert live_step_ratio({**cell, "speedup_vs_plain": None}) is None
    slow = {**cell, "num_draft_tokens": 8, "speedup_vs_plain": 0.5}
    points = live_step_points([cell, slow, {**cell, "speedup_vs_plain": 1.4}, {**cell, "speedup_vs_plain": 1.6}])
    assert [p[0] for p in points] == [4, 8] and points[0][1] == pytest.approx(r)   # the median at N = 4
    r8 = points[1][1]
    assert points_ratio(points, 6.0) == pytest.approx((r + r8) / 2)                 # between the two
    assert points_ratio(points, 2.0) == pytest.approx(max(1.0, r - (r8 - r) / 2))   # the first segment, extended
    assert points_ratio([(2.0, 1.8), (8.0, 2.4)], 1.0) == pytest.approx(1.7)        # a fixed cost per step
    assert points_ratio([(4.0, r)], 2.0) == pytest.approx(1 + (r - 1) / 2)          # one point: through (0, 1)
    assert points_ratio(points, 12.0) > points_ratio(points, 8.0)                  # continued upward
    ev = Evidence(0.5, 0.5, 0.5, "measured", per_position=(1.0, 1.0, 0.0),         # E[L] = 3 at N = 4
                  cost=CostEvidence(0.0, output_tokens=48, step_points=points))
    c = Candidate(DRAFT, depth=4, evidence=ev)
    assert step_ratio(c) == pytest.approx(r) and base_speedup(c) == pytest.approx(1.5)


def test_recommend_uses_live_step_ratios_when_the_engine_reports_no_timings(tmp_path) -> None:
    from picker.engine.plugins import load_strategies
    from picker.inputs.measurements import Measurements
    from picker.inputs.workload import load_profile
    from picker.recommend.evidence_index import evidence, index_evidence

    profile = load_profile(Path(__file__).parents[1] / "profiles" / "chat-70b-h100.yaml")
    live = {"task": "chat", "strategy": "ngram", "temperature": 0.0, "alpha": 0.5, "alpha_ci": [0.4, 0.6],
            "alpha_iid": 0.5, "samples": 10, "num_draft_tokens": 4, "tau": 2.0, "tokens": 480,
            "speedup_vs_plain": 0.8, "per_position": [0.5, 0.5, 0.5, 0.5]}
    m = Measurements.model_validate({"cells": [live], "run": {"backend": profile.engine.name}})
    ev = evidence(index_evidence(profile, m), load_strategies()["ngram"], "chat", 0.0, 4)
    assert ev.cost is not None and ev.cost.step_points and ev.cost.step_points[0][0] == 4
    no_speedup = Measurements.model_validate({"cells": [{**live, "speedup_vs_plain": None}],
                                              "run": {"backend": profile.engine.name}})
    assert evidence(index_evidence(profile, no_speedup), load_strategies()["ngram"], "chat", 0.0, 4).cost is None


def test_a_drafter_that_samples_chains_is_scored_as_the_chain_it_runs() -> None:
    """EAGLE-3's reference drafter declares sampled_tree=False: at T > 0 a tree configuration measured
    on the reference loop is scored as the sampled chain of the tree's depth; at T = 0, or for a
    strategy that keeps sampling trees (Medusa), it stays a tree."""
    from picker.engine.plugins import load_strategies
    from picker.inputs.measurements import Measurements
    from picker.inputs.workload import load_profile
    from picker.recommend.costs import cost_context
    from picker.recommend.evidence_index import candidate, index_evidence
    from picker.recommend.table import Bucket, Option

    profile = load_profile(Path(__file__).parents[1] / "profiles" / "chat-70b-h100.yaml")
    plugins = load_strategies()
    assert not plugins["eagle3"].capabilities.sampled_tree and plugins["medusa"].capabilities.sampled_tree
    cells = [{**_chain_cell(4, 1.0), "task": "chat", "strategy": s, "temperature": t, "alpha": 0.6,
              "alpha_ci": [0.5, 0.7], "samples": 8} for s in ("eagle3", "medusa") for t in (0.0, 1.0)]
    tree = analytic.Config(4, 2, 8)

    def row(strategy: str, temperature: float, backend: str = "torch") -> Candidate:
        m = Measurements.model_validate({"cells": cells, "run": {"backend": backend}})
        index = index_evidence(profile, m, measured_costs=True)
        opt = Option(plugins[strategy], tree, True, True)
        return candidate(index, cost_context(profile), opt, Bucket("chat", 1, temperature, 1.0))

    assert (row("eagle3", 1.0).is_tree, row("eagle3", 1.0).nodes) == (False, 4)
    assert row("eagle3", 0.0).is_tree and row("medusa", 1.0).is_tree
    assert row("eagle3", 1.0, backend="vllm").is_tree          # another engine's costs: its own behaviour


def test_measured_sibling_odds_shape_trees_only() -> None:
    """A cell's sibling_accept (picker.engine.siblings) sets a tree's E[L] from the measured odds; chains
    keep their model."""
    from policies.scalar import tree_length
    from policies.speedup_model import expected_length

    caps = Capabilities(trainable_heads=True, tree=True)
    cell = {**_chain_cell(4, 1.0), "sibling_accept": [0.3, 0.2, 0.15]}
    ev = evidence_from_cell(cell, caps)
    assert ev.siblings == (0.3, 0.2, 0.15)
    plain_ev = evidence_from_cell(_chain_cell(4, 1.0), caps)

    def length(e: Evidence, t: float, topk: int = 4, tokens: int = 12) -> float:
        return expected_length(Candidate(caps, 4, topk, tokens, t, evidence=e))

    assert length(ev, 1.0) == pytest.approx(tree_length(0.6, 4, 4, 11, (0.3, 0.2, 0.15)), abs=2e-3)
    assert length(ev, 1.0) < length(plain_ev, 1.0) - 0.3          # textbook siblings: α every rank
    assert length(ev, 0.0) == length(ev, 1.0)                     # the cell's own regime measured them
    assert length(ev, 1.0, topk=1, tokens=5) == length(plain_ev, 1.0, topk=1, tokens=5)  # a chain

"""Tests of the load-curve benchmarks (``bench/load``) and of the shipped constants and quoted errors
they reproduce: the published curves never see SGLang and meet their goal, ``specpick estimate``'s
range is their held-out error, the fixed costs and the knee are what their checks solve."""

from __future__ import annotations

import math

import pytest

from policies import HELD_OUT_ERROR, HELD_OUT_SHARE
from policies.loadcurve import engine_curve


def test_the_range_is_the_load_curves_held_out_error() -> None:
    """HELD_OUT_ERROR is the nearest-rank 80th percentile of |error| over the published curves' held-out
    predictions (docs/load-curve.md; no curve constant is fitted on those curves): recomputed here
    so it cannot go stale."""
    from bench.load.data import load_points
    from bench.load.predict import by_curve
    from bench.load.run import shipped_predictions

    points, _ = load_points()
    held = shipped_predictions(by_curve(points))
    errors = sorted(abs(p.error) for p in held)
    assert len(errors) == 60
    assert errors[math.ceil(HELD_OUT_SHARE * len(errors)) - 1] == pytest.approx(HELD_OUT_ERROR, abs=0.0015)


def test_published_bench_never_sees_sglang_and_meets_its_goal() -> None:
    from bench.load.data import load_points
    from bench.load.predict import by_curve
    from bench.load.run import GOAL, all_predictions, loso, shipped_predictions

    points, skipped = load_points()
    assert not any("sglang" in p.engine_name.lower() or p.engine == "sglang" for p in points)
    assert any(reason.startswith("RESERVED") for _, _, reason in skipped)
    shipped = sorted(abs(p.error) for p in shipped_predictions(by_curve(points)))
    assert len(shipped) == 60 and shipped[len(shipped) // 2] <= GOAL  # nothing fitted on these curves
    table = all_predictions(by_curve(points))
    held, thetas = loso(table)
    assert {p.point.source for p in held} == set(thetas)
    median = sorted(abs(p.error) for p in held)[len(held) // 2]
    assert median <= GOAL
    assert all(math.isfinite(p.predicted) for p in held)


def test_shipped_fixed_costs_are_what_their_calibration_solves() -> None:
    from bench.load.checks import calibrate

    curve = engine_curve("vllm")
    for key, value in calibrate().items():
        assert getattr(curve, key) == pytest.approx(value, rel=1e-3, abs=1e-9), key


def test_shipped_knee_fits_single_gemm_timings() -> None:
    from bench.load.knee import check

    err, _, _, p = check()
    assert p == engine_curve("vllm").knee_p and err < 0.03  # vLLM PR #49363, 9 GEMM timings

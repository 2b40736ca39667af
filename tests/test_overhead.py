"""picker.profiler.overhead: a speculative step's cost beyond plain's, fitted per step / drafting step / draft token."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from picker.profiler.latency import Timing
from picker.profiler.overhead import Observation, fit_overhead, observations, pooled
from picker.profiler.records import CellKey, Record
DATA = Path(__file__).resolve().parents[1] / "policies" / "data" / "engine_overhead.json"


def _rows(per_step: float, per_draft_step: float, per_draft_token: float, lengths: tuple[int, ...],
          noise: float = 0.01, seed: int = 0) -> list[Observation]:
    """Requests of 40 steps drafting on a share of them, priced by the linear model, with noise."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(60):
        steps, n = 40, lengths[i % len(lengths)]
        draft_steps = int(rng.integers(0, steps + 1))
        plain = 0.05 * (1 + 0.2 * rng.random())  # plain's pace drifts from round to round
        step = 1 + per_step + per_draft_step * draft_steps / steps + per_draft_token * n * draft_steps / steps
        out.append(Observation(steps, draft_steps, n * draft_steps, plain * steps * step * (1 + rng.normal(0, noise)),
                               plain))
    return out


def test_recovers_the_three_constants_where_share_and_length_vary() -> None:
    fit = fit_overhead(_rows(0.05, 0.30, 0.10, (1, 2, 4)))
    assert not fit.merged and fit.rows == 60 and fit.rms_residual < 0.03
    for est, true in ((fit.per_step, 0.05), (fit.per_draft_step, 0.30), (fit.per_draft_token, 0.10)):
        assert est is not None and est.lo <= true <= est.hi and est.hi - est.lo < 0.05, (est, true)


def test_a_constant_draft_length_merges_the_drafting_step_and_its_tokens() -> None:
    fit = fit_overhead(_rows(0.05, 0.30, 0.10, (2,)))
    assert fit.per_draft_token is None and "2 x per_draft_token" in fit.merged
    assert fit.per_step is not None and fit.per_draft_step is not None
    assert fit.per_draft_step.lo <= 0.30 + 2 * 0.10 <= fit.per_draft_step.hi


def test_a_constant_drafting_share_folds_into_the_per_step_charge() -> None:
    rows = [Observation(r.steps, r.steps, r.drafted * r.steps // max(r.draft_steps, 1), 0.0, r.plain_step_s)
            for r in _rows(0.0, 0.0, 0.0, (1, 4))]  # every step drafts
    rows = [Observation(r.steps, r.draft_steps, r.drafted, r.plain_step_s * r.steps * (1.1 + 0.2 + 0.05 * r.drafted / r.steps),
                        r.plain_step_s) for r in rows]
    fit = fit_overhead(rows)
    assert fit.per_draft_step is None and "per_step is per_step + 1.00 x per_draft_step" in fit.merged
    assert fit.per_step is not None and fit.per_step.value == pytest.approx(0.3, abs=1e-6)
    assert fit.per_draft_token is not None and fit.per_draft_token.value == pytest.approx(0.05, abs=1e-6)


def test_too_few_rows_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 3"):
        fit_overhead(_rows(0.0, 0.0, 0.0, (1,))[:2])


def _record(strategy: str, steps: int, seconds: float, round_: int, *, drafted: int = 0, draft_steps: int = 0) -> Record:
    cell = CellKey(task="code", strategy=strategy, num_draft_tokens=0 if strategy == "plain" else 2, temperature=0.0)
    timing = Timing(ttft_s=0.1, e2e_s=0.1 + seconds + 1.0, gaps_s=(seconds,), chunks=(1, 1),
                    engine={"predicted_ms": seconds * 1e3})
    return Record(cell=cell, prompt_ids=(f"code-{round_}",), tokens=steps + 1, forwards=steps + 1, steps=steps,
                  drafted=drafted, draft_steps=draft_steps, timings=(timing,), extra={"round": round_})


def test_observations_pair_each_request_with_plain_in_its_own_round() -> None:
    records = [_record("plain", 10, 1.0, 0), _record("plain", 10, 2.0, 1),
               _record("ngram", 5, 0.6, 0, drafted=8, draft_steps=4), _record("ngram", 5, 1.2, 1, drafted=2, draft_steps=1)]
    rows = observations(records)
    # the engine's own decode clock (predicted_ms), not the client's span; plain's pace from the same round
    assert [(r.steps, r.draft_steps, r.drafted, r.seconds, r.plain_step_s) for r in rows] == [
        (5, 4, 8, 0.6, 0.1), (5, 1, 2, 1.2, 0.2)]
    assert rows[0].cost == pytest.approx(0.2) and rows[1].cost == pytest.approx(0.2)
    assert rows[0].label == "ngram N=2 code T=0 C=1"


def test_the_shipped_constants_are_the_fit_of_the_shipped_rows() -> None:
    """Every fit in policies/data/engine_overhead.json, refitted from the rows it was fitted to."""
    data = json.loads(DATA.read_text(encoding="utf-8"))
    assert data["fits"]
    for fit in data["fits"]:
        rows = [Observation(**row) for row in fit["rows"]]
        assert fit["source"] and len(rows) == fit["fit"]["rows"]
        assert fit_overhead(rows).as_dict() == fit["fit"], fit["engine"]


def test_pooling_sums_a_cells_rows_against_plain_weighted_by_steps() -> None:
    rows = [Observation(10, 5, 5, 2.0, 0.1, "a"), Observation(30, 0, 0, 4.0, 0.2, "a"), Observation(5, 5, 5, 1.0, 0.1, "b")]
    a, b = pooled(rows)
    assert (a.steps, a.draft_steps, a.drafted, a.seconds, a.label) == (40, 5, 5, 6.0, "a")
    assert a.plain_step_s == pytest.approx((0.1 * 10 + 0.2 * 30) / 40) and b == rows[2]

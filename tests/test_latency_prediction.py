"""Predicted latency (policies.latency_model, picker.recommend.latency): the model's arithmetic, the
plan's per-range figures, the SLOs as constraints with their messages, and the rollout's gate."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from picker.inputs.workload import load_profile, profile_from_data
from picker.recommend.contract import Recommendation
from picker.recommend.latency import ITL_GATE_TOLERANCE
from picker.recommend.pipeline import recommend
from picker.recommend.render import render
from policies import Share, latency, pooled_latency

ROOT = Path(__file__).resolve().parents[1]

CHAT_8B = {  # the case: an 8B chat profile on one H100 at concurrency 32
    "model": "llama-3.1-8b-instruct", "hardware": "H100", "engine": "vllm",
    "traffic": {"task_mix": {"chat": 1.0}, "concurrency": 32, "temperature": 0.7},
    "drafters": {"draft_model": {"name": "llama-3.2-1b-instruct", "params_b": 1.24}},
}


def _rec(data: dict, tmp_path: Path, name: str = "p.yaml") -> Recommendation:
    return recommend(profile_from_data(data, file=str(tmp_path / name))).recommendation


def test_a_step_is_one_gap_and_tpot_divides_it() -> None:
    lat = latency(step_seconds=0.020, tokens_per_step=4.0, prefill_s=0.1, ttft_s=0.1, output_tokens=200, batch=1)
    assert lat.itl_ms_p50 == lat.itl_ms_p99 == pytest.approx(20.0)  # alone: no prefill ever lands in a gap
    assert lat.tpot_ms_mean == pytest.approx(5.0)
    assert lat.ttft_ms == pytest.approx(100.0)


def test_other_prefills_land_in_the_gaps_and_cost_the_same_per_token() -> None:
    plain = latency(0.010, 1.0, 0.050, 0.050, output_tokens=101, batch=9)
    spec = latency(0.015, 2.5, 0.050, 0.050, output_tokens=101, batch=9)
    assert plain.prefills_per_gap == pytest.approx(8 / 101)
    assert plain.itl_ms_p99 == pytest.approx(10.0 + 50.0)  # P(K >= 1) = 7.6% > 1%
    assert plain.itl_ms_p50 == pytest.approx(10.0)
    # Requests that take fewer steps turn over faster: more prefills per gap, the same per token.
    assert spec.prefills_per_gap > plain.prefills_per_gap
    per_token = (spec.tpot_ms_mean - 15.0 / 2.5, plain.tpot_ms_mean - 10.0)
    assert per_token[0] == pytest.approx(per_token[1], rel=0.02)


def test_gap_quantiles_are_the_inverted_cdf_of_the_atoms() -> None:
    """One sort serves every quantile: each equals numpy's inverted-CDF quantile (the profiler's)
    of the atoms written out as samples in proportion to their probability."""
    from policies.latency_model import gap_quantile, gap_quantiles

    rng = np.random.default_rng(7)
    for _ in range(50):
        values = rng.choice([5.0, 10.0, 12.5, 40.0, 90.0], size=int(rng.integers(1, 6)), replace=False)
        counts = rng.integers(1, 40, size=len(values))
        atoms = [(float(v), float(c) / 7.0) for v, c in zip(values, counts)]
        samples = np.repeat(values, counts)
        qs = (0.10, 0.50, 0.90, 0.99)
        want = tuple(float(np.quantile(samples, q, method="inverted_cdf")) for q in qs)
        assert gap_quantiles(atoms, qs) == pytest.approx(want)
        assert tuple(gap_quantile(atoms, q) for q in qs) == pytest.approx(want)
    assert gap_quantiles([], (0.5, 0.99)) == (0.0, 0.0)


def test_pooled_shares_weight_gaps_by_steps() -> None:
    # Half the tokens at 1 token a 10 ms step, half at 4 tokens a 20 ms step: 4 of 5 gaps are 10 ms.
    pooled = pooled_latency([Share(0.5, 0.010, 1.0, 0.0), Share(0.5, 0.020, 4.0, 0.0)], output_tokens=100, batch=1)
    assert pooled.itl_ms_p50 == pytest.approx(10.0)
    assert pooled.itl_ms_p99 == pytest.approx(20.0)
    assert pooled.tpot_ms_mean == pytest.approx(0.5 * 10.0 + 0.5 * 5.0)


def test_plain_already_misses_the_slo_and_says_by_how_much(tmp_path: Path) -> None:
    rec = _rec({**CHAT_8B, "slo": {"itl_p99_ms": 8}}, tmp_path)
    (check,) = rec.latency.slo  # type: ignore[union-attr]
    assert not check.met_by_plain and check.at_batch == 32
    said = " ".join(rec.warnings + rec.rationale)
    assert "plain decoding already misses the 8 ms p99 ITL SLO: about" in said
    assert "a 9.7 ms step" in said  # the step itself, before other requests' prefills
    assert "no strategy is deployable" not in said
    assert "plain decoding already misses the 8 ms p99 ITL SLO" in render(rec, "md")


def test_a_tpot_target_only_speculation_meets_rules_nothing_out(tmp_path: Path) -> None:
    data = yaml.safe_load((ROOT / "profiles" / "code-assistant-8b-a100.yaml").read_text())
    data["traffic"]["concurrency"] = 1
    data.pop("slo", None)
    free = _rec(data, tmp_path).latency
    assert free is not None
    base = free.per_range[0].plain.tpot_ms_mean
    rec = _rec({**data, "slo": {"tpot_ms": 0.9 * base}}, tmp_path, "t.yaml")
    (check,) = rec.latency.slo  # type: ignore[union-attr]
    assert not check.met_by_plain and check.met_by_deployed
    assert rec.decision.strategy != "none"
    assert check.deployed_ms < 0.9 * base < check.plain_ms


def test_per_range_figures_follow_the_schedule(tmp_path: Path) -> None:
    rec = recommend(load_profile(ROOT / "profiles" / "code-assistant-8b-a100.yaml")).recommendation
    lat = rec.latency
    assert lat is not None and lat.assumptions
    assert [(r.min_batch, r.max_batch) for r in lat.per_range] == \
        [(r.min_batch, r.max_batch) for r in rec.decision.batch_schedule]
    for row, rng in zip(lat.per_range, rec.decision.batch_schedule):
        if rng.num_speculative_tokens == 0:
            assert row.deployed == row.plain
        else:  # a whole step per gap, fewer per token
            assert row.deployed.itl_ms_p50 > row.plain.itl_ms_p50 and row.itl_p99_vs_plain >= 1.0
    again = Recommendation.model_validate_json(rec.model_dump_json())
    assert again.latency == lat
    assert "### Latency (predicted, per request)" in render(rec, "md")


def test_tpot_follows_the_predicted_speedup_at_batch_one(tmp_path: Path) -> None:
    data = yaml.safe_load((ROOT / "profiles" / "code-assistant-8b-a100.yaml").read_text())
    data["traffic"]["concurrency"] = 1
    data.pop("slo", None)
    rec = _rec(data, tmp_path)
    (row,) = [r for r in rec.latency.per_range if r.min_batch == 1]  # type: ignore[union-attr]
    assert row.tpot_vs_plain == pytest.approx(1.0 / rec.decision.batch_schedule[0].predicted_speedup, rel=0.02)


def test_rollout_gate_is_the_predicted_itl_ratio() -> None:
    rec = recommend(load_profile(ROOT / "profiles" / "code-assistant-8b-a100.yaml")).recommendation
    (gate,) = [s.gate for s in rec.rollout if s.name == "watch tail latency"]
    assert "within 5% of the baseline" not in gate
    assert "predicted " in gate and f"{ITL_GATE_TOLERANCE:.0%} tolerance" in gate
    ratio = float(gate.split("predicted ")[1].split("x")[0])
    assert float(gate.split("at most ")[1].split("x")[0]) == pytest.approx(ratio * (1 + ITL_GATE_TOLERANCE), abs=0.011)


def test_nothing_deployable_says_which_target_blocks_it(tmp_path: Path) -> None:
    data = yaml.safe_load((ROOT / "profiles" / "chat-70b-h100.yaml").read_text())
    data["traffic"]["concurrency"] = 1  # 21.1 ms a plain step, no prefill in a gap; every option's step is longer
    data["slo"] = {"itl_p99_ms": 21.5}
    rec = _rec(data, tmp_path)
    assert rec.decision.strategy == "none"
    assert rec.rationale == ["Leave speculation off: every option this deployment can run breaks the 21.5 ms p99 "
                             "ITL SLO that plain decoding meets (Alternatives says by how much)."]


def test_every_latency_target_is_echoed_in_the_plans_inputs(tmp_path: Path) -> None:
    """The inputs block states each SLO the profile gives, the TPOT target too (it read "none")."""
    data = {**CHAT_8B, "slo": {"tpot_ms": 30, "itl_p99_ms": 80}}
    rec = _rec(data, tmp_path)
    assert rec.inputs is not None and (rec.inputs.slo.tpot_ms, rec.inputs.slo.itl_p99_ms) == (30, 80)
    md = render(rec, "md")
    assert "mean time per output token (TPOT) ≤ 30 ms" in md and "p99 inter-token latency (ITL) ≤ 80 ms" in md

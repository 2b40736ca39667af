"""Never slower: a plan enables speculation only where the evidence says it pays.

Real profiles and measurements, the real scorer and decision (``picker.recommend.pipeline``); the
A/B gains below are written into a copy of the shipped Qwen/llama.cpp summary in the profiler's own
fields (``gain_vs_plain``, ``gain_ci``: ``picker.profiler.ab``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from picker.inputs.workload import load_profile
from picker.recommend.costs import choose_costs, model_cost
from picker.recommend.engine_configs import CONCURRENCY_CAP_FLAGS
from picker.recommend.evidence_index import index_evidence
from picker.recommend.pipeline import load_inputs, recommend_inputs
from picker.recommend.uncertainty import ENABLE_LOW, measured_low, widened
from policies import HELD_OUT_ERROR

ROOT = Path(__file__).resolve().parents[1]
QWEN = ROOT / "profiles" / "code-assistant-qwen-llamacpp.yaml"
QWEN_MEASURED = ROOT / "profiles" / "measurements" / "code-assistant-qwen-llamacpp.summary.json"
# The summary shipped before the re-measurement of 2026-12-05 (cheap profile, no interleaved rounds):
# ngram N=1 at about 1.02x with a range straddling 1 -- the case the rule exists for, kept as test data.
QWEN_STRADDLING = ROOT / "tests" / "data" / "qwen-llamacpp-straddling.summary.json"


def _shipped() -> list[tuple[Path, Path | None]]:
    out = []
    for p in sorted((ROOT / "profiles").glob("*.yaml")):
        m = ROOT / "profiles" / "measurements" / f"{p.stem}.summary.json"
        out.append((p, m if m.exists() else None))
    return out


@pytest.mark.parametrize(("profile", "measurements"), _shipped(), ids=lambda x: x.stem if x else "-")
def test_no_enabled_range_of_a_shipped_plan_can_be_slower(profile: Path, measurements: Path | None) -> None:
    """No enabled batch range has a predicted low end below 1 without a measured A/B interval above 1.
    Where the engine runs one setting at every batch, the ranges above the plan's max_concurrency may
    (the plan caps the server's concurrency below them, and names the measurement)."""
    result = recommend_inputs(load_inputs(profile, measurements))
    d, deployed = result.recommendation.decision, result.deployment
    for r in d.batch_schedule:
        if not r.num_speculative_tokens:
            continue
        if d.max_concurrency is not None and r.min_batch > d.max_concurrency:
            assert r.uncertain and r.measure, r
            # ...and the plan names the engine's own flag that holds the cap.
            flag = CONCURRENCY_CAP_FLAGS[result.recommendation.engine]
            assert f"{flag} {d.max_concurrency} caps it" in " ".join(result.recommendation.warnings), profile.stem
            continue
        assert r.predicted_speedup_range is not None
        shape = deployed.shapes.get(r.num_speculative_tokens, deployed.chosen)
        measured = measured_low(shape, result.table.buckets, r.min_batch) if r.min_batch in {
            b.batch for b in result.table.buckets} else None
        assert r.predicted_speedup_range[0] >= 1.0 or (measured is not None and measured > 1.0), (profile.stem, r)


def test_the_real_llamacpp_deployment_is_off_on_its_shipped_measurements() -> None:
    """Re-measured on a quiet machine with plain interleaved (6 ABBA rounds per task, -t 2 as the
    profile's server runs), ngram N=1 reads below 1 on every task (summarization's interval just
    reaches above): the plan is off over every batch (so at concurrency 1 and 4) and names what it weighed."""
    cells = [c for c in json.loads(QWEN_MEASURED.read_text())["cells"] if c["strategy"] == "ngram"]
    assert cells and all(c["gain_vs_plain"] < 1.0 and c["gain_ci"][0] < 1.0 for c in cells)
    rec = recommend_inputs(load_inputs(QWEN, QWEN_MEASURED)).recommendation
    assert rec.decision.strategy == "none" and rec.predicted_speedup.mean == 1.0
    (row,) = rec.decision.batch_schedule
    assert row.num_speculative_tokens == 0 and row.min_batch == 1 and row.max_batch is None
    assert any("ngram, N=1" in line for line in rec.rationale), rec.rationale


def test_the_real_llamacpp_deployment_leaves_speculation_off_and_says_what_to_measure() -> None:
    """Its earlier measurements predict ngram N=1 at about 1.02x with a range reaching well below 1
    (measured on llama.cpp: 0.79x): off at concurrency 1 and 4, with the profile command."""
    rec = recommend_inputs(load_inputs(QWEN, QWEN_STRADDLING)).recommendation
    assert rec.decision.strategy == "none"
    (row,) = rec.decision.batch_schedule
    assert row.num_speculative_tokens == 0 and row.min_batch == 1 and row.max_batch is None  # covers 1 and 4
    assert row.uncertain and row.predicted_speedup_range[0] < 1.0 < row.predicted_speedup_range[1]
    cmd = row.measure
    assert cmd.startswith("specpick profile --backend llamacpp ")
    for part in ("--strategies ngram", "--num-draft-tokens 1", "--tasks code,chat,structured,math,summarization",
                 "--temperatures 0,0.7", "--concurrency 1", "--plain-url", f"--workload {QWEN}"):
        assert part in cmd
    assert cmd in rec.decision.temperature_switch.reason and cmd in " ".join(rec.rationale)


def test_every_measure_command_is_one_the_profiler_takes() -> None:
    """The command an undecided range names runs as printed: every flag is one ``specpick profile``
    declares, and each times plain decoding on a second server of the same engine (``--plain-url``),
    as the A/B gain it asks for needs (SGLang, vLLM and llama.cpp alike)."""
    import shlex

    import typer.main

    from picker.cli.main import app

    takes = {o for p in typer.main.get_command(app).commands["profile"].params for o in p.opts}  # type: ignore[attr-defined]
    seen = []
    for profile, measurements in [*_shipped(), (QWEN, QWEN_STRADDLING)]:
        rec = recommend_inputs(load_inputs(profile, measurements)).recommendation
        for row in rec.decision.batch_schedule:
            if row.measure and row.measure.startswith("specpick profile "):
                seen.append(rec.engine)
                flags = [w for w in shlex.split(row.measure) if w.startswith("--")]
                assert set(flags) <= takes, (profile.stem, sorted(set(flags) - takes))
                assert "--plain-url" in flags and "--url" in flags, (profile.stem, row.measure)
    assert {"sglang", "llama_cpp"} <= set(seen), seen  # both kinds of engine are among the shipped plans


def _with_ab_gain(tmp_path: Path, low: float, high: float) -> Path:
    """The earlier summary plus ngram N=1 cells (the N=4 cells' acceptance) carrying an A/B gain."""
    data = json.loads(QWEN_STRADDLING.read_text())
    timings = ("speedup_vs_plain", "throughput_gain_vs_plain", "seconds", "tokens_per_second",
               "throughput_tokens_per_second")  # the N=4 run's: the A/B gain is the N=1 cells' only timing
    extra = []
    for c in data["cells"]:
        if c["strategy"] == "ngram" and c["num_draft_tokens"] == 4:
            cell = {k: v for k, v in c.items() if k not in timings}
            extra.append({**cell, "num_draft_tokens": 1, "per_position": None, "gain_vs_plain": (low + high) / 2,
                          "gain_ci": [low, high], "rounds": 11})
    data["cells"] += extra
    out = tmp_path / "code-assistant-qwen-llamacpp.summary.json"
    out.write_text(json.dumps(data))
    return out


def test_a_measured_interval_above_one_enables_what_the_prediction_cannot(tmp_path: Path) -> None:
    sure = recommend_inputs(load_inputs(QWEN, _with_ab_gain(tmp_path, 1.04, 1.12))).recommendation
    assert (sure.decision.strategy, sure.decision.num_speculative_tokens) == ("ngram", 1)
    assert sure.decision.batch_schedule[0].num_speculative_tokens == 1


def test_a_measured_interval_that_straddles_one_does_not(tmp_path: Path) -> None:
    unsure = recommend_inputs(load_inputs(QWEN, _with_ab_gain(tmp_path, 0.95, 1.12))).recommendation
    assert unsure.decision.strategy == "none"
    # ... and the measured interval widens the predicted range it stands beside
    assert unsure.decision.batch_schedule[0].predicted_speedup_range[0] <= 0.95


def test_the_range_carries_the_models_held_out_error() -> None:
    mean, low, high = widened((2.0, 2.0, 2.0), None)
    assert low == pytest.approx(2.0 / (1 + HELD_OUT_ERROR)) and high == pytest.approx(2.0 / (1 - HELD_OUT_ERROR))
    # independent spreads add in quadrature (log space): wider than either, narrower than their sum
    _, low2, _ = widened((2.0, 1.6, 2.2), None)
    assert 1.6 / (1 + HELD_OUT_ERROR) < low2 < min(1.6, 2.0 / (1 + HELD_OUT_ERROR))
    assert ENABLE_LOW > 1.0


def test_engine_overhead_is_a_named_seam_that_defaults_to_none() -> None:
    """The cost source's ``overhead`` (a live engine's per step / per drafting step / per draft token
    cost, in plain steps) is zero until a per-engine fit is wired in; set, it makes every speculative
    step dearer by exactly that, and the plan's speedups fall with it."""
    from dataclasses import replace

    from picker.engine.plugins import load_strategies
    from picker.recommend.costs import NO_OVERHEAD, EngineOverhead
    from picker.recommend.options import options_for
    from picker.recommend.scoring import bucket_speedup
    from picker.recommend.table import Bucket

    profile = load_profile(ROOT / "profiles" / "code-assistant-8b-a100.yaml")
    index = index_evidence(profile, None)
    costs = choose_costs(profile, index, None)
    assert costs.overhead == NO_OVERHEAD and costs.overhead.at(4) == 0.0
    option = next(o for o in options_for(profile, load_strategies(), costs.ctx.target)
                  if o.plugin.name == "ngram" and o.config.depth == 4)
    dear_costs = replace(costs, overhead=EngineOverhead(per_step=0.05, per_draft_step=0.1, per_draft_token=0.02))
    base, dear = model_cost(costs, option, 8), model_cost(dear_costs, option, 8)
    assert dear.step_ratio == pytest.approx(base.step_ratio + 0.05 + 0.1 + 0.02 * base.n_draft)
    b = Bucket("code", 8, 0.0, 1.0)
    assert bucket_speedup(index, dear_costs, option, b)[0] < bucket_speedup(index, costs, option, b)[0]

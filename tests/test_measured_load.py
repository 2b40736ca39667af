"""The user's own curve under load (picker.recommend.measured_load): a profile measured at several
concurrency levels prices the measured configurations' steps inside the measured range, and the
load curve (labelled model) outside it.

Two sources: a real ``specpick profile --concurrency 1,2,4`` of the zoo's Medusa heads on the
reference engine (as tests/test_profiler_concurrency.py profiles under load, with fewer prompts
and tokens), and a hand-written live-engine summary whose provenance matches a shipped profile's
deployment, so that the CLI itself applies it.
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from picker.cli.main import app
from picker.engine.plugins import load_strategies

ROOT = Path(__file__).resolve().parents[1]
LEVELS = (1, 2, 4)
runner = CliRunner()


@pytest.fixture(scope="module")
def zoo_load(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A real profile of the zoo's Medusa heads (N = 1, 2) at concurrency 1, 2, 4, and a workload
    profile of the same model that caps Medusa at 2 heads, so every configuration it can deploy
    was measured under load."""
    from picker.zoo.resolve import resolve_target

    out = tmp_path_factory.mktemp("zoo-load")
    result = runner.invoke(app, ["profile", "--model", "zoo", "--strategies", "medusa", "--tasks", "code",
                                 "--temperatures", "0", "--limit-per-task", "2", "--max-new-tokens", "8",
                                 "--num-draft-tokens", "1,2", "--concurrency", ",".join(map(str, LEVELS)),
                                 "--no-early-stop", "--quiet", "--no-plot", "--out", str(out / "run")])
    assert result.exit_code == 0, result.output
    target, artifacts, _ = resolve_target("zoo")
    data = {
        "name": "zoo-under-load", "description": "the zoo ci target on the reference engine, under load",
        "model": {"name": "zoo:ci/target", "hf_config": str(Path(target) / "config.json"), "params_b": 0.00135},
        "hardware": {"gpu": "cpu", "count": 1}, "engine": {"name": "tensorrt_llm", "version": "reference-loop"},
        "traffic": {"task_mix": {"code": 1.0}, "prompt_tokens": {"mean": 64}, "output_tokens": {"mean": 8},
                    # Most traffic where the model decides, so that a noisy measured gain (a shared
                    # CPU: 0.45x to 3.7x seen at one level) cannot turn the whole plan off.
                    "concurrency": [{"batch_size": 1, "weight": 0.05}, {"min": 2, "max": 4, "weight": 0.05},
                                    {"min": 16, "max": 64, "weight": 0.9}],
                    "temperature": [{"value": 0.0, "weight": 1.0}]},
        "drafters": {"disabled": [n for n in load_strategies() if n != "medusa"],
                     "medusa_heads": {"path": str(artifacts["medusa_heads"]), "num_heads": 2}},
        "memory_headroom_gib": 100,
    }
    (out / "zoo.yaml").write_text(yaml.safe_dump(data))
    return {"summary": out / "run" / "summary.json", "profile": out / "zoo.yaml"}


def _gains(summary: Path) -> dict[tuple[int, int], float]:
    cells = json.loads(summary.read_text())["cells"]
    return {(c["num_draft_tokens"], c["concurrency"]): c["throughput_gain_vs_plain"] for c in cells}


def test_measured_gain_prices_the_measured_range_and_the_model_the_rest(zoo_load: dict[str, Path]) -> None:
    """Inside 1..4 every step cost is the one that reproduces the measured gain at the measured α
    (interpolated in log concurrency between levels); at 8 and beyond it is the load curve's."""
    from picker.inputs.measurements import load_measurements
    from picker.inputs.workload import load_profile
    from picker.recommend.costs import choose_costs, cost, model_cost
    from picker.recommend.evidence_index import index_evidence
    from picker.recommend.measured_load import MEASURED, MODEL, cost_source
    from picker.recommend.scoring import bucket_speedup, score
    from picker.recommend.table import Bucket

    prof, meas = load_profile(zoo_load["profile"]), load_measurements(zoo_load["summary"])
    gains = _gains(zoo_load["summary"])
    # The reference loop is no serving engine: its costs transfer only when asked (as bench/regret does).
    index = index_evidence(prof, meas, measured_costs=True)
    costs = choose_costs(prof, index, meas)
    table = score(prof, index, costs)
    medusa = {r.config.depth: r for r in table.rows if r.plugin.name == "medusa"}
    assert sorted(medusa) == [1, 2] and all(r.measured_levels == LEVELS for r in medusa.values())
    for n, row in medusa.items():
        for level in LEVELS:
            c = cost(index, costs, row.option, level)
            assert cost_source(c) == MEASURED and c.step_ratio >= 1.0
            mean = bucket_speedup(index, costs, row.option, Bucket("code", level, 0.0, 1.0))[0]
            if c.step_ratio > 1.0 + 1e-9:  # not at the floor: the measured gain, exactly
                assert mean == pytest.approx(gains[(n, level)], rel=1e-6)
            else:  # a gain above what one plain-step-priced step can give: the floor binds
                assert mean <= gains[(n, level)]
        r2, r4 = cost(index, costs, row.option, 2).step_ratio, cost(index, costs, row.option, 4).step_ratio
        between = r2 + (r4 - r2) * math.log(1.5) / math.log(2)
        assert cost(index, costs, row.option, 3).step_ratio == pytest.approx(between)
        for batch in (8, 64):  # outside: the load curve, never the measured ends carried on
            c = cost(index, costs, row.option, batch)
            assert cost_source(c) == MODEL and c == model_cost(costs, row.option, batch)


def test_a_measured_level_prices_every_length_with_its_own_timings(zoo_load: dict[str, Path]) -> None:
    """At a concurrency the profile measured, the step timings come from the cell measured there
    (acceptance still from the lowest level); at one it did not, from the lowest level's."""
    from picker.engine.plugins import load_strategies
    from picker.inputs.measurements import load_measurements
    from picker.inputs.workload import load_profile
    from picker.recommend.evidence_index import evidence, evidence_at, index_evidence

    index = index_evidence(load_profile(zoo_load["profile"]), load_measurements(zoo_load["summary"]),
                           measured_costs=True)
    medusa = load_strategies()["medusa"]
    low = evidence(index, medusa, "code", 0.0, 1)
    assert low.cost is not None and low.cost.batch == 1
    for batch in LEVELS:
        ev = evidence_at(index, medusa, "code", 0.0, 1, batch)
        assert ev.cost is not None and ev.cost.batch == batch and ev.alpha == low.alpha
        assert ev.cost.output_tokens == low.cost.output_tokens
    assert evidence_at(index, medusa, "code", 0.0, 1, 8) is low
    assert evidence_at(index, medusa, "code", 0.0, 1, 4).cost != low.cost


def test_a_sibling_of_the_measured_length_takes_its_factor_off_the_timings(
        zoo_load: dict[str, Path], tmp_path: Path) -> None:
    """With only Medusa N = 2 measured under load, N = 1 is priced from the step timings times
    the factor by which N = 2's measured gain is off its own timing-based prediction at the same
    level, task and temperature: 1 at the lowest level, interpolated in log concurrency between
    levels, 1 outside them."""
    from picker.engine.plugins import load_strategies
    from picker.inputs.measurements import load_measurements
    from picker.inputs.workload import load_profile
    from picker.recommend.costs import at_cost, choose_costs, cost, level_factor, model_cost
    from picker.recommend.evidence_index import index_evidence
    from picker.recommend.measured_load import MEASURED, cost_source
    from picker.recommend.options import options_for
    from picker.recommend.scoring import bucket_speedup
    from picker.recommend.table import Bucket
    from picker.recommend.uncertainty import widened

    summary = json.loads(zoo_load["summary"].read_text())
    summary["cells"] = [c for c in summary["cells"] if not (c["strategy"] == "medusa" and c["num_draft_tokens"] == 1)]
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    prof, meas = load_profile(zoo_load["profile"]), load_measurements(tmp_path / "summary.json")
    index = index_evidence(prof, meas, measured_costs=True)
    costs = choose_costs(prof, index, meas)
    medusa = {o.config.depth: o for o in options_for(prof, load_strategies(), costs.ctx.target)
              if o.plugin.name == "medusa" and not o.config.is_tree}
    one, two = medusa[1], medusa[2]
    assert cost_source(cost(index, costs, two, 4)) == MEASURED and cost_source(cost(index, costs, one, 4)) != MEASURED
    gains = _gains(tmp_path / "summary.json")
    factors = {}
    for level in LEVELS:
        b = Bucket("code", level, 0.0, 1.0)
        factors[level] = level_factor(index, costs, one, b)
        timed = at_cost(index, costs, one, b, cost(index, costs, one, level), False)
        # (the range then carries the model's held-out error: picker.recommend.uncertainty.widened)
        assert bucket_speedup(index, costs, one, b) == pytest.approx(widened(tuple(factors[level] * x for x in timed),
                                                                             None, costs.model_error))
        if level > 1:  # N = 2's timings times the factor give back its measured gain
            own = at_cost(index, costs, two, b, model_cost(costs, two, level), False)[0]
            assert factors[level] * own == pytest.approx(gains[(2, level)], rel=1e-9)
    assert factors[1] == 1.0 and level_factor(index, costs, two, Bucket("code", 4, 0.0, 1.0)) == 1.0
    w = math.log(1.5) / math.log(2)
    assert level_factor(index, costs, one, Bucket("code", 3, 0.0, 1.0)) == pytest.approx(
        factors[2] + w * (factors[4] - factors[2]))
    assert level_factor(index, costs, one, Bucket("code", 8, 0.0, 1.0)) == 1.0


def test_the_schedule_follows_the_measurement_inside_and_says_model_outside(zoo_load: dict[str, Path]) -> None:
    from picker.inputs.measurements import load_measurements
    from picker.inputs.workload import load_profile
    from picker.recommend.pipeline import recommend

    prof, meas = load_profile(zoo_load["profile"]), load_measurements(zoo_load["summary"])
    gains = _gains(zoo_load["summary"])
    rec = recommend(prof, meas, measured_costs=True).recommendation
    rows = rec.decision.batch_schedule
    if rec.decision.strategy == "none":
        # The heavy batches 16-64 are priced from the batch-1 step timings, as noisy on a shared CPU
        # as the gains: when nothing pays over the workload, the plan says so and drafts nothing.
        from picker.recommend.table import NOT_WORTH_IT

        table = recommend(prof, meas, measured_costs=True).table
        assert all(r.mean < NOT_WORTH_IT for r in table.rows if r.plugin.name == "medusa")
        assert [r.num_speculative_tokens for r in rows] == [0]
        return
    assert rec.decision.strategy == "medusa"
    from picker.engine.plugins import load_strategies
    from picker.recommend.engine_configs import runs_batch_schedule

    # TensorRT-LLM runs Medusa at one length at every batch (no draft_len_schedule for it): the rows
    # then also split where the predicted range stops clearing the bar, and such a level stays on, saying so.
    engine = prof.engine.name
    topk = rec.decision.tree.topk if rec.decision.tree else 1
    fixed = not runs_batch_schedule(engine, load_strategies()["medusa"], topk, prof.engine.version)
    for r in rows:
        inside = r.max_batch is not None and r.max_batch <= LEVELS[-1]
        assert r.step_cost == ("measured" if inside else "model"), r
        assert inside or r.min_batch > LEVELS[-1]  # rows split where the source changes
        if r.step_cost == "measured" and r.min_batch in LEVELS:
            k, level = r.num_speculative_tokens, r.min_batch
            if k:  # on: the measured gain of the depth deployed there
                # one unit of the plan's 3rd decimal; 1e-9 so float sums (1.071 + 0.001 < 1.072) do not bite
                assert r.predicted_speedup <= round(gains[(k, level)], 3) + 1e-3 + 1e-9
                assert gains[(k, level)] >= 1.0 or fixed  # a schedule that can switch turns a losing level off
            elif r is rows[0] or rows[rows.index(r) - 1].num_speculative_tokens:  # the first row off
                assert gains[(1, level)] < 1.0  # measured below 1x at every allowed depth
    assert any("interpolated in log concurrency" in n for n in rec.evidence.notes)
    # Two neighbouring rows drafting the same K are split only by the source of their step costs (or,
    # at one fixed length, where the predicted range's low end stops clearing the bar: uncertainty.enabled).
    for a, b in itertools.pairwise(rows):
        assert a.num_speculative_tokens != b.num_speculative_tokens or a.step_cost != b.step_cost or (
            fixed and a.uncertain != b.uncertain)


def test_measurements_of_another_engine_do_not_price_the_deployment(zoo_load: dict[str, Path]) -> None:
    """Through the CLI the reference loop's curve does not move a tensorrt_llm plan (step costs do
    not transfer across engines), and the plan says it was not used."""
    result = runner.invoke(app, ["recommend", str(zoo_load["profile"]), "--measurements",
                                 str(zoo_load["summary"]), "--format", "json"])
    assert result.exit_code == 0, result.output
    rec = json.loads(result.output)
    assert {r["step_cost"] for r in rec["decision"]["batch_schedule"]} == {"model"}
    assert any("gain against concurrency" in n and "is not used" in n for n in rec["evidence"]["notes"])


# --------------------------------------------------------------------------- through the CLI

LIVE_GAINS = {1: 1.5, 2: 1.2, 4: 0.8}  # a prompt-lookup curve that crosses 1 between 2 and 4


def _live(tmp_path: Path, gains: dict[int, float] = LIVE_GAINS) -> tuple[Path, Path]:
    """The shipped code-assistant deployment with prompt lookup only, and a vLLM summary of that
    deployment measured at three levels (every chain length 1..8, gains falling below 1 at 4)."""
    prof = yaml.safe_load((ROOT / "profiles" / "code-assistant-8b-a100.yaml").read_text())
    prof["drafters"] = {"disabled": [n for n in load_strategies() if n != "ngram"]}
    prof["engine"]["version"] = "0.32.0"  # a vLLM that switches the draft length by batch size (0.24.0 on)
    profile = tmp_path / "ngram.yaml"
    profile.write_text(yaml.safe_dump(prof))
    prov = {"model": {"name": prof["model"]["name"]}, "backend": "vllm", "engine": "vllm",
            "engine_version": prof["engine"]["version"], "hardware": {"gpu": "a100-80gb", "gpu_count": 1}}
    cells = [{"task": "code", "strategy": "ngram", "temperature": 0.0, "num_draft_tokens": n, "alpha": 0.6,
              "alpha_ci": [0.55, 0.65], "samples": 40, "concurrency": c, "throughput_gain_vs_plain": g}
             for n in range(1, 9) for c, g in gains.items()]
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"cells": cells, "run": {"backend": "vllm", "provenance": prov}}))
    return profile, summary


def _recommend(*args: str) -> dict[str, Any]:
    result = runner.invoke(app, ["recommend", *args, "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def _k_at(rec: dict[str, Any], batch: int) -> int:
    return next(r["num_speculative_tokens"] for r in rec["decision"]["batch_schedule"]
                if r["min_batch"] <= batch and (r["max_batch"] is None or batch <= r["max_batch"]))


def test_measured_below_one_at_four_is_off_there_though_the_model_says_on(tmp_path: Path) -> None:
    profile, summary = _live(tmp_path)
    model = _recommend(str(profile))
    # the load curve alone: prompt lookup pays (to 32: above, its range's low end no longer clears the bar)
    assert _k_at(model, 4) > 0 and _k_at(model, 32) > 0
    rec = _recommend(str(profile), "--measurements", str(summary))
    rows = rec["decision"]["batch_schedule"]
    assert _k_at(rec, 1) > 0 and _k_at(rec, 4) == 0
    assert [r["step_cost"] for r in rows if r["min_batch"] <= 4] == ["measured"] * len(
        [r for r in rows if r["min_batch"] <= 4])
    assert all(r["step_cost"] == "model" for r in rows if r["min_batch"] > 4)
    assert rec["predicted_speedup"]["mean"] < model["predicted_speedup"]["mean"]
    on = next(r for r in rows if r["num_speculative_tokens"])
    assert on["break_even_alpha"] != next(r for r in model["decision"]["batch_schedule"]
                                          if r["min_batch"] == 1)["break_even_alpha"]
    md = runner.invoke(app, ["recommend", str(profile), "--measurements", str(summary)]).output
    assert "| measured under load |" in md and "| cost model |" in md
    explained = _recommend(str(profile), "--measurements", str(summary), "--explain")
    code = next(t for t in explained["explain"]["per_task"] if t["task"] == "code")
    ngram = next(c for c in code["candidates"] if c["strategy"] == "ngram")
    assert ngram["evidence"]["cost"]["source"] == "measured under load"  # code's heaviest bucket: batch 3
    assert ngram["evidence"]["cost"]["levels"] == list(LIVE_GAINS)
    assert any("interpolated in log concurrency" in n for n in explained["explain"]["notes"])
    from picker.cli.report import build_page

    page = build_page(profile, summary)
    assert "<td>measured under load</td>" in page and "<td>cost model</td>" in page


def test_a_measured_curve_may_turn_speculation_on_at_a_larger_batch(tmp_path: Path) -> None:
    """"Once off, stay off" smooths the model's noise, not a measurement: below 1x at batch 1 and
    above it at 2 and 4 (a server that batches plain decoding badly) gives off, then on."""
    profile, summary = _live(tmp_path, {1: 0.9, 2: 1.4, 4: 1.5})
    rec = _recommend(str(profile), "--measurements", str(summary))
    assert (_k_at(rec, 1), _k_at(rec, 2) > 0, _k_at(rec, 4) > 0) == (0, True, True)
    first = rec["decision"]["batch_schedule"][0]
    assert (first["min_batch"], first["max_batch"], first["step_cost"]) == (1, 1, "measured")


def test_the_controller_costs_its_cells_on_the_same_curve(tmp_path: Path) -> None:
    """The SDK plan's R(n, batch) table (the Controller's per-batch break-even) reads the plan's cost
    source: measured at batch 1, 2, 4, the load curve from 8 up."""
    from picker.engine.plugins import load_strategies
    from picker.inputs.measurements import load_measurements
    from picker.inputs.workload import load_profile
    from picker.recommend.costs import choose_costs, measured_ratios, model_cost
    from picker.recommend.evidence_index import index_evidence
    from picker.recommend.table import Option
    from picker.sdk.plan import CELL_COST_BATCH, plan_from_profile
    from policies import chain

    profile, summary = _live(tmp_path)
    prof, meas = load_profile(profile), load_measurements(summary)
    rec, plan = plan_from_profile(prof, meas)
    assert rec.decision.strategy == plan.strategy == "ngram"
    index = index_evidence(prof, meas)
    costs = choose_costs(prof, index, meas)
    option = Option(load_strategies()["ngram"], chain(1), True, True)
    measured = dict(measured_ratios(index, costs, option))
    for b, ratio in zip(CELL_COST_BATCH, plan.step_ratio[0]):
        want = measured[b] if b in measured else model_cost(costs, option, b).step_ratio
        assert ratio == pytest.approx(want), b
    assert plan.step_ratio[0][2] != pytest.approx(model_cost(costs, option, 4).step_ratio)

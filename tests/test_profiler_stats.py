"""Counters to rates, intervals, stopping, records on disk, and the summary the policy reads."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from picker.cli.main import app
from picker.errors import UserError
from picker.inputs.measurements import load_measurements
from picker.profiler.records import CellKey, Record, RecordLog, chain_positions, positions_from_histogram
from picker.profiler.stats import MIN_BOOTSTRAP, cell_stats, tau_by_depth, wilson
from picker.profiler.stopping import BELOW_BREAK_EVEN, DOMINATED, PRECISION, StopRule, decide, speedup_bounds
from picker.profiler.summary import build_summary, write_json_atomic
from policies.theory import break_even_alpha, expected_length_iid

KEY = CellKey("code", "vanilla", 0.0, 4)


def simulate(rates: list[float], prompts: int, steps: int, seed: int = 0, key: CellKey = KEY) -> list[Record]:
    """Chain generations whose position k accepts with probability rates[k] (given the earlier ones)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(prompts):
        reached, acc = [0] * len(rates), [0] * len(rates)
        accepted = 0
        for _ in range(steps):
            k = 0
            while k < len(rates) and rng.random() < rates[k]:
                k += 1
            r, a = chain_positions(len(rates), k)
            reached = [x + y for x, y in zip(reached, r)]
            acc = [x + y for x, y in zip(acc, a)]
            accepted += k
        out.append(Record(key, (f"p{i}",), tokens=accepted + steps + 1, forwards=steps + 1, steps=steps,
                          drafted=steps * len(rates), accepted=accepted, pos_reached=tuple(reached),
                          pos_accepted=tuple(acc), draft_s=0.01 * steps * len(rates), verify_s=0.1 * steps,
                          wall_s=0.1 * steps + 0.05))
    return out


def test_rates_follow_their_conventions() -> None:
    recs = simulate([0.8, 0.8, 0.8, 0.8], prompts=40, steps=60)
    s = cell_stats(recs, "k")
    assert s.alpha == sum(r.accepted for r in recs) / sum(r.drafted for r in recs)
    assert s.tau == 1 + s.accepted / s.steps
    assert s.cost_ratio == pytest.approx(0.1)  # 0.01 s per draft token over 0.1 s per verify
    # i.i.d. acceptance: every conditional position and alpha_iid sit at 0.8; accepted/drafted does not.
    assert s.per_position == pytest.approx([0.8] * 4, abs=0.03)
    assert s.alpha_iid == pytest.approx(0.8, abs=0.02)
    expected_accepted_fraction = (expected_length_iid(0.8, 4) - 1) / 4
    assert s.alpha == pytest.approx(expected_accepted_fraction, abs=0.03)
    assert s.tau == pytest.approx(expected_length_iid(0.8, 4), abs=0.05)
    assert tau_by_depth(s.per_position)[-1] == pytest.approx(s.tau, abs=0.05)


def test_bootstrap_interval_covers_and_narrows() -> None:
    truth = (expected_length_iid(0.7, 4) - 1) / 4
    widths, covered = [], 0
    for seed in range(20):
        s = cell_stats(simulate([0.7] * 4, prompts=30, steps=20, seed=seed), f"s{seed}")
        lo, hi = s.alpha_ci
        covered += lo <= truth <= hi
        widths.append(hi - lo)
    assert covered >= 17  # nominal 95%: 19 of 20 expected
    wide = cell_stats(simulate([0.7] * 4, prompts=8, steps=20), "w")
    assert wide.half_width > np.mean(widths) / 2
    assert cell_stats(simulate([0.7] * 4, prompts=30, steps=20), "x").alpha_ci == \
        cell_stats(simulate([0.7] * 4, prompts=30, steps=20), "x").alpha_ci  # reproducible


def test_few_generations_fall_back_to_wilson() -> None:
    s = cell_stats(simulate([0.5], prompts=MIN_BOOTSTRAP - 1, steps=10), "k")
    assert s.alpha_ci_method == "wilson-tokens" and s.alpha_ci == wilson(s.accepted, s.drafted)


def test_turns_of_one_prompt_are_one_unit() -> None:
    recs = simulate([0.5], prompts=6, steps=5)
    doubled = recs + [Record(r.cell, r.prompt_ids, tokens=r.tokens, forwards=r.forwards, steps=r.steps,
                             drafted=r.drafted, accepted=r.accepted) for r in recs]
    assert cell_stats(doubled).samples == 6


def test_histogram_and_chain_positions_agree() -> None:
    hist = [3, 1, 2, 4]  # 10 steps of 3 drafts
    reached, acc = positions_from_histogram(hist)
    by_steps = [chain_positions(3, k) for k, n in enumerate(hist) for _ in range(n)]
    assert reached == [sum(r[0][i] for r in by_steps) for i in range(3)]
    assert acc == [sum(r[1][i] for r in by_steps) for i in range(3)]


def _group(alphas: dict[str, float], prompts: int = 30) -> dict[CellKey, object]:
    return {CellKey("chat", s, 0.0, 4): cell_stats(simulate([a] * 4, prompts, 30, key=CellKey("chat", s, 0.0, 4)),
                                                     s) for s, a in alphas.items()}


def test_stopping_rules() -> None:
    rule = StopRule(ci_target=0.001, min_samples=8)  # out of reach: only the decision rules can fire
    group = _group({"vanilla": 0.85, "ngram": 0.15, "medusa": 0.5})
    stops = decide(group, set(group), rule)
    by_name = {k.strategy: v for k, v in stops.items()}
    # ngram's upper bound predicts < 1x at c = 0.1 per token: E[L](0.15+, 4) < 4*0.1 + 1
    assert break_even_alpha(4, 0.1) > group[CellKey("chat", "ngram", 0.0, 4)].alpha_iid_ci[1]
    assert by_name["ngram"] == BELOW_BREAK_EVEN
    assert by_name["medusa"] == DOMINATED  # its best case is below vanilla's worst case
    assert "vanilla" not in by_name
    assert decide(group, set(group), StopRule(early=False)) == {}
    few = _group({"vanilla": 0.85, "ngram": 0.15}, prompts=5)
    assert decide(few, set(few), StopRule(ci_target=0.5)) == {}  # under min_samples nothing stops


def test_precision_stop_needs_the_target() -> None:
    group = _group({"vanilla": 0.6}, prompts=60)
    stats = next(iter(group.values()))
    assert decide(group, set(group), StopRule(ci_target=stats.half_width + 1e-9)) == {next(iter(group)): PRECISION}
    assert decide(group, set(group), StopRule(ci_target=stats.half_width / 2)) == {}


def test_speedup_bounds_for_a_cell_that_never_drafts() -> None:
    s = cell_stats([Record(KEY, ("p",), tokens=5, forwards=5, steps=4)])
    assert speedup_bounds(KEY, s, __import__("picker.profiler.stopping").profiler.stopping.StepCost()) == (1.0, 1.0)


def test_progress_bars_follow_cells() -> None:
    from picker.profiler.progress import RichProgress

    with RichProgress(mode="bars") as bars:
        bars.cell(KEY, 2, 10)
        bars.advance(KEY, 5, 10)
        bars.stop(KEY, PRECISION)
        task = bars.bars.tasks[0]
    assert task.completed == task.total == 10 and PRECISION in task.description


def test_log_survives_a_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    log = RecordLog.open(path, resume=False)
    recs = simulate([0.5], prompts=3, steps=4)
    for r in recs:
        log.append(r)
    log.append_stop(KEY, PRECISION)
    log.close()
    intact = path.read_bytes()
    path.write_bytes(intact + recs[0].to_json().encode()[:37])  # a write cut short by a kill
    again = RecordLog.open(path, resume=True)
    assert again.torn is not None and again.torn.startswith("line 5: torn last record (37 bytes)")
    assert again.records == recs and again.stops == {KEY.id: PRECISION}
    assert path.read_bytes() == intact  # cut back to the last whole line before appending
    again.append(recs[0])
    again.close()
    assert len(RecordLog.open(path, resume=True).records) == 4


def test_log_refuses_to_mix_runs_and_corrupt_middles(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    log = RecordLog.open(path, resume=False)
    log.append(simulate([0.5], 1, 2)[0])
    log.close()
    with pytest.raises(UserError, match="pass --resume"):
        RecordLog.open(path, resume=False)
    path.write_text("garbage\n" + path.read_text())
    with pytest.raises(UserError) as err:
        RecordLog.open(path, resume=True)
    assert err.value.field == "line 1"


def test_summary_loads_as_measurements_and_moves_recommend(tmp_path: Path) -> None:
    tasks = ("chat", "code", "math", "rag", "translation", "creative")
    alphas = {"eagle3": 0.05, "vanilla": 0.5, "medusa": 0.5, "lookahead": 0.3, "ngram": 0.3, "suffix": 0.3,
              "mtp": 0.5}
    recs = [r for strategy, a in alphas.items() for t in tasks for temp in (0.0, 0.7, 1.0)
            for r in simulate([a] * 4, prompts=6, steps=10, key=CellKey(t, strategy, temp, 4))]
    path = tmp_path / "summary.json"
    write_json_atomic(path, build_summary(recs, {}, {"backend": "test"}))
    meas = load_measurements(path)
    assert len(meas.cells) == 126 and all(c.per_position for c in meas.cells)
    assert meas.lookup("eagle3", "code", 0.7).alpha < 0.05
    profile = Path(__file__).resolve().parents[1] / "profiles" / "chat-70b-h100.yaml"
    runner = CliRunner()
    base = json.loads(runner.invoke(app, ["recommend", str(profile), "--format", "json"]).stdout)
    result = runner.invoke(app, ["recommend", str(profile), "--format", "json", "--measurements", str(path)])
    assert result.exit_code == 0, result.output
    rec = json.loads(result.stdout)
    assert rec["evidence"]["source"] == "measured"
    assert base["decision"]["strategy"] == "eagle3" and rec["decision"]["strategy"] != "eagle3"

"""``specpick check-load RUN --against RUN2``: one measured load curve scored as a prediction of a
repeat of itself, the way the load curve is scored (anchored at the smallest level); and the
command's bad input, one line each, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from picker.cli.main import app
from picker.profiler.load_check import compare_runs as compare
from picker.profiler.load_check import curves
from picker.profiler.load_check import replicate_check as check

runner = CliRunner()
CAL = Path(__file__).resolve().parent / "data" / "zoo-ci-cpu-calibration-2026-12-03.json"


def _run(folder: Path, load: list[dict]) -> Path:
    folder.mkdir()
    (folder / "summary.json").write_text(json.dumps({"cells": [], "load": load}), encoding="utf-8")
    return folder


def _entry(task: str, strategy: str, gains: list[tuple[int, float]]) -> dict:
    return {"task": task, "temperature": 0.0, "strategy": strategy, "num_draft_tokens": 4, "tree": None,
            "gain": [list(p) for p in gains]}


def test_anchored_at_the_smallest_level_like_the_model() -> None:
    c = check(("code", 0.0, "ngram", 4, None), [(1, 1.5), (4, 1.2), (16, 0.8)], [(1, 1.0), (4, 0.9), (16, 0.5)])
    assert c is not None
    assert c.predicted == pytest.approx((1.5, 1.35, 0.75))  # the repeat's shape, scaled to the first point
    assert c.errors == pytest.approx([1.35 / 1.2 - 1, 0.75 / 0.8 - 1])
    assert c.measured_crossover == 8.0 and c.crossover_ok  # 1.2 -> 0.8 halfway in log C
    raw = check(("code", 0.0, "ngram", 4, None), [(1, 1.5), (4, 1.2), (16, 0.8)], [(1, 1.0), (4, 0.9), (16, 0.5)],
                anchor=False)
    assert raw is not None and raw.predicted == (1.0, 0.9, 0.5) and raw.predicted_crossover == 1.0
    assert not raw.crossover_ok  # three doublings from 8


def test_only_curves_and_levels_both_runs_hold(tmp_path: Path) -> None:
    a = _run(tmp_path / "a", [_entry("chat", "ngram", [(1, 1.1), (4, 0.9), (16, 0.7)]),
                              _entry("code", "medusa", [(1, 1.3), (16, 1.1)]),
                              _entry("math", "vanilla", [(1, 1.2)])])  # one level: no curve
    b = _run(tmp_path / "b", [_entry("chat", "ngram", [(1, 1.0), (16, 0.95)]),
                              _entry("rag", "medusa", [(1, 1.3), (16, 1.1)])])
    ca, cb = curves(a), curves(b)
    assert set(ca) == {("chat", 0.0, "ngram", 4, None), ("code", 0.0, "medusa", 4, None)}
    checks = compare(ca, cb)
    assert [c.key for c in checks] == ["chat T=0 ngram N=4"]
    assert checks[0].levels == (1, 16)  # C = 4 is in one run only
    assert checks[0].predicted == pytest.approx((1.1, 1.045))
    # Measured: falls through 1 between 1 and 4; the repeat ends above 1: a "false" non-crossing.
    assert checks[0].measured_crossover is not None and checks[0].predicted_crossover is None
    assert not checks[0].crossover_ok


def test_against_prints_both_directions_and_writes_json(tmp_path: Path) -> None:
    a = _run(tmp_path / "a", [_entry("chat", "ngram", [(1, 1.1), (4, 0.9), (16, 0.7)])])
    b = _run(tmp_path / "b", [_entry("chat", "ngram", [(1, 1.2), (4, 1.0), (16, 0.8)])])
    out = tmp_path / "rep.json"
    result = runner.invoke(app, ["check-load", str(a), "--against", str(b), "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "## A from B" in result.output and "## B from A" in result.output
    assert "crossovers within 1 grid step: 1/1" in result.output
    doc = json.loads(out.read_text())
    assert set(doc) == {"A from B", "B from A"} and doc["A from B"][0]["crossover_ok"] is True


def test_the_load_curve_predicts_a_runs_curve_from_its_smallest_level(tmp_path: Path) -> None:
    """The committed zoo calibration prices a two-level ngram curve (no records: every request at
    the mean): the first level is the measurement itself, the second a prediction, both printed."""
    run = _run(tmp_path / "run", [_entry("chat", "ngram", [(1, 1.3), (8, 1.1)])])
    (run / "run.json").write_text(json.dumps({"max_new_tokens": 32}), encoding="utf-8")
    (run / "records.jsonl").write_text("", encoding="utf-8")
    out = tmp_path / "checks.json"
    result = runner.invoke(app, ["check-load", str(run), "--calibration", str(CAL), "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "| chat T=0 ngram N=4 | 1.30 / 1.30 |" in result.output
    doc = json.loads(out.read_text())
    assert doc[0]["levels"] == [1, 8] and doc[0]["predicted"][0] == pytest.approx(1.3)
    assert doc[0]["predicted"][1] != pytest.approx(1.3)  # the curve moved the gain with concurrency


def test_bad_input_is_one_line_each_and_exit_2(tmp_path: Path) -> None:
    flat = _run(tmp_path / "flat", [_entry("chat", "ngram", [(1, 1.1)])])
    empty = tmp_path / "empty"
    empty.mkdir()
    cases = {
        (str(flat),): "--calibration: required",
        (str(empty), "--calibration", str(CAL)): "no summary.json",
        (str(flat), "--calibration", str(CAL)): "load: no load curve of two or more concurrencies",
        (str(flat), "--calibration", str(tmp_path / "nope.json")): "calibration file not found",
        (str(flat), "--calibration", str(CAL), "--engine", "nope"): "--engine: unknown engine 'nope'",
        (str(flat), str(flat), "--against", str(flat)): "--against compares one run with one other",
        (str(flat), "--against", str(flat), "--json", str(tmp_path / "x.md")): "--json: the checks are written as JSON",
    }
    for args, message in cases.items():
        result = runner.invoke(app, ["check-load", *args])
        assert result.exit_code == 2, (args, result.output)
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], (args, result.output)

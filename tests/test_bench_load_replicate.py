"""bench/load/replicate.py: one measured load curve scored as a prediction of a repeat of itself,
the way bench/load/measured.py scores the load curve (anchored at the smallest level)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.load.replicate import check, compare, curves, main


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


def test_main_prints_both_directions_and_writes_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _run(tmp_path / "a", [_entry("chat", "ngram", [(1, 1.1), (4, 0.9), (16, 0.7)])])
    b = _run(tmp_path / "b", [_entry("chat", "ngram", [(1, 1.2), (4, 1.0), (16, 0.8)])])
    out = tmp_path / "rep.json"
    assert main(["--run", str(a), "--run", str(b), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "## A from B" in text and "## B from A" in text and "crossovers within 1 grid step: 1/1" in text
    doc = json.loads(out.read_text())
    assert set(doc) == {"A from B", "B from A"} and doc["A from B"][0]["crossover_ok"] is True

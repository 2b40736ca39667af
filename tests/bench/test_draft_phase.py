"""bench/load/draft_phase: the draft phase per batched step, read from a profile's records."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from bench.load.draft_phase import draft_per_step, growth_per_sequence, main
from picker.profiler.records import CellKey, Record


def _rec(strategy: str, c: int, draft_s: float, steps: int, t: float = 1.0) -> str:
    cell = CellKey("chat", strategy, t, 0 if strategy == "plain" else 4, concurrency=c)
    return Record(cell=cell, prompt_ids=("chat-0",), tokens=32, forwards=steps + 1, steps=steps, draft_s=draft_s,
                  verify_s=0.1).to_json()


def test_cells_pool_their_records_and_the_growth_is_per_added_sequence(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    rows = [_rec("medusa", 1, 0.02, 10), _rec("medusa", 1, 0.04, 10),  # 3 ms per step
            _rec("medusa", 4, 0.30, 20), _rec("medusa", 4, 0.30, 20),  # 15 ms per step
            _rec("plain", 1, 0.0, 10)]
    stop = {"v": 1, "event": "stop", "cell": asdict(CellKey("chat", "medusa", 1.0, 4, concurrency=4)), "reason": "x"}
    (tmp_path / "records.jsonl").write_text("".join(r + "\n" for r in rows) + json.dumps(stop) + "\n")
    per = draft_per_step(tmp_path)
    assert per[(1.0, "medusa")] == pytest.approx({1: 0.003, 4: 0.015})
    assert growth_per_sequence(per[(1.0, "medusa")]) == pytest.approx(0.004)
    assert growth_per_sequence({1: 0.003}) is None
    assert main(["--run", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| 1 | medusa | C=1: 3.00, C=4: 15.00 | 4000 us |" in out and "plain" not in out

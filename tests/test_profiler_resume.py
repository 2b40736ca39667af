"""A run killed with SIGKILL or stopped with Ctrl-C resumes without losing or repeating a generation.

The profiler runs as a real subprocess (``specpick profile``) against the SGLang double on
loopback; the test kills it mid-run, checks what is on disk, and resumes it.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.test_profiler_sglang_double import SGLangDouble

ARGS = ["--backend", "sglang", "--tasks", "math,structured", "--temperatures", "0,1", "--limit-per-task", "10",
        "--max-new-tokens", "24", "--no-early-stop", "--concurrency", "2", "--quiet", "--no-plot",
        "--retries", "0"]
EXPECTED = 2 * 2 * 10  # tasks x temperatures x prompts, one strategy


def _start(url: str, out: Path, *extra: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-c", "from picker.cli.main import app; app()", "profile", "--url", url,
           "--out", str(out), *ARGS, *extra]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=Path(__file__).resolve().parents[1])


def _lines(out: Path) -> list[str]:
    path = out / "records.jsonl"
    return path.read_text().splitlines(keepends=True) if path.exists() else []


def _records(out: Path) -> list[dict]:
    return [json.loads(line) for line in _lines(out) if line.endswith("\n") and '"event"' not in line]


def _wait_for(out: Path, count: int, proc: subprocess.Popen[str], limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while len(_records(out)) < count:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the run made no progress"
        time.sleep(0.02)


def _keys(records: list[dict]) -> list[tuple]:
    return [(json.dumps(r["cell"], sort_keys=True), tuple(r["prompt_ids"])) for r in records]


def test_sigkill_then_resume_loses_and_repeats_nothing(tmp_path: Path) -> None:
    with SGLangDouble(rates=[0.8, 0.5], steps=2, delay=0.05) as server:
        proc = _start(server.url, tmp_path)
        _wait_for(tmp_path, 8, proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        before = _lines(tmp_path)
        done = _records(tmp_path)
        assert 8 <= len(done) < EXPECTED
        # A kill can land mid-write: make sure the last line is torn, the worst case.
        with (tmp_path / "records.jsonl").open("a") as fh:
            fh.write('{"v":1,"cell":{"task":"ma')
        resumed = _start(server.url, tmp_path, "--resume")
        _, err = resumed.communicate(timeout=120)
        assert resumed.returncode == 0, err
    assert "torn last record" in err and "measured again" in err
    after = _lines(tmp_path)
    assert after[: len(before)] == before  # every completed record kept, byte for byte
    keys = _keys(_records(tmp_path))
    assert len(keys) == len(set(keys)) == EXPECTED
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["run"]["status"] == "complete" and summary["totals"]["records"] == EXPECTED
    assert sum(c["samples"] for c in summary["cells"]) == EXPECTED
    # No recorded field is lost: records from before the kill keep their per-token timings and
    # rounds, and the summary's latency figures are those of the records on disk.
    from picker.profiler.records import read_records
    from picker.profiler.summary import build_summary

    records, stops, _, _ = read_records(tmp_path / "records.jsonl")
    assert all(r.timings and sum(t.tokens for t in r.timings) == r.tokens and "round" in r.extra for r in records)
    again = build_summary(records, stops, summary["run"])
    for mine, theirs in zip(summary["cells"], again["cells"]):
        assert {k: v for k, v in mine.items() if "_ms_" in k} == {k: v for k, v in theirs.items() if "_ms_" in k}
        assert mine["itl_ms_p99"] > 0


def test_ctrl_c_leaves_a_consistent_summary(tmp_path: Path) -> None:
    with SGLangDouble(rates=[0.6], steps=1, delay=0.05) as server:
        proc = _start(server.url, tmp_path)
        _wait_for(tmp_path, 5, proc)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        assert "interrupted" in err and "--resume" in err
        summary = json.loads((tmp_path / "summary.json").read_text())
        records = _records(tmp_path)
        assert summary["run"]["status"] == "interrupted"
        assert summary["totals"]["records"] == len(records) < EXPECTED
        assert sum(c["samples"] for c in summary["cells"]) == len(records)
        resumed = _start(server.url, tmp_path, "--resume")
        _, err = resumed.communicate(timeout=120)
        assert resumed.returncode == 0, err
    keys = _keys(_records(tmp_path))
    assert len(keys) == len(set(keys)) == EXPECTED


def test_resume_refuses_changed_settings(tmp_path: Path) -> None:
    with SGLangDouble(rates=[0.6], steps=1) as server:
        first = _start(server.url, tmp_path, "--limit-per-task", "2")
        assert first.wait(timeout=120) == 0
        changed = _start(server.url, tmp_path, "--resume", "--max-new-tokens", "50")
        _, err = changed.communicate(timeout=60)
        again = _start(server.url, tmp_path)
        _, err2 = again.communicate(timeout=60)
    assert changed.returncode == 2 and "run.json: max_new_tokens: differs" in err
    assert again.returncode == 2 and "pass --resume" in err2

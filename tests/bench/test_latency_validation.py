"""bench/load/latency_validation.py: the prediction reads plain decoding and the other cells only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.load.latency_validation import main, rows, table


def _summary(path: Path) -> Path:
    plain = {"task": "code", "temperature": 0.0, "concurrency": 1, "itl_ms_p50": 10.0, "itl_ms_mean": 12.0,
             "itl_ms_p99": 20.0, "ttft_ms_p50": 30.0}
    cell = {"task": "code", "temperature": 0.0, "strategy": "ngram", "num_draft_tokens": 4, "concurrency": 1,
            "tau": 3.0, "requests": 8, "itl_ms_p50": 15.0, "itl_ms_mean": 18.0, "tpot_ms_mean": 6.0,
            "itl_ms_p99": 18.0}
    other = {**cell, "task": "chat", "itl_ms_p50": 14.0, "itl_ms_mean": 16.8, "tau": 2.0}
    data = {"run": {"max_new_tokens": 48}, "baselines": [plain, {**plain, "task": "chat"}], "cells": [cell, other]}
    out = path / "summary.json"
    out.write_text(json.dumps(data))
    return out


def test_engine_ratio_is_the_other_cells_and_tpot_divides_the_step(tmp_path: Path) -> None:
    got = table(rows(_summary(tmp_path), "vllm-cpu"))
    assert [r["how"] for r in got] == ["engine", "engine"]  # no load curve describes a live CPU engine
    code = next(r for r in got if r["task"] == "code")
    assert code["R"] == pytest.approx(1.4)  # chat's measured mean gap 16.8 / 12, never code's own 1.5
    assert code["pred_tpot_ms"] == pytest.approx(12.0 * 1.4 / 3.0)  # plain's mean gap x R / E[L]
    assert code["pred_itl_p99_ms"] == pytest.approx(14.0)  # one step at batch 1: no other prefills
    assert code["pred_itl_p99_jitter_ms"] == pytest.approx(24.0)  # plus plain's own p99 - p50


def test_zoo_cells_are_also_priced_on_the_reference_loop_curve(tmp_path: Path, capsys) -> None:
    assert main(["--zoo", str(_summary(tmp_path))]) == 0
    printed = capsys.readouterr().out
    assert "| zoo | code T=0 ngram N=4 | 1 | 3.00 | model |" in printed
    assert "zoo       R=model  n=  2" in printed


def test_a_bursty_stream_steps_by_its_mean_gap(tmp_path: Path) -> None:
    data = json.loads(_summary(tmp_path).read_text())
    data["baselines"][0]["itl_ms_p50"] = 0.05  # chunks flushed together: the median gap is no step
    (tmp_path / "summary.json").write_text(json.dumps(data))
    code = next(r for r in table(rows(tmp_path / "summary.json", "vllm-cpu")) if r["task"] == "code")
    assert code["plain_step_ms"] == 12.0 and code["pred_itl_p99_ms"] == pytest.approx(12.0 * 1.4)

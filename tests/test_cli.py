"""The `specpick` CLI end to end: every shipped profile in every format, the JSON contract, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from picker.cli.main import app
from picker.engine.plugins import load_strategies
from tests.bad_inputs import CASES, materialize

ROOT = Path(__file__).resolve().parents[1]
PROFILES = sorted((ROOT / "profiles").glob("*.yaml"))
runner = CliRunner()

CONTRACT = {
    "decision": ["strategy", "num_speculative_tokens", "tree", "temperature_switch", "batch_schedule"],
    "predicted_speedup": ["mean", "low", "high"],
}


def test_at_least_six_profiles_ship() -> None:
    assert len(PROFILES) >= 6


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.stem)
@pytest.mark.parametrize("fmt", ["md", "json", "yaml"])
def test_recommend_every_profile_every_format(profile: Path, fmt: str) -> None:
    result = runner.invoke(app, ["recommend", str(profile), "--format", fmt])
    assert result.exit_code == 0, result.output
    if fmt == "json":
        json.loads(result.stdout)
    elif fmt == "yaml":
        assert isinstance(yaml.safe_load(result.stdout), dict)
    else:
        assert result.stdout.startswith("# Speculative decoding plan")
        # A plan that enables speculation rolls it out; an "off" plan says what would change it instead.
        off = "## Decision: leave speculative decoding off" in result.stdout
        assert ("## Rollout" in result.stdout) != off and ("### What would change it" in result.stdout) == off


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.stem)
def test_json_carries_the_contract(profile: Path) -> None:
    rec = json.loads(runner.invoke(app, ["recommend", str(profile), "--format", "json"]).stdout)
    for section, keys in CONTRACT.items():
        for key in keys:
            assert key in rec[section], (section, key)
    d = rec["decision"]
    assert d["strategy"] in {*load_strategies(), "none"}
    assert set(d["temperature_switch"]) >= {"above", "action"}
    for r in d["batch_schedule"]:
        assert set(r) >= {"min_batch", "max_batch", "num_speculative_tokens"}
    # The schedule covers batch 1 upward without gaps.
    sched = d["batch_schedule"]
    assert sched[0]["min_batch"] == 1 and sched[-1]["max_batch"] is None
    for a, b in zip(sched, sched[1:]):
        assert b["min_batch"] == a["max_batch"] + 1
    ps = rec["predicted_speedup"]
    assert ps["low"] <= ps["mean"] <= ps["high"]
    assert 0.0 <= rec["break_even_alpha"] <= 1.0
    for row in rec["per_task"]:
        assert set(row) >= {"task", "strategy", "alpha", "predicted_speedup"}
    assert rec["alternatives"]
    if d["strategy"] != "none":
        cfg = rec["engine_configs"]
        assert set(cfg) == {"sglang", "vllm", "tensorrt_llm", "llama_cpp"}
        if cfg["sglang"]["supported"]:
            assert all(isinstance(tok, str) for tok in cfg["sglang"]["args"])
        if cfg["vllm"]["supported"]:
            assert isinstance(cfg["vllm"]["speculative_config"], dict)
    steps = rec["rollout"]
    assert [s["step"] for s in steps] == list(range(1, len(steps) + 1))
    assert all(s["gate"] for s in steps)
    assert rec["evidence"]["source"] in {"measured", "prior", "mixed"}
    assert rec["evidence"]["citations"]


def test_out_writes_file(tmp_path: Path) -> None:
    out = tmp_path / "rec.json"
    result = runner.invoke(app, ["recommend", str(PROFILES[0]), "--format", "json", "--out", str(out)])
    assert result.exit_code == 0 and result.stdout == ""
    assert json.loads(out.read_text())["decision"]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_bad_profile_exits_2_with_one_line(case, tmp_path: Path) -> None:
    path = materialize(case, tmp_path)
    out = tmp_path / "out" / "rec.md"
    out.parent.mkdir()
    result = runner.invoke(app, ["recommend", str(path), "--out", str(out)])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    for text in case.expect:
        assert text in lines[0], (text, lines[0])
    assert not any(out.parent.iterdir()), "nothing may be written on bad input"


def test_bad_measurements_file(tmp_path: Path) -> None:
    bad = tmp_path / "summary.json"
    bad.write_text('{"cells": [{"task": "code"}]}')
    result = runner.invoke(app, ["recommend", str(PROFILES[0]), "--measurements", str(bad)])
    assert result.exit_code == 2
    assert "summary.json" in result.stderr and "cells.0.strategy" in result.stderr


def test_bad_out_directory(tmp_path: Path) -> None:
    result = runner.invoke(app, ["recommend", str(PROFILES[0]), "--out", str(tmp_path / "missing" / "x.md")])
    assert result.exit_code == 2 and "parent directory does not exist" in result.stderr


TASKS = ("chat", "code", "structured", "math", "summarization", "rag", "translation", "creative")


def _cells(strategy: str, alpha: float) -> list[dict]:
    return [{"task": t, "strategy": strategy, "temperature": temp, "alpha": alpha,
             "alpha_ci": [alpha - 0.02, alpha + 0.02], "samples": 500}
            for t in TASKS for temp in (0.0, 0.2, 0.7, 1.0)]


def _recommend_json(profile: Path, *extra: str) -> dict:
    result = runner.invoke(app, ["recommend", str(profile), "--format", "json", *extra])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_measured_collapse_moves_the_decision(tmp_path: Path) -> None:
    profile = ROOT / "profiles" / "code-assistant-8b-a100.yaml"
    strategy = _recommend_json(profile)["decision"]["strategy"]
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"cells": _cells(strategy, 0.05)}))
    rec = _recommend_json(profile, "--measurements", str(summary))
    assert rec["decision"]["strategy"] != strategy


def test_measurements_everywhere_make_the_evidence_measured(tmp_path: Path) -> None:
    profile = ROOT / "profiles" / "code-assistant-8b-a100.yaml"
    cells = [c for s in ("vanilla", "medusa", "eagle3", "lookahead", "ngram") for c in _cells(s, 0.6)]
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"cells": cells}))
    rec = _recommend_json(profile, "--measurements", str(summary))
    assert rec["evidence"]["source"] == "measured"
    assert {row["evidence"] for row in rec["per_task"]} == {"measured"}
    assert all(row["alpha"] == 0.6 for row in rec["per_task"])


def test_partial_measurements_are_mixed(tmp_path: Path) -> None:
    profile = ROOT / "profiles" / "code-assistant-8b-a100.yaml"
    strategy = _recommend_json(profile)["decision"]["strategy"]
    cells = [c for c in _cells(strategy, 0.8) if c["task"] == "code"]
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"cells": cells}))
    rec = _recommend_json(profile, "--measurements", str(summary))
    assert rec["evidence"]["source"] == "mixed"


def test_schema_prints_json_schema() -> None:
    result = runner.invoke(app, ["schema"])
    schema = json.loads(result.stdout)
    assert schema["additionalProperties"] is False
    assert {"model", "hardware", "engine", "traffic"} <= set(schema["properties"])


def test_estimate_json_fields() -> None:
    result = runner.invoke(app, ["estimate", "--strategy", "vanilla", "--alpha", "0.7", "--num-draft-tokens", "4",
                                 "--draft-params", "1e9", "--model-params", "70e9", "--hardware", "h100-sxm",
                                 "--num-devices", "2", "--format", "json"])  # 140 GB of bf16 weights: two 80 GB cards
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    for key in ("expected_tokens_per_verify", "cost_ratio", "speedup", "break_even_alpha", "breakdown"):
        assert key in data
    assert {"verify_seconds", "draft_seconds"} <= set(data["breakdown"])


@pytest.mark.parametrize("args, needle", [
    (["--strategy", "ngram", "--model-params", "8e9", "--hardware", "h100-sxm"], "--alpha"),
    (["--strategy", "ngram", "--alpha", "0.5", "--model-params", "8e9", "--hardware", "tpu"], "hardware"),
    (["--strategy", "ngram", "--mean-accepted-tokens", "3", "--model-params", "8e9", "--hardware", "h100-sxm"],
     "--num-draft-tokens"),
    (["--strategy", "ngram", "--alpha", "0.5", "--tree-topk", "4", "--model-params", "8e9", "--hardware", "h100"],
     "--tree-topk"),
])
def test_estimate_bad_input(args: list[str], needle: str) -> None:
    result = runner.invoke(app, ["estimate", *args])
    assert result.exit_code == 2
    assert needle in result.stderr and "Traceback" not in result.output


def test_strategies_lists_all_builtins() -> None:
    data = json.loads(runner.invoke(app, ["strategies", "--format", "json"]).stdout)
    assert {p["name"] for p in data} >= {"vanilla", "medusa", "eagle3", "lookahead", "ngram"}


def test_console_script_runs_in_a_fresh_process() -> None:
    exe = Path(sys.executable).with_name("specpick")
    proc = subprocess.run([str(exe), "recommend", str(PROFILES[0]), "--format", "json"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["decision"]["strategy"]

"""`specpick recommend --explain / --plot / --policy`, and the measured-evidence path of the scorer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from picker.cli.main import app
from policies.artifacts import save_policy
from policies.encoding import FEATURES
from policies.estimator import SpeedupEstimator

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "profiles" / "code-assistant-8b-a100.yaml"
runner = CliRunner()


def _run(*args: str) -> str:
    result = runner.invoke(app, ["recommend", str(PROFILE), *args])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_explain_lists_each_task_with_ranges_and_evidence() -> None:
    data = json.loads(_run("--explain", "--format", "json"))
    rows = data["explain"]["per_task"]
    assert {r["task"] for r in rows} == {"code", "chat", "structured", "math"}
    for row in rows:
        strategies = [c["strategy"] for c in row["candidates"]]
        assert len(strategies) == len(set(strategies)) >= 2          # one row per strategy
        means = [c["predicted_speedup"]["mean"] for c in row["candidates"]]
        assert means == sorted(means, reverse=True)
        for c in row["candidates"]:
            p, e = c["predicted_speedup"], c["evidence"]
            assert p["low"] <= p["mean"] <= p["high"]
            assert e["source"] in ("measured", "prior") and e["cost"]["source"] in ("measured", "roofline")
    md = _run("--explain")
    assert "## Explain" in md and "### code" in md


def test_plot_is_written(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "explain.png"
    _run("--plot", str(out))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _artifact(tmp_path: Path, domain: dict) -> Path:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, len(FEATURES)))
    y = np.exp(X[:, 0]) * 0.8
    path = tmp_path / "policy.json"
    save_policy(path, SpeedupEstimator(correction="constant"), X, y, None, {"domain": domain})
    return path


def test_policy_applies_only_inside_its_domain(tmp_path: Path) -> None:
    inside = _artifact(tmp_path, {"hardware": ["a100-80gb"], "engines": ["vllm"], "params": [8e9, 8.1e9]})
    data = json.loads(_run("--policy", str(inside), "--explain", "--format", "json"))
    assert "applied" in data["explain"]["notes"][0] and "NOT" not in data["explain"]["notes"][0]
    corr = {c["evidence"]["learned_correction"] for r in data["explain"]["per_task"] for c in r["candidates"]}
    assert corr == {0.8}                                  # the constant shift learned from the rows
    plain = json.loads(_run("--format", "json"))
    assert data["predicted_speedup"]["mean"] < plain["predicted_speedup"]["mean"]
    outside = _artifact(tmp_path, {"hardware": ["cpu"], "engines": ["tensorrt_llm"], "params": [1e6, 2e6]})
    data = json.loads(_run("--policy", str(outside), "--format", "json"))
    assert "NOT applied" in data["explain"]["notes"][0]
    assert data["predicted_speedup"] == plain["predicted_speedup"]


def test_bad_policy_file_is_a_user_error(tmp_path: Path) -> None:
    bad = tmp_path / "p.json"
    bad.write_text('{"schema": "nope"}')
    result = runner.invoke(app, ["recommend", str(PROFILE), "--policy", str(bad)])
    assert result.exit_code == 2 and "policy artifact" in result.output


def test_measured_cells_feed_per_position_and_costs(tmp_path: Path) -> None:
    cell = {"task": "code", "strategy": "ngram", "temperature": 0.0, "num_draft_tokens": 4, "tree": None,
            "alpha": 0.5, "alpha_ci": [0.45, 0.55], "alpha_iid": 0.7, "alpha_iid_ci": [0.65, 0.75],
            "per_position": [0.9, 0.7, 0.6, 0.5], "samples": 20, "draft_tokens": 400, "draft_steps": 100,
            "decode_steps": 120, "draft_s_per_token": 1e-5, "verify_s_per_step": 0.012,
            "v_vs_plain_forward": 1.1, "tokens": 600, "seconds": 2.0}
    meas = tmp_path / "summary.json"
    meas.write_text(json.dumps({"cells": [cell], "run": {"backend": "vllm"}}))
    data = json.loads(_run("--measurements", str(meas), "--explain", "--format", "json"))
    code = next(r for r in data["explain"]["per_task"] if r["task"] == "code")
    ngram = next(c for c in code["candidates"] if c["strategy"] == "ngram")
    assert ngram["evidence"]["source"] == "measured" and ngram["evidence"]["per_position"][0] == 0.9
    assert ngram["evidence"]["alpha"] == 0.7                     # alpha_iid, the theory's alpha
    assert ngram["evidence"]["cost"]["source"] == "measured"    # measured on the profile's own engine


def test_default_recommend_path_stays_free_of_numpy_and_sklearn() -> None:
    code = ("import sys; from typer.testing import CliRunner; from picker.cli.main import app; "
            f"r = CliRunner().invoke(app, ['recommend', {str(PROFILE)!r}, '--format', 'json']); "
            "assert r.exit_code == 0, r.output; "
            "print(sorted(m for m in ('numpy', 'sklearn') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def test_plain_recommend_reads_the_verify_curve_beside_the_measurements(tmp_path: Path) -> None:
    """The sweep's verify curve shapes the measured costs for plain ``recommend`` as for
    ``--explain``: the same measurements with a steep curve beside them give another plan."""
    cell = {"task": "code", "strategy": "ngram", "temperature": 0.0, "num_draft_tokens": 2, "tree": None,
            "alpha": 0.9, "alpha_ci": [0.85, 0.95], "alpha_iid": 0.9, "alpha_iid_ci": [0.85, 0.95],
            "per_position": [0.9, 0.9], "samples": 20, "draft_tokens": 400, "draft_steps": 200,
            "decode_steps": 200, "draft_s_per_token": 1e-5, "verify_s_per_step": 0.012,
            "v_vs_plain_forward": 1.05, "tokens": 600, "seconds": 2.0}
    meas = tmp_path / "summary.json"
    meas.write_text(json.dumps({"cells": [cell], "run": {"backend": "vllm"}}))
    flat = json.loads(_run("--measurements", str(meas), "--format", "json"))
    steep = [{"tokens": m, "context": 512, "seconds": 0.01 * m ** 1.5} for m in (1, 2, 3, 4, 8, 16)]
    (tmp_path / "verify_curve.jsonl").write_text("".join(json.dumps(p) + "\n" for p in steep))
    curved = json.loads(_run("--measurements", str(meas), "--format", "json"))
    explained = json.loads(_run("--measurements", str(meas), "--explain", "--format", "json"))

    def ngram(plan: dict) -> list:
        return [(a["num_speculative_tokens"], a["predicted_speedup"]) for a in plan["alternatives"]
                if a["strategy"] == "ngram"]

    assert ngram(flat) and ngram(curved) != ngram(flat)  # the measured strategy is priced on the curve
    assert ngram(curved) == ngram(explained) and curved["predicted_speedup"] == explained["predicted_speedup"]

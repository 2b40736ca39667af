"""``--calibration FILE`` on ``specpick estimate`` and ``specpick recommend``: the file's constants
replace the engine curve's (``policies.calibration_for``), the output says so, and a bad file is one
``error:`` line naming it, exit code 2.

The files are the ones tests/test_calibration.py fits to synthetic forwards on an H100 (the format
``specpick calibrate`` writes: engine ``hf``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from picker.cli.main import app
from tests.test_calibration import TRUTH, _file, synthetic

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()
ESTIMATE = ["estimate", "--strategy", "eagle3", "--alpha", "0.7", "--num-draft-tokens", "3",
            "--model-params", "8.03e9", "--hardware", "h100-sxm", "--batch-size", "64", "--format", "json"]
H100_PROFILE = ROOT / "profiles" / "chat-70b-h100.yaml"  # sglang on h100-sxm


@pytest.fixture(scope="module")
def cal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cal") / "cal.json"
    path.write_text(json.dumps(_file(synthetic(TRUTH, (1, 4, 16, 64, 256)))))
    return path


def _json(*args: str) -> dict[str, Any]:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def _calibrated(out: dict[str, Any]) -> dict[str, float]:
    return {k: v["value"] for k, v in out["curve_constants"].items() if v["from"].startswith("calibrated")}


def test_estimate_on_the_measured_engine_takes_every_constant(cal: Path) -> None:
    before = _json(*ESTIMATE, "--engine", "hf")
    after = _json(*ESTIMATE, "--engine", "hf", "--calibration", str(cal))
    assert before["calibration"] is None and not _calibrated(before)
    got = _calibrated(after)
    # the per-layer latencies are in the fitted fixed time: 0 on the engine that was timed
    assert set(got) == {"bw_efficiency", "gemm_efficiency", "fixed_s", "launch_s_per_layer", "layer_latency_s",
                        "verify_layer_s"}
    assert got["layer_latency_s"] == got["verify_layer_s"] == 0.0
    assert got["bw_efficiency"] == pytest.approx(TRUTH["bw_efficiency"], rel=1e-3)
    assert after["speedup"] != before["speedup"] and after["break_even_alpha"] != before["break_even_alpha"]
    assert str(cal) in after["calibration"] and "calibrated" in after["engine_status"]
    assert all(str(cal) in after["curve_constants"][k]["from"] for k in got)


def test_estimate_on_another_engine_takes_the_accelerator_efficiencies_only(cal: Path) -> None:
    """Eager PyTorch's fixed and launch costs say nothing about vLLM's CUDA graphs; its bandwidth
    and GEMM efficiencies on the same GPU do."""
    before = _json(*ESTIMATE, "--engine", "vllm")
    after = _json(*ESTIMATE, "--engine", "vllm", "--calibration", str(cal))
    assert set(_calibrated(after)) == {"bw_efficiency", "gemm_efficiency"}
    assert after["curve_constants"]["fixed_s"] == before["curve_constants"]["fixed_s"]
    assert "hardware efficiencies only" in after["calibration"] and after["speedup"] != before["speedup"]
    md = runner.invoke(app, [*ESTIMATE[:-2], "--engine", "vllm", "--calibration", str(cal)])
    assert md.exit_code == 0 and "calibrated" in md.output


def _bad(tmp_path: Path, name: str) -> Path:
    good = _file(synthetic(TRUTH, (1, 64)))
    path = tmp_path / f"{name}.json"
    text = {"truncated": "{\"engine\": ",
            "field": json.dumps({**good, "constants": {**good["constants"], "fixed_s": -1}}),
            "a100": json.dumps({**good, "hardware": {**good["hardware"], "name": "a100-80gb"}})}[name]
    path.write_text(text)
    return path


@pytest.mark.parametrize("name, says", [
    ("missing", "calibration file not found"),
    ("truncated", "not valid JSON"),
    ("field", "constants.fixed_s"),
    ("a100", "hardware.name: calibrated on a100-80gb"),
])
@pytest.mark.parametrize("command", ["estimate", "recommend"])
def test_a_bad_file_is_one_line_naming_it(tmp_path: Path, command: str, name: str, says: str) -> None:
    path = tmp_path / "absent.json" if name == "missing" else _bad(tmp_path, name)
    args = [*ESTIMATE, "--engine", "hf"] if command == "estimate" else ["recommend", str(H100_PROFILE)]
    result = runner.invoke(app, [*args, "--calibration", str(path)])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and str(path) in lines[0] and says in lines[0]
    assert "Traceback" not in result.output


def test_recommend_prices_the_plan_on_the_calibrated_curve_and_says_so(cal: Path) -> None:
    before = _json("recommend", str(H100_PROFILE), "--format", "json")
    after = _json("recommend", str(H100_PROFILE), "--calibration", str(cal), "--format", "json")
    assert before["evidence"]["calibration"] is None and after["evidence"]["calibration"] == str(cal)
    def numbers(rec: dict[str, Any]) -> tuple[Any, ...]:
        return [r["predicted_speedup"] for r in rec["decision"]["batch_schedule"]], rec["predicted_speedup"], \
            rec["break_even_alpha"]

    assert numbers(after) != numbers(before)
    assert any(str(cal) in n and "hardware efficiencies only" in n for n in after["evidence"]["notes"])
    assert any("calibrated from" in r for r in after["rationale"])
    assert not any("calibrated" in r for r in before["rationale"])
    md = runner.invoke(app, ["recommend", str(H100_PROFILE), "--calibration", str(cal)]).output
    assert f"calibrated from {cal}" in md
    explained = _json("recommend", str(H100_PROFILE), "--calibration", str(cal), "--explain", "--format", "json")
    assert any(str(cal) in n for n in explained["explain"]["notes"])
    costs = [c["evidence"]["cost"] for t in explained["explain"]["per_task"] for c in t["candidates"]]
    assert costs and all(c.get("calibration") == str(cal) for c in costs if c["source"] == "roofline")

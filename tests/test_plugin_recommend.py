"""The third-party test plugin (``repeat-last``, pip-installed from tests/plugin_pkg) is recommended,
explained, estimated and disabled from a profile exactly like a built-in strategy."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from picker.cli.main import app
from tests.conformance.third_party import PLUGIN_NAME, discoverable

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def _profile(tmp_path: Path, vllm: str | None = None, **drafters: Any) -> Path:
    """offline-batch (vLLM) narrowed to code at T=0, so one measured cell covers the whole workload."""
    data = yaml.safe_load((ROOT / "profiles" / "offline-batch.yaml").read_text())
    if vllm is not None:
        data["engine"]["version"] = vllm
    data["traffic"]["task_mix"] = {"code": 1.0}
    data["traffic"]["temperature"] = [{"value": 0.0, "weight": 1.0}]
    data["drafters"] = {"training_budget_gpu_hours": 0, **drafters}
    out = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}.yaml"
    out.write_text(yaml.safe_dump(data))
    return out


def _measured(tmp_path: Path, alpha: float = 0.9) -> Path:
    """A hand-written summary: the plugin measured on code at T=0 (what `specpick profile` would give)."""
    cell = {"task": "code", "strategy": PLUGIN_NAME, "temperature": 0.0, "alpha": alpha,
            "alpha_ci": [alpha - 0.05, alpha + 0.05], "samples": 400, "num_draft_tokens": 4}
    out = tmp_path / "summary.json"
    out.write_text(json.dumps({"cells": [cell]}))
    return out


def _recommend(*args: str) -> dict[str, Any]:
    result = runner.invoke(app, ["recommend", *args, "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _explained(data: dict[str, Any]) -> set[str]:
    return {c["strategy"] for row in data["explain"]["per_task"] for c in row["candidates"]}


def test_plugin_is_recommended_and_explained_from_its_measurements(tmp_path: Path) -> None:
    with discoverable():
        data = _recommend(str(_profile(tmp_path, vllm="0.32.0")), "--measurements", str(_measured(tmp_path)),
                          "--explain")
        old = _recommend(str(_profile(tmp_path)), "--measurements", str(_measured(tmp_path)))
    assert PLUGIN_NAME in _explained(data)
    row = next(c for r in data["explain"]["per_task"] for c in r["candidates"] if c["strategy"] == PLUGIN_NAME)
    assert row["evidence"]["source"] == "measured" and row["evidence"]["alpha"] == pytest.approx(0.9)
    # α = 0.9 on a host-side lookup beats every prior-scored built-in here: it is deployed, with its engine config.
    assert data["decision"]["strategy"] == PLUGIN_NAME
    # Its engine configs come from its own hooks (tests/plugin_pkg/specpicker_testplugin/engines.py).
    vllm = data["engine_configs"]["vllm"]
    assert vllm["speculative_config"]["method"] == "custom_class"
    assert vllm["speculative_config"]["model"] == "specpicker_testplugin.vllm_proposer.RepeatLastProposer"
    assert vllm["version"] == "0.32.0" and vllm["valid_for"] in (">=0.22.0,<0.33.0", ">=0.24.0,<0.33.0")
    # The profile's own vLLM 0.17.0 cannot load it: never enabled there, and its row says why.
    assert old["decision"]["strategy"] != PLUGIN_NAME
    mine = [c for c in old["alternatives"] if c["strategy"] == PLUGIN_NAME]
    assert mine and all(not c["engine_supported"] and any("custom_class arrived in 0.22.0" in n for n in c["notes"])
                        for c in mine)
    sglang = data["engine_configs"]["sglang"]
    assert sglang["args"][:2] == ["--speculative-algorithm", "NGRAM"] and "approximation" in sglang
    assert data["engine_configs"]["tensorrt_llm"]["supported"] is False


def test_plugin_is_disabled_from_a_profile_like_a_builtin(tmp_path: Path) -> None:
    summary = str(_measured(tmp_path))
    with discoverable():
        # vLLM 0.32.0: a version that can load it (custom_class), so only the profile disables it
        listed = _recommend(str(_profile(tmp_path, "0.32.0", disabled=[PLUGIN_NAME])), "--measurements", summary,
                            "--explain")
        legacy = _recommend(str(_profile(tmp_path, "0.32.0", allow_repeat_last=False)), "--measurements", summary)
        builtin = _recommend(str(_profile(tmp_path, "0.32.0", disabled=[PLUGIN_NAME, "ngram"])), "--measurements",
                             summary)
    assert PLUGIN_NAME not in _explained(listed) and listed["decision"]["strategy"] != PLUGIN_NAME
    off = next(c for c in listed["alternatives"] if c["strategy"] == PLUGIN_NAME)
    assert not off["feasible"] and off["notes"] == ["disabled in the profile (drafters.disabled)"]
    assert legacy["decision"] == listed["decision"]
    assert any("drafters.allow_repeat_last is deprecated" in w for w in legacy["warnings"])
    assert builtin["decision"]["strategy"] not in (PLUGIN_NAME, "ngram")


def test_plugin_without_measurements_or_prior_is_left_out_with_a_warning(tmp_path: Path) -> None:
    with discoverable():
        data = _recommend(str(_profile(tmp_path)))
    assert data["decision"]["strategy"] != PLUGIN_NAME
    assert all(c["strategy"] != PLUGIN_NAME for c in data["alternatives"])
    assert any(w.startswith(f"{PLUGIN_NAME} not scored") for w in data["warnings"])


def test_plugin_is_estimated_and_listed_in_the_estimate_error() -> None:
    # --engine vllm: the test plugin maps onto vLLM only, and estimate refuses an engine that cannot run it.
    base = ["estimate", "--alpha", "0.6", "--model-params", "8e9", "--hardware", "h100-sxm", "--engine", "vllm",
            "--format", "json"]
    with discoverable():
        ok = runner.invoke(app, [*base, "--strategy", PLUGIN_NAME, "--num-draft-tokens", "4"])
        bad = runner.invoke(app, [*base, "--strategy", "repeat-first"])
    assert ok.exit_code == 0, ok.output
    result = json.loads(ok.stdout)
    assert result["strategy"] == PLUGIN_NAME and result["speedup"] > 1.0
    assert bad.exit_code == 2
    line = bad.stderr.strip()
    assert "\n" not in line and line.startswith("error: --strategy: 'repeat-first' is not registered")
    assert PLUGIN_NAME in line and "ngram" in line


def test_a_profile_naming_an_unregistered_strategy_is_one_line_exit_2(tmp_path: Path) -> None:
    path = _profile(tmp_path, disabled=[PLUGIN_NAME])
    result = runner.invoke(app, ["recommend", str(path), "--format", "json"])  # the plugin is not installed here
    assert result.exit_code == 2
    line = result.stderr.strip()
    assert line == (f"error: {path}: drafters.disabled: unknown strategy {PLUGIN_NAME!r}; registered: "
                    "eagle3, lookahead, medusa, mtp, ngram, suffix, vanilla")


def test_the_contract_takes_any_registered_strategy_and_none() -> None:
    from pydantic import ValidationError

    from picker.recommend.contract import TaskRow

    row = {"task": "code", "weight": 1.0, "alpha": 0.5, "alpha_range": (0.4, 0.6), "evidence": "measured",
           "predicted_speedup": {"mean": 1.5, "low": 1.2, "high": 1.8}, "deployed_speedup": 1.5}
    with discoverable():
        assert TaskRow(strategy=PLUGIN_NAME, **row).strategy == PLUGIN_NAME
    assert TaskRow(strategy="none", **row).strategy == "none"
    with pytest.raises(ValidationError, match="registered strategy"):
        TaskRow(strategy=PLUGIN_NAME, **row)  # outside the block it is not installed

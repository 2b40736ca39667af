"""`specpick estimate` answers first and refuses what cannot run; `specpick strategies` fits 80 columns."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from picker.cli.main import app
from picker.engine.plugins import load_strategies
from picker.recommend.options import engine_support, memory_shortfall

runner = CliRunner(env={"COLUMNS": "80"})
EAGLE = ["estimate", "--strategy", "eagle3", "--alpha", "0.8", "--model-params", "8e9", "--hardware", "h100-sxm"]


def test_the_answer_comes_first_and_fits_80_columns() -> None:
    result = runner.invoke(app, EAGLE)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    top = " ".join(lines[:5])
    assert top.startswith("eagle3: 2.") and "x plain decoding (range " in top and "why: a step drafts" in top
    assert len(lines) <= 30 and "load-curve constants" not in result.stdout
    verbose = runner.invoke(app, [*EAGLE, "--verbose"]).stdout
    assert "load-curve constants:" in verbose and "gemm_efficiency" in verbose


def test_a_draft_model_strategy_reads_as_a_draft_model() -> None:
    result = runner.invoke(app, ["estimate", "--strategy", "vanilla", "--alpha", "0.7", "--num-draft-tokens", "4",
                                 "--draft-params", "1e9", "--model-params", "8e9", "--hardware", "h100-sxm"])
    assert result.exit_code == 0 and result.stdout.startswith("draft model (vanilla): ")
    assert "draft model       llama-3.2-1b-like shape" in result.stdout


@pytest.mark.parametrize("strategy, engine, extra, tree", [
    ("eagle3", "llama_cpp", [], False), ("lookahead", "vllm", [], False),
    ("eagle3", "vllm", ["--tree-topk", "4"], True),
])
def test_what_the_engine_cannot_run_is_one_line_with_recommends_reason(strategy: str, engine: str, extra: list[str],
                                                                        tree: bool) -> None:
    result = runner.invoke(app, ["estimate", "--strategy", strategy, "--alpha", "0.7", "--model-params", "8e9",
                                 "--hardware", "h100-sxm", "--engine", engine, *extra])
    assert result.exit_code == 2 and result.stdout == ""
    line, = result.stderr.splitlines()
    reason = engine_support(load_strategies()[strategy].capabilities, engine, tree)
    assert reason and line.startswith(f"error: --engine: {engine} cannot run {strategy}") and reason in line
    assert "engines that can: sglang" in line


def test_a_model_that_does_not_fit_is_one_line() -> None:
    result = runner.invoke(app, ["estimate", "--strategy", "eagle3", "--alpha", "0.7", "--model-params", "70e9",
                                 "--hardware", "rtx-4090"])
    assert result.exit_code == 2
    line, = result.stderr.splitlines()
    assert memory_shortfall(70e9 * 2 / 2**30, 24, "rtx-4090 memory") in line and "bf16 target" in line
    fits = runner.invoke(app, ["estimate", "--strategy", "eagle3", "--alpha", "0.7", "--model-params", "70e9",
                               "--hardware", "rtx-4090", "--num-devices", "8", "--dtype", "int4"])
    assert fits.exit_code == 0, fits.output


def test_the_loop_engine_runs_every_strategy() -> None:
    result = runner.invoke(app, ["estimate", "--strategy", "lookahead", "--alpha", "0.7", "--model-params", "8e9",
                                 "--hardware", "h100-sxm", "--engine", "hf", "--format", "json"])
    assert result.exit_code == 0, result.output


def test_strategies_wrap_at_80_columns_without_losing_words() -> None:
    result = runner.invoke(app, ["strategies"])
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines) and "…" not in result.stdout
    flat = " ".join(result.stdout.split())
    for plugin in load_strategies().values():
        assert " ".join(plugin.summary.split()) in flat
        for engine, algo in plugin.capabilities.engines.items():
            assert (f"{engine} ({algo})" if algo else engine) in flat
    assert "draft model (vanilla): " in flat


def test_estimate_json_states_its_range() -> None:
    import json

    data = json.loads(runner.invoke(app, [*EAGLE, "--format", "json"]).stdout)
    rng = data["speedup_range"]
    assert rng["low"] < data["speedup"] < rng["high"] and "held out" in rng["what"]
    assert "docs/load-curve.md" in rng["what"]

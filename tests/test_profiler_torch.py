"""The torch path: `specpick profile` drives the reference loop on a tiny real Llama.

A draft identical to the target must be accepted everywhere, at any temperature (p = q, so
min(1, q/p) = 1): α = 1, every position 1, τ = N + 1 — an exact check of the loop's per-step
stats and of the profiler's arithmetic together. A random tiny model is used (not the zoo) so
the test costs seconds.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from picker.cli.main import app
from picker.profiler.run import records_of

torch = pytest.importorskip("torch")
runner = CliRunner()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.tiny import tiny_folder

    return tiny_folder(tmp_path_factory.mktemp("tiny"), ["math", "structured"], 40)


def _profile(tiny: Path, out: Path, *args: str) -> dict:
    result = runner.invoke(app, ["profile", "--model", str(tiny), "--artifact", f"vanilla={tiny}", "--out", str(out),
                                 "--tasks", "math,structured", "--max-new-tokens", "12", "--quiet", *args])
    assert result.exit_code == 0, result.output
    return json.loads((out / "summary.json").read_text())


def test_self_draft_accepts_everything_and_counts_add_up(tiny: Path, tmp_path: Path) -> None:
    summary = _profile(tiny, tmp_path, "--strategies", "vanilla,ngram", "--temperatures", "0,1",
                       "--num-draft-tokens", "2,3", "--limit-per-task", "3", "--no-early-stop")
    vanilla = [c for c in summary["cells"] if c["strategy"] == "vanilla"]
    assert len(vanilla) == 2 * 2 * 2  # tasks x temperatures x N
    for c in vanilla:
        n = c["num_draft_tokens"]
        assert (c["alpha"], c["alpha_iid"], c["per_position"], c["tau"]) == (1.0, 1.0, [1.0] * n, n + 1)
        assert c["target_forwards"] == c["decode_steps"] + c["samples"]  # one prefill per generation
        assert c["draft_steps"] == c["decode_steps"]  # a draft model drafts at every step
        assert c["cost_ratio"] is not None and c["speedup_vs_plain"] is not None
    for r in records_of(tmp_path):
        # Each forward emits its accepted drafts plus one token; the last may be cut at max tokens.
        assert r.tokens <= r.accepted + r.forwards and r.steps == r.forwards - 1
        assert r.source == "torch-loop" and r.tokens == 12
        assert r.extra["prompt_tokens"] > 0  # what was prefilled: the load bench prices it
    assert {(b["task"], b["temperature"]) for b in summary["baselines"]} == \
        {(t, temp) for t in ("math", "structured") for temp in (0.0, 1.0)}
    if importlib.util.find_spec("matplotlib") is not None:  # the optional `plot` extra
        assert (tmp_path / "alpha.png").stat().st_size > 1000


def test_sequential_stopping_spends_fewer_forwards(tiny: Path, tmp_path: Path) -> None:
    summary = _profile(tiny, tmp_path, "--strategies", "vanilla,ngram", "--temperatures", "0",
                       "--limit-per-task", "12", "--min-samples", "5", "--no-plot")
    by = {(c["task"], c["strategy"]): c for c in summary["cells"]}
    plain = {b["task"]: b for b in summary["baselines"]}
    for task in ("math", "structured"):
        # A draft that is always right is pinned down by the minimum sample: it stops there.
        assert by[(task, "vanilla")]["stopped"] == "precision" and by[(task, "vanilla")]["samples"] == 5
        # The plain baseline runs exactly as long as some strategy of its group does.
        assert plain[task]["samples"] == max(by[(task, s)]["samples"] for s in ("vanilla", "ngram"))
        assert plain[task]["stopped"] in ("strategies-stopped", "prompts-exhausted")


def test_strategy_without_its_artifact_is_a_user_error(tiny: Path, tmp_path: Path) -> None:
    result = runner.invoke(app, ["profile", "--model", str(tiny), "--strategies", "vanilla", "--out", str(tmp_path),
                                 "--quiet"])
    assert result.exit_code == 2 and "--artifact" in result.stderr and "vanilla" in result.stderr

"""`specpick sweep`: the grid from capabilities, the verify-time curve, the cost statement, resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from picker.cli.main import app
from picker.engine.plugins import Capabilities
from picker.engine.tree_shapes import medusa_choices
from picker.inputs.verify_curve import CurvePoint, ratio_curve, verify_ratio
from picker.profiler.sweep import parse_tree_label, sweep_cost, sweep_grid, tree_label

runner = CliRunner()


def test_grid_branches_on_capabilities_and_depth_caps() -> None:
    caps = {"chainy": Capabilities(needs_draft_model=True), "treey": Capabilities(tree=True, draft_cost="heads")}
    grid = sweep_grid(caps, chain_lengths=(1, 4, 8), trees=((3, 2, 6), (5, 4, 8)), max_depth={"treey": 4})
    labels = [(g.strategy, g.num_draft_tokens, g.tree) for g in grid]
    assert ("chainy", 8, None) in labels and not any(g.tree for g in grid if g.strategy == "chainy")
    assert ("treey", 8, None) not in labels                      # deeper than its 4 heads
    assert ("treey", 5, tree_label(3, 2, 6)) in labels          # nodes = tokens - 1
    assert not any(t and parse_tree_label(t)[0] > 4 for _, _, t in labels)


def test_tree_labels_round_trip_and_reject_junk() -> None:
    assert parse_tree_label(tree_label(4, 2, 8)) == (4, 2, 8)
    with pytest.raises(ValueError):
        parse_tree_label("depth=4")


def test_medusa_choices_form_a_prefix_closed_tree() -> None:
    paths = medusa_choices(depth=3, topk=2, nodes=7)  # the sweep's 3x2x8 tree: 8 tokens incl. the root
    assert len(paths) == 7 and max(len(p) for p in paths) <= 3
    assert all(p[:-1] in paths or len(p) == 1 for p in paths)   # every node's parent is in the tree
    assert all(max(p) < 2 for p in paths)                        # ranks below top-k


def test_verify_ratio_interpolates_and_extrapolates() -> None:
    curve = [CurvePoint(1, 128, 0.010), CurvePoint(4, 128, 0.012), CurvePoint(16, 128, 0.020),
             CurvePoint(1, 384, 0.011), CurvePoint(4, 384, 0.0132), CurvePoint(16, 384, 0.022)]
    assert verify_ratio(curve, 1) == pytest.approx(1.0)
    assert verify_ratio(curve, 4) == pytest.approx(1.2)
    assert 1.2 < verify_ratio(curve, 8) < 2.0
    assert verify_ratio(curve, 32) > verify_ratio(curve, 16)    # beyond the last point: still rising


def test_cost_statement_sums_cells_and_baselines() -> None:
    summary = {"cells": [{"task": "code", "strategy": "ngram", "temperature": 0.0, "num_draft_tokens": 4,
                          "target_forwards": 30, "seconds": 1.5}],
               "baselines": [{"task": "code", "strategy": "plain", "temperature": 0.0, "target_forwards": 90,
                              "seconds": 2.5}]}
    cost = sweep_cost(summary)
    assert cost["target_forwards"] == 120 and cost["seconds"] == pytest.approx(4.0) and cost["cells"] == 2


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random tiny Llama with a byte-level tokenizer, saved as a folder (its own draft too)."""
    pytest.importorskip("torch")
    from tests.tiny import tiny_folder

    return tiny_folder(tmp_path_factory.mktemp("tiny"), ["math"], 20)


def _sweep(tiny: Path, out: Path, *extra: str):
    return runner.invoke(app, ["sweep", "--model", str(tiny), "--artifact", f"vanilla={tiny}", "--out", str(out),
                               "--strategies", "vanilla,ngram", "--tasks", "math", "--temperatures", "0",
                               "--chain-lengths", "1,2", "--prompts-per-task", "2", "--max-new-tokens", "6",
                               "--quiet", *extra])


def test_sweep_measures_every_grid_point_states_its_cost_and_resumes(tiny: Path, tmp_path: Path) -> None:
    result = _sweep(tiny, tmp_path)
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "sweep.json").read_text())
    assert len(data["grid"]) == 4
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert {(c["strategy"], c["num_draft_tokens"]) for c in summary["cells"]} == \
        {("vanilla", 1), ("vanilla", 2), ("ngram", 1), ("ngram", 2)}
    assert all(c["samples"] == 2 for c in summary["cells"])    # no early stopping: every prompt
    assert data["cost"]["target_forwards"] > 0 and data["cost"]["verify_curve"]["forwards"] > 0
    assert "not measured" in data["batch"] and len(data["verify_curve"]) >= 2
    def generations() -> list[str]:  # stop events are re-noted on resume; generations must not repeat
        return [ln for ln in (tmp_path / "records.jsonl").read_text().splitlines() if '"event"' not in ln]

    lines = generations()
    # A second run without --resume refuses; with it, nothing is measured again.
    assert _sweep(tiny, tmp_path).exit_code == 2
    assert _sweep(tiny, tmp_path, "--resume").exit_code == 0
    assert generations() == lines


def test_bad_tree_spec_is_a_user_error(tiny: Path, tmp_path: Path) -> None:
    result = _sweep(tiny, tmp_path, "--trees", "3x1x4")
    assert result.exit_code == 2 and "--trees" in result.output


def test_ratio_curve_is_monotone_and_starts_at_one() -> None:
    # Timing noise made m = 8 look faster than m = 4; pooling removes the dip.
    curve = [CurvePoint(1, 128, 0.010), CurvePoint(4, 128, 0.014), CurvePoint(8, 128, 0.012),
             CurvePoint(16, 128, 0.020)]

    out = ratio_curve(curve)
    assert out[0] == (1.0, 1.0)
    ys = [y for _, y in out]
    assert ys == sorted(ys) and ys[1] == pytest.approx(1.3) and ys[-1] == pytest.approx(2.0)

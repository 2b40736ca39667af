"""``specpick policy``: the learned policy fitted on a real (tiny) sweep (``tests/conftest.py``) and
written as an artifact the recommendation loads; the shipped artifact refits to itself byte for
byte; the sweep data the rows come from (replicates sharpen labels only, the drafter probe informs
costs only, profile runs are read against their own plain baseline)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from picker.cli.main import app
from policies.artifacts import load_policy

runner = CliRunner()
SHIPPED = Path(__file__).resolve().parents[1] / "policies" / "data" / "zoo-ci-policy.json"


def test_fit_writes_an_artifact_the_recommendation_loads(sweep: Path, tmp_path: Path) -> None:
    out = tmp_path / "policy.json"
    regret = tmp_path / "regret.json"
    regret.write_text(json.dumps({"summary": {"loto": {"workloads": 2, "median_rel_error": 0.1}}}))
    result = runner.invoke(app, ["policy", "fit", "--sweep", str(sweep), "--profile-prompts", "2",
                                 "--held-out", str(regret), "--out", str(out)])
    assert result.exit_code == 0, result.output
    policy = load_policy(out)
    card = policy.card
    grid = {(r["cell"]["task"], r["cell"]["strategy"], r["cell"]["num_draft_tokens"])
            for r in map(json.loads, (sweep / "records.jsonl").read_text().splitlines())
            if r.get("cell") and r["cell"]["strategy"] != "plain"}
    assert card["rows"] == len(grid) == card["training_data"]["rows"]  # one row per measured grid cell
    assert card["training_data"]["workloads"] == ["code@T=0", "math@T=0"]
    assert card["held_out"] == {"loto": {"workloads": 2, "median_rel_error": 0.1}}
    assert card["domain"]["hardware"] == ["cpu"] and "drafter probe" in card["training_data"]["evidence"]
    doc = json.loads(out.read_text())
    assert len(doc["training"]["X"]) == len(grid) and set(doc["training"]["groups"]) == {"code", "math"}


def test_the_shipped_artifact_refits_to_itself(tmp_path: Path) -> None:
    """Its own rows, parameters and card, refitted: the same file, so the same predictions
    (``tests/test_encoding.py`` pins them)."""
    out = tmp_path / "refit.json"
    result = runner.invoke(app, ["policy", "refit", str(SHIPPED), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_text() == SHIPPED.read_text()


def test_bad_input_is_one_line_each_and_exit_2(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    cases = {
        ("fit", "--sweep", str(empty), "--out", str(tmp_path / "p.md")): ["--out: a policy artifact is JSON"],
        ("fit", "--sweep", str(empty), "--sweep", str(tmp_path / "nope"), "--out", str(tmp_path / "p.json")):
            ["--sweep: not a run folder", "--sweep: not a run folder"],
        ("fit", "--sweep", str(empty), "--out", str(tmp_path / "no" / "p.json")): ["--out: its folder does not exist"],
        ("refit", str(bad), "--out", str(tmp_path / "p.json")): ["schema: not a policy artifact"],
        ("refit", str(tmp_path / "nope.json"), "--out", str(tmp_path / "p.json")): ["policy file not found"],
    }
    for args, messages in cases.items():
        result = runner.invoke(app, ["policy", *args])
        assert result.exit_code == 2, (args, result.output)
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert len(lines) == len(messages), (args, result.output)
        for line, message in zip(lines, messages):
            assert line.startswith("error: ") and message in line, (args, result.output)
    assert not (tmp_path / "p.json").exists()


def test_replicate_sweeps_sharpen_labels_only(sweep: Path, replicate: Path) -> None:
    """A replicate's labels join each cell's truth as a geometric mean over runs, each read against
    its own plain baseline; the policy's records, the sweep's cost and the verify curve stay the
    first sweep's."""
    import math

    from picker.recommend.sweep_data import load_sweeps

    alone, other = load_sweeps([sweep]), load_sweeps([replicate])
    both = load_sweeps([sweep], [replicate])
    w, w1, w2 = both.workloads[("code", 0.0)], alone.workloads[("code", 0.0)], other.workloads[("code", 0.0)]
    assert w.records == w1.records and w.replicates == [w2.records]
    for g in w1.truth:
        assert w.truth[g] == pytest.approx(math.sqrt(w1.truth[g] * w2.truth[g]))
    assert w1.truth != w2.truth                      # other prompts: the runs' labels differ
    assert both.workloads[("math", 0.0)].truth == alone.workloads[("math", 0.0)].truth  # no replicate there
    assert both.curve == alone.curve and both.curve_cost == alone.curve_cost




def test_probe_is_relabelled_and_holds_only_short_draft_chains_and_plain(sweep: Path) -> None:
    from picker.recommend.policy_fit import draft_kinds
    from picker.recommend.sweep_data import PROBE_TASK, load_sweeps, probe_records

    data = load_sweeps([sweep])
    probe = probe_records(data, draft_kinds())
    cells = {(r.cell.task, r.cell.strategy, r.cell.num_draft_tokens) for r in probe}
    # ngram's lookup cost does not grow with N: it gets no probe; the draft model does.
    assert cells == {(PROBE_TASK, "plain", 0), (PROBE_TASK, "vanilla", 1)}
    assert all(r.prompt_ids[0].endswith("-0") for r in probe)




def test_profile_runs_are_summarised_against_their_own_plain_baseline(tmp_path: Path) -> None:
    """Two profile folders timed on a machine running at different speeds: each cell's verify ratio
    and speedup are taken against its own run's plain decoding, not the two runs' plain pooled."""
    from picker.profiler.records import CellKey, Record
    from picker.recommend.sweep_data import load_profile_records, measurements_of

    def run(folder: Path, strategy: str, step_s: float) -> None:
        """One run: plain at ``step_s`` per step and a chain N = 2 whose verify steps cost 1.2 plain steps."""
        folder.mkdir()
        plain, chain = CellKey("code", "plain", 0.0, 0), CellKey("code", strategy, 0.0, 2)
        recs = [Record(plain, (f"p{i}",), tokens=11, forwards=11, steps=10, verify_s=10 * step_s, wall_s=11 * step_s)
                for i in range(3)]
        recs += [Record(chain, (f"p{i}",), tokens=11, forwards=6, steps=5, drafted=10, accepted=5, draft_steps=5,
                        pos_reached=(5, 5), pos_accepted=(5, 0), verify_s=5 * 1.2 * step_s, wall_s=7 * step_s)
                 for i in range(3)]
        (folder / "records.jsonl").write_text("".join(r.to_json() + "\n" for r in recs))

    run(tmp_path / "a", "ngram", 0.01)
    run(tmp_path / "b", "lookahead", 0.02)  # the second run's machine was twice as slow
    records = load_profile_records([tmp_path / "a", tmp_path / "b"])[("code", 0.0)]
    cells = {c.strategy: c for c in measurements_of(records, "test").cells}
    assert set(cells) == {"ngram", "lookahead"}
    for c in cells.values():
        assert c.v_vs_plain_forward == pytest.approx(1.2, rel=1e-3)
        assert c.speedup_vs_plain == pytest.approx(11 / 7, rel=1e-3)

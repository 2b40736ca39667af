"""What would unlock a better option: each blocker the alternatives table names gets its own remedy,
read off the scored table of a real profile (``picker.recommend.unlock``)."""

from __future__ import annotations

from pathlib import Path

from picker.inputs.workload import load_profile
from picker.recommend.pipeline import recommend
from picker.recommend.table import Scored, ScoredTable
from picker.recommend.unlock import _remedies, unlocks
from tests.test_profile_defaults import ISSUE_EXAMPLE as WITH_SLO

# The issue's profile without its 50 ms p99 ITL target (under which every runnable option is off),
# so the blockers below are the ones the drafters and the engine set.
ISSUE_EXAMPLE = WITH_SLO.split("slo:")[0]

ROOT = Path(__file__).resolve().parents[1]


def _table(tmp_path: Path, text: str) -> ScoredTable:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    return recommend(load_profile(path)).table


def _row(table: ScoredTable, strategy: str, tree: bool = False) -> Scored:
    return max((r for r in table.rows if r.plugin.name == strategy and r.config.is_tree == tree), key=lambda r: r.mean)


def test_each_blocker_gets_its_remedy(tmp_path: Path) -> None:
    text = ISSUE_EXAMPLE.replace("engine: vllm", 'engine: {name: vllm, version: "0.10.1"}') + (
        "drafters:\n  disabled: [ngram]\n  draft_model: {name: meta-llama/Llama-3.1-70B-Instruct, params_b: 70.6}\n")
    table = _table(tmp_path, text)
    assert _remedies(_row(table, "ngram"), table) == ["take ngram out of drafters.disabled"]
    suffix = _remedies(_row(table, "suffix"), table)
    assert suffix is not None and suffix[0].startswith("switch to a newer vllm than 0.10.1 (engine.version): ")
    # a 70.6B draft needs ~131 GiB beside the target: more than the 8 GiB headroom (and the accelerator)
    big = _remedies(_row(table, "vanilla"), table)
    assert big is not None and big[0].startswith("memory_headroom_gib >= 131.5 (it is 8)")
    lookahead = _remedies(_row(table, "lookahead"), table)
    assert lookahead is not None and lookahead[-1].startswith("switch the engine to ")
    assert "vllm has no algorithm for it" in lookahead[-1] and "vllm" not in lookahead[-1].split("(")[0]
    tree = _remedies(_row(table, "eagle3", tree=True), table)
    assert tree is not None and tree[0].startswith("drafters.eagle3_head: {name: yuhuili/EAGLE3-LLaMA3.1-Instruct-8B}")
    assert tree[1] == "switch the engine to sglang or tensorrt_llm (vllm verifies chains only)"


def test_unlocks_beat_the_deployment_and_put_the_profiles_own_engine_first(tmp_path: Path) -> None:
    table = _table(tmp_path, ISSUE_EXAMPLE)
    deployed = max((r for r in table.rows if r.deployable), key=lambda r: r.mean)
    found = unlocks(table)
    assert found and all(u.predicted_speedup.mean > deployed.mean for u in found)
    first = found[0]
    assert (first.strategy, first.same_engine) == ("eagle3", True)
    assert found[1].strategy == "eagle3" and not found[1].same_engine  # the tree, on another engine
    assert found[1].predicted_speedup.mean > first.predicted_speedup.mean


def test_a_profile_with_its_head_is_offered_only_what_its_engine_lacks() -> None:
    """The code assistant's profile provides its EAGLE-3 head and deploys an EAGLE-3 chain on vLLM:
    what it cannot run is a tree, which needs an engine that verifies trees, and nothing it already
    provides is asked for again."""
    rec = recommend(load_profile(ROOT / "profiles" / "code-assistant-8b-a100.yaml")).recommendation
    assert rec.decision.strategy == "eagle3" and rec.decision.tree is None
    mine = [u for u in rec.unlocks if u.strategy == "eagle3"]
    assert mine and all(not u.same_engine and u.setting.startswith("a tree") for u in mine)
    assert all(not any(p.startswith("drafters.eagle3_head") for p in u.provide) for u in mine)
    assert all(any(p.startswith("switch the engine to sglang") for p in u.provide) for u in mine)


def test_an_off_plan_names_a_live_backend_only_where_the_profiler_has_one(tmp_path: Path) -> None:
    """The "measure α" sentence of an off plan adds ``--backend`` for the profile's engine only where
    ``specpick profile`` drives it live (vLLM here); TensorRT-LLM has no profiler backend, so none."""
    from picker.recommend.words import measure_next, strategy_labels

    text = (ROOT / "profiles" / "offline-batch.yaml").read_text()
    for engine, want in (("vllm", "--backend vllm --url URL"), ("tensorrt_llm", None)):
        path = tmp_path / f"{engine}.yaml"
        path.write_text(text.replace("  name: vllm", f"  name: {engine}", 1))
        rec = recommend(load_profile(path)).recommendation
        assert rec.decision.strategy == "none" and rec.engine == engine
        (line,) = measure_next(rec, strategy_labels())
        assert "specpick profile --strategies" in line
        if want is None:
            assert "--backend" not in line, line
        else:
            assert want in line, line

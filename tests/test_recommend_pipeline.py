"""The recommend pipeline's seams: scoring hands decide an immutable table and decide never calls
back; scoring is plain functions of data (no result depends on what ran before); policies is used
through its public surface; CLI command modules never import main."""

from __future__ import annotations

import ast
import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from picker.inputs.workload import load_profile
from picker.recommend import costs as costs_module
from picker.recommend import evidence_index as evidence_module
from picker.recommend import scoring as scoring_module
from picker.recommend.costs import choose_costs, step_cost
from picker.recommend.decide import decide
from picker.recommend.evidence_index import index_evidence
from picker.recommend.pipeline import recommend
from picker.recommend.provenance_labels import with_provenance
from picker.recommend.scoring import bucket_speedups, score
from picker.recommend.table import Bucket
from picker.recommend.unlock import unlocks

ROOT = Path(__file__).resolve().parents[1]
PROFILES = sorted((ROOT / "profiles").glob("*.yaml"))


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names) of every import statement in ``path``, at any depth."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
    return out


def _table(profile_path: Path, path: str = ""):  # noqa: ANN202 - a ScoredTable
    profile = load_profile(profile_path)
    index = index_evidence(profile, None)
    return score(profile, index, choose_costs(profile, index, None), path=path)


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.stem)
def test_decide_reads_the_table_and_never_the_scoring_functions(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    profile = load_profile(path)
    expected = recommend(profile, path=str(path)).recommendation
    table = _table(path, str(path))

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("decide called back into scoring")

    for module, names in ((costs_module, ("cost", "model_cost", "step_cost", "at_cost", "level_factor")),
                          (evidence_module, ("evidence", "evidence_at", "alpha", "candidate", "scorable")),
                          (scoring_module, ("score", "bucket_speedups"))):
        for name in names:
            monkeypatch.setattr(module, name, refuse)
    # with_provenance labels the decision with what the measurements say (none here) and merges
    # citations; it reads the Recommendation only.
    decided = with_provenance(decide(table, path=str(path)).recommendation, profile, None)
    # The pipeline adds what the plan was asked and what would unlock more; the unlocks too are
    # read off the table alone (the scoring functions refuse here).
    assert decided == expected.model_copy(update={"inputs": None, "unlocks": []})
    assert unlocks(table) == expected.unlocks
    for name in ("decide.py", "schedule.py"):  # ... and could not reach them by a name it imported
        modules = {m for m, _ in _imports(ROOT / "picker" / "recommend" / name)}
        assert not modules & {"picker.recommend.costs", "picker.recommend.evidence_index", "picker.recommend.scoring"}


def _numbers(table) -> dict:  # noqa: ANN001 - (strategy, config) -> every scored speedup, and the step cost
    return {(r.plugin.name, r.config): (dict(r.speedups), r.cost.step_ratio, dict(r.costs_by_batch))
            for r in table.rows}


@pytest.mark.parametrize("name", ["chat-70b-h100", "code-assistant-qwen-llamacpp"])
def test_scoring_does_not_depend_on_what_ran_before(name: str) -> None:
    """The same table whatever was asked first: the scoring functions' caches only save work."""
    path = ROOT / "profiles" / f"{name}.yaml"
    profile = load_profile(path)
    measurements = None
    shipped = ROOT / "profiles" / "measurements" / f"{name}.summary.json"
    if shipped.exists():
        from picker.inputs.measurements import load_measurements

        measurements = load_measurements(shipped)
    index = index_evidence(profile, measurements)
    costs = choose_costs(profile, index, measurements)
    fresh = score(profile, index, costs)
    # Ask the same functions other questions first, in another order, then score again.
    later_index = index_evidence(profile, measurements)
    later_costs = choose_costs(profile, later_index, measurements)
    options = [r.option for r in fresh.rows][::-1]
    bucket_speedups(later_index, later_costs, [(o, Bucket("chat", 300, 1.3, 1.0)) for o in options])
    for o in options[:5]:
        step_cost(later_index, later_costs, o, fresh.buckets, 7)
    again = score(profile, later_index, later_costs, [r.option for r in fresh.rows])
    assert _numbers(again) == _numbers(fresh)


def test_the_table_is_immutable() -> None:
    table = _table(PROFILES[0])
    row = table.rows[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        row.option.feasible = False  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        row.mean = 9.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        row.speedups[("chat", 1, 0.0)] = (1.0, 1.0, 1.0)  # type: ignore[index]
    with pytest.raises(TypeError):
        table.alphas[("x", "chat", 0.0)] = None  # type: ignore[index]


def test_deprecated_allow_fields_decide_exactly_like_the_disabled_list(tmp_path: Path) -> None:
    """A profile written before drafters.disabled (allow_ngram / allow_lookahead) keeps its decision."""
    import yaml

    data = yaml.safe_load((ROOT / "profiles" / "creative-writing.yaml").read_text())
    assert data["drafters"]["disabled"] == ["lookahead"]
    new = recommend(load_profile(ROOT / "profiles" / "creative-writing.yaml")).recommendation.model_dump()
    del data["drafters"]["disabled"]
    data["drafters"].update(allow_ngram=True, allow_lookahead=False)  # the spelling shipped until now
    (tmp_path / "old.yaml").write_text(yaml.safe_dump(data))
    old = recommend(load_profile(tmp_path / "old.yaml")).recommendation.model_dump()
    # (safe_dump sorts the keys: the warning names them in the file's order)
    assert old["warnings"] == [*new["warnings"], "drafters.allow_lookahead, drafters.allow_ngram are deprecated: "
                               "write drafters.disabled: [lookahead] instead (the same decision)"]
    for alt in old["alternatives"]:
        alt["notes"] = [n.replace("drafters.allow_lookahead: false", "drafters.disabled") for n in alt["notes"]]
    assert {k: v for k, v in new.items() if k != "warnings"} == {k: v for k, v in old.items() if k != "warnings"}
    assert any("disabled in the profile (drafters.disabled)" in n for a in new["alternatives"] for n in a["notes"])


def test_recommend_and_sdk_use_only_the_policies_surface() -> None:
    import policies

    for path in [*(ROOT / "picker" / "recommend").glob("*.py"), *(ROOT / "picker" / "sdk").glob("*.py")]:
        for module, names in _imports(path):
            assert not module.startswith("policies."), f"{path.name} imports {module}"
            if module == "policies":
                assert set(names) <= set(policies.__all__), f"{path.name}: {set(names) - set(policies.__all__)}"
    assert sorted(policies._EXPORTS) == policies.__all__
    for name in policies.__all__:  # every public name resolves
        assert getattr(policies, name) is not None


def test_policies_import_only_the_lower_layers() -> None:
    for path in (ROOT / "policies").glob("*.py"):
        for module, _ in _imports(path):
            if module.startswith("picker"):
                assert module.split(".")[1] in ("engine", "inputs", "errors"), f"{path.name} imports {module}"


def test_importing_policies_is_free() -> None:
    code = "import sys, policies; policies.chain(2); print('numpy' in sys.modules or 'sklearn' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"


def test_cli_command_modules_never_import_main() -> None:
    for path in (ROOT / "picker" / "cli").glob("*.py"):
        if path.name == "main.py":
            continue
        assert all(m != "picker.cli.main" for m, _ in _imports(path)), path.name
        if path.name not in ("__init__.py", "common.py", "tables.py"):  # a command module stands alone
            out = subprocess.run([sys.executable, "-c", f"import picker.cli.{path.stem}"], cwd=ROOT,
                                 capture_output=True, text=True)
            assert out.returncode == 0, out.stderr


def test_one_batch_grid() -> None:
    from picker.recommend import table

    grids = [p.name for p in (ROOT / "picker" / "recommend").glob("*.py")
             if "(1, 2, 4, 8, 16, 32, 64, 128, 256, 512)" in p.read_text()]
    assert grids == ["table.py"] and table.BATCH_GRID[-1] == 512

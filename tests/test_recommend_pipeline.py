"""The recommend pipeline's seams: scoring hands decide an immutable table and decide never calls
back; policies is used through its public surface; CLI command modules never import main."""

from __future__ import annotations

import ast
import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from picker.inputs.workload import load_profile
from picker.recommend.decide import decide
from picker.recommend.pipeline import recommend, score_workload
from picker.recommend.provenance_labels import with_provenance
from picker.recommend.scoring import Scorer

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


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.stem)
def test_decide_reads_the_table_and_never_the_scorer(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    profile = load_profile(path)
    expected = recommend(profile, path=str(path))
    table = score_workload(Scorer(profile, None), path=str(path))

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("decide called back into the scorer")

    for name in ("bucket_speedup", "cost", "prime", "evidence", "alpha", "candidate"):
        monkeypatch.setattr(Scorer, name, refuse)
    # with_provenance labels the decision with what the measurements say (none here) and merges
    # citations; it reads the Recommendation only.
    assert with_provenance(decide(table, path=str(path)), profile, None) == expected


def test_the_table_is_immutable() -> None:
    table = score_workload(Scorer(load_profile(PROFILES[0]), None))
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
    new = recommend(load_profile(ROOT / "profiles" / "creative-writing.yaml")).model_dump()
    del data["drafters"]["disabled"]
    data["drafters"].update(allow_ngram=True, allow_lookahead=False)  # the spelling shipped until now
    (tmp_path / "old.yaml").write_text(yaml.safe_dump(data))
    old = recommend(load_profile(tmp_path / "old.yaml")).model_dump()
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

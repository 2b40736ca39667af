"""The architecture, enforced: import-linter's contracts (``[tool.importlinter]`` in pyproject.toml)
hold, a planted violation breaks them with the offending import named, and ``picker/`` shows its
rooms at the top level (no loose modules but ``__init__`` and ``errors``; no file over 500 lines).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("picker", "policies", "strategies")


def _lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("lint-imports")
    if not exe.exists():
        pytest.fail("lint-imports is not installed: it comes with the `test` extra (import-linter)")
    # --no-cache: the tree under test changes between runs (the planted copy).
    return subprocess.run([str(exe), "--no-logo", "--no-cache"], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={"PYTHONPATH": str(cwd), "PATH": "/usr/bin:/bin"})


def test_every_layer_contract_is_kept() -> None:
    out = _lint_imports(ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "broken" not in out.stdout.lower().replace("0 broken", "")


def _planted_copy(tmp_path: Path) -> Path:
    for pkg in (*PACKAGES, "bench"):  # bench: a root package too, so the no-bench contract can name it
        shutil.copytree(ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__", "data"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


@pytest.mark.parametrize(("module", "planted", "shown"), [
    # The engine reaching up into the CLI: the layers contract names the import and its line.
    ("picker/engine/tree.py", "import picker.cli.main", "picker.engine.tree -> picker.cli.main"),
    # A strategy reading the profiler: the strategies contract.
    ("strategies/ngram/drafter.py", "import picker.profiler.records",
     "strategies.ngram.drafter -> picker.profiler.records"),
    # Recommend running a model.
    ("picker/recommend/render.py", "import picker.engine.loop", "picker.recommend.render -> picker.engine.loop"),
    # The package reaching into a benchmark: the no-bench contract.
    ("policies/theory.py", "import bench.load.run", "policies.theory -> bench.load.run"),
])
def test_a_planted_violation_fails_naming_the_import(tmp_path: Path, module: str, planted: str, shown: str) -> None:
    tree = _planted_copy(tmp_path)
    path = tree / module
    path.write_text(path.read_text() + f"\n{planted}  # planted by tests/test_layers.py\n")
    out = _lint_imports(tree)
    assert out.returncode != 0
    assert shown in out.stdout, out.stdout


def test_picker_top_level_holds_only_packages() -> None:
    loose = sorted(p.name for p in (ROOT / "picker").glob("*.py") if p.name not in ("__init__.py", "errors.py"))
    assert loose == []
    for sub in (ROOT / "picker").iterdir():
        if sub.is_dir() and sub.name != "__pycache__":
            assert (sub / "__init__.py").is_file(), f"picker/{sub.name} is not a package"


def test_no_file_over_500_lines() -> None:
    long = [(str(p.relative_to(ROOT)), n) for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 500]
    assert long == []

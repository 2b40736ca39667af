"""Fixtures shared by test folders: a real tiny sweep, measured once per session.

``sweep`` and ``replicate`` serve both the policy's fitting tests (``tests/test_policy_fit.py``) and
the regret benchmark's (``tests/bench/test_regret.py``); measuring them once keeps CI time down.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from picker.cli.main import app

TASKS = ("code", "math")


@pytest.fixture(scope="session")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sweep of a random tiny Llama (its own draft) over two task types: 8 workload cells each."""
    pytest.importorskip("torch")
    from tests.tiny import tiny_folder

    tiny = tiny_folder(tmp_path_factory.mktemp("tiny"), list(TASKS), 20)
    out = tmp_path_factory.mktemp("sweep")
    result = CliRunner().invoke(app, ["sweep", "--model", str(tiny), "--artifact", f"vanilla={tiny}", "--out",
                                      str(out), "--strategies", "vanilla,ngram", "--tasks", ",".join(TASKS),
                                      "--temperatures", "0", "--chain-lengths", "1,2,8", "--prompts-per-task", "3",
                                      "--max-new-tokens", "32", "--quiet"])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="session")
def replicate(tmp_path_factory: pytest.TempPathFactory, sweep: Path) -> Path:
    """The same grid on other prompts (another seed), one task type only."""
    tiny = Path(json.loads((sweep / "run.json").read_text())["target_path"])
    out = tmp_path_factory.mktemp("replicate")
    result = CliRunner().invoke(app, ["sweep", "--model", str(tiny), "--artifact", f"vanilla={tiny}", "--out",
                                      str(out), "--strategies", "vanilla,ngram", "--tasks", "code", "--temperatures",
                                      "0", "--chain-lengths", "1,2,8", "--prompts-per-task", "3",
                                      "--max-new-tokens", "32", "--seed", "1", "--no-curve", "--quiet"])
    assert result.exit_code == 0, result.output
    return out

"""click's own usage errors (a flag the command does not have, a value of the wrong type, a missing
option, an unknown command) end as one ``error:`` line and exit 2, as every other bad input does;
``--help`` and the help printed for no arguments still work. Run as the ``specpick`` entry point
runs (``app()`` in a process of its own), so nothing of the test runner's error handling applies."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SPECPICK = [sys.executable, "-c", "from picker.cli.main import app; app(prog_name='specpick')"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SPECPICK, *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("args", "names"), [
    (["profile", "--bogus"], ["specpick profile", "--bogus"]),
    (["estimate", "--alpha", "x", "--strategy", "ngram"], ["specpick estimate", "--alpha"]),
    (["recommend"], ["specpick recommend", "profile"]),
    (["nosuch"], ["specpick", "nosuch"]),
    (["zoo", "build", "--bogus"], ["specpick zoo build", "--bogus"]),
    (["recommend", "profiles/code-assistant-8b-a100.yaml", "--format", "xml"], ["--format", "xml"]),
], ids=["unknown-option", "malformed-value", "missing-argument", "unknown-command", "nested-group", "bad-choice"])
def test_a_bad_flag_is_one_line_and_exit_2(args: list[str], names: list[str]) -> None:
    result = _run(*args)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert all(name in lines[0] for name in names) and "--help" in lines[0], lines[0]
    assert result.stdout == "" and "Traceback" not in result.stderr


def test_help_is_kept(tmp_path: Path) -> None:
    for args in (["--help"], ["profile", "--help"], ["zoo", "--help"]):
        result = _run(*args)
        assert result.returncode == 0 and "Usage:" in result.stdout and result.stderr == "", (args, result.stderr)
        assert "--help" in result.stdout
    bare = _run()  # no arguments: the help, not an error line
    assert "Usage:" in bare.stdout + bare.stderr and "error:" not in bare.stderr


def test_help_reads_at_80_columns() -> None:
    """At 80 columns every line of the help fits, an option's help runs in full lines (not a column of
    ~17 characters beside boolean pairs), and each command is listed with its whole first sentence."""
    env = {"COLUMNS": "80", "PATH": "/usr/bin:/bin"}
    top = subprocess.run([*SPECPICK, "--help"], capture_output=True, text=True, timeout=120, env=env).stdout
    prof = subprocess.run([*SPECPICK, "profile", "--help"], capture_output=True, text=True, timeout=120, env=env).stdout
    for text in (top, prof):
        assert text and max(len(line) for line in text.splitlines()) <= 80, text
    commands = top.split("Commands:", 1)[1]
    assert "..." not in commands and "accepts as it is." in commands  # init's sentence, whole
    flat = " ".join(prof.split())
    assert "sglang / vllm / llamacpp: a second server of the same target without speculation" in flat
    assert max(len(line) - len(line.lstrip()) for line in prof.splitlines() if line.strip()) <= 40, prof

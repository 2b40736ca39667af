"""Outputs never lose the plan: a bad --out / --plot is one line, exit 2, before any work; every
--format prints that format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from picker.cli.main import app

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "profiles" / "code-assistant-8b-a100.yaml"
runner = CliRunner()


def _one_error(args: list[str]) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.output, result.output
    return lines[0]


@pytest.mark.parametrize("args, says", [
    (["--plot", "/nonexistent/dir/why.png"], "--plot: parent directory does not exist"),
    (["--plot", "x.txt"], "--plot: cannot draw a .txt file; name it .png, .svg or .pdf"),
    (["--out", "/nonexistent/dir/plan.md"], "--out: parent directory does not exist"),
    (["--format", "json", "--out", "plan.md"],
     "--out: a .md file for --format json; name it .json, or pass --format md"),
    (["--out", "plan.yaml"], "--out: a .yaml file for --format md"),
])
def test_recommend_refuses_a_bad_output_before_any_work(tmp_path: Path, args: list[str], says: str) -> None:
    # The profile does not exist: the output is checked first, so its error is the one reported.
    line = _one_error(["recommend", str(tmp_path / "absent.yaml"), *args])
    assert says in line, line


def test_recommend_lists_every_output_problem_at_once(tmp_path: Path) -> None:
    result = runner.invoke(app, ["recommend", str(PROFILE), "--plot", "x.txt", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert [line.split(": ")[2] for line in result.stderr.splitlines()] == ["--out", "--plot"]


@pytest.mark.parametrize("out, says", [
    ("plan.pdf", "a .pdf file: the report is an HTML page; name it .html"),
    ("plan", "a file with no suffix: the report is an HTML page"),
    ("/nonexistent/dir/plan.html", "parent directory does not exist"),
])
def test_report_writes_html_only_to_html(tmp_path: Path, out: str, says: str) -> None:
    line = _one_error(["report", str(tmp_path / "absent.yaml"), "--out", out])
    assert says in line and "--out" in line
    assert list(tmp_path.iterdir()) == []


def test_recommend_plot_still_draws(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    plot = tmp_path / "why.svg"
    result = runner.invoke(app, ["recommend", str(PROFILE), "--plot", str(plot)])
    assert result.exit_code == 0, result.output
    assert plot.read_text().lstrip().startswith("<?xml")


@pytest.mark.parametrize("command", [
    ["estimate", "--strategy", "eagle3", "--alpha", "0.8", "--model-params", "8e9", "--hardware", "h100-sxm"],
    ["strategies"],
])
@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_every_format_prints_that_format(command: list[str], fmt: str) -> None:
    result = runner.invoke(app, [*command, "--format", fmt])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout) if fmt == "json" else yaml.safe_load(result.stdout)
    assert isinstance(data, (dict, list)) and data
    if fmt == "yaml":
        with pytest.raises(json.JSONDecodeError):
            json.loads(result.stdout)


def test_recommend_does_not_import_the_plotting_library() -> None:
    """matplotlib is in the base install for `report`'s plots; `recommend` must still start without it
    (nor numpy), so its start-up stays what it was. A fresh process: this one has imported both."""
    import subprocess
    import sys

    code = ("import sys; from picker.cli.main import app\n"
            "try:\n    app(['recommend', sys.argv[1], '--format', 'json'], standalone_mode=False)\n"
            "except SystemExit:\n    pass\n"
            "print(sorted(m for m in ('matplotlib', 'numpy') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code, str(PROFILE)], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"

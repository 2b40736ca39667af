"""`specpick init` writes a profile `recommend` accepts unchanged; `specpick check` lists its defaults."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from picker.cli.main import app
from tests.bad_inputs import LLAMA_CONFIG

runner = CliRunner()
FLAGS = ["--model", "llama-3.1-8b-instruct", "--hardware", "H100", "--engine", "vllm",
         "--task-mix", "chat=0.7,code=0.3", "--concurrency", "32", "--temperature", "0.7", "--itl-p99-ms", "50"]


def test_init_writes_a_profile_recommend_accepts_unchanged(tmp_path: Path) -> None:
    out = tmp_path / "chat.yaml"
    result = runner.invoke(app, ["init", *FLAGS, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert f"wrote {out}" in result.stdout and "hardware.gpu = h100-sxm" in result.stdout
    text = out.read_text()
    assert text.startswith("# ") and "  # prompt_tokens: 1024" in text  # defaults as comments
    rec = runner.invoke(app, ["recommend", str(out), "--format", "json"])
    assert rec.exit_code == 0, rec.output
    assert json.loads(rec.stdout)["decision"]["strategy"]
    check = runner.invoke(app, ["check", str(out)])
    assert check.exit_code == 0 and "valid: meta-llama/Llama-3.1-8B-Instruct" in check.stdout
    assert "traffic.prompt_tokens = {mean: 1024}" in check.stdout and "traffic.concurrency" not in check.stdout


def test_uncommenting_every_default_keeps_the_profile_valid(tmp_path: Path) -> None:
    out = tmp_path / "p.yaml"
    assert runner.invoke(app, ["init", *FLAGS[:8], "--out", str(out)]).exit_code == 0
    lines = out.read_text().splitlines()
    uncommented = [line.replace("# ", "", 1) if line.lstrip().startswith(("# prompt", "# output", "# concurrency",
                                                                         "# temperature", "# memory")) else line
                   for line in lines]
    out.write_text("\n".join(uncommented) + "\n")
    result = runner.invoke(app, ["check", str(out)])
    assert result.exit_code == 0, result.output
    assert "traffic.concurrency" not in result.stdout and "memory_headroom_gib" not in result.stdout


def test_missing_answers_are_all_named_and_nothing_is_written(tmp_path: Path) -> None:
    out = tmp_path / "p.yaml"
    result = runner.invoke(app, ["init", "--out", str(out), "--no-ask"])
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert [line.split(":")[1].strip() for line in lines] == ["--model", "--hardware", "--engine", "--task-mix"]
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_asks_for_what_the_flags_leave_out(tmp_path: Path) -> None:
    out = tmp_path / "p.yaml"
    answers = "qwen2.5-7b-instruct\n2x a100\nsglang\ncode\n8\n0\n\n"
    result = runner.invoke(app, ["init", "--out", str(out), "--ask"], input=answers)
    assert result.exit_code == 0, result.output
    check = runner.invoke(app, ["check", str(out)])
    assert "on 2x a100-80gb with sglang 0.5.23" in check.stdout and "a100-40gb" in check.stdout


def test_bad_answers_are_every_problem_at_once_and_no_file(tmp_path: Path) -> None:
    out = tmp_path / "p.yaml"
    result = runner.invoke(app, ["init", "--model", "nope", "--hardware", "tpu", "--engine", "tgi", "--task-mix",
                                 "chat=0.5", "--out", str(out)])
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 4 and all(line.startswith(f"error: {out}: ") for line in lines)
    assert list(tmp_path.iterdir()) == []


def test_never_overwrites_without_force(tmp_path: Path) -> None:
    out = tmp_path / "p.yaml"
    out.write_text("mine\n")
    result = runner.invoke(app, ["init", *FLAGS, "--out", str(out)])
    assert result.exit_code == 2 and "--force" in result.stderr and out.read_text() == "mine\n"
    assert runner.invoke(app, ["init", *FLAGS, "--out", str(out), "--force"]).exit_code == 0


def test_a_local_model_folder_is_written_relative_to_the_profile(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "models" / "llama").mkdir(parents=True)
    (tmp_path / "models" / "llama" / "config.json").write_text(LLAMA_CONFIG)
    (tmp_path / "profiles").mkdir()
    monkeypatch.chdir(tmp_path)
    out = Path("profiles") / "p.yaml"
    flags = ["--model", "models/llama", *FLAGS[2:]]
    result = runner.invoke(app, ["init", *flags, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "model: ../models/llama" in out.read_text()
    assert runner.invoke(app, ["recommend", str(out), "--format", "json"]).exit_code == 0

"""Profiling real serving engines on the zoo: vLLM's CPU build here (marker ``engines``), SGLang on a GPU.

vLLM runs from the venv ``scripts/engines-setup.sh vllm`` builds (``$SPECPICKER_ENGINES_DIR``,
default ``.engines/``); the test skips only when that venv is absent. The SGLang test needs CUDA
and an installed ``sglang`` (``pip install -e '.[sglang]'`` on a GPU machine).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from typer.testing import CliRunner

from picker.cli.main import app
from picker.profiler.vllm_server import Server

ROOT = Path(__file__).resolve().parents[1]
ENGINES = Path(os.environ.get("SPECPICKER_ENGINES_DIR", ROOT / ".engines"))
runner = CliRunner()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_up(url: str, proc: subprocess.Popen[bytes], log: Path, limit: float) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"server exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except OSError:
            time.sleep(1.0)
    pytest.fail(f"server not up after {limit:.0f} s:\n{log.read_text()[-3000:]}")


def _zoo_target() -> Path:
    from picker.zoo import build_zoo  # type: ignore[attr-defined]

    return Path(build_zoo("ci").target)


@pytest.mark.engines
def test_vllm_ngram_on_the_zoo(tmp_path: Path) -> None:
    python = ENGINES / "vllm-venv" / "bin" / "python"
    if not python.exists():
        pytest.skip(f"no vLLM venv at {python.parent.parent}: run `bash scripts/engines-setup.sh vllm`")
    target = _zoo_target()
    spec = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 1}
    # The benches' launcher: loopback, float32, eager, a small KV-cache reservation (the CPU backend
    # reserves 92% of host memory by default), Intel OpenMP preloaded.
    server = Server(python, target, spec, tmp_path)
    url = server.url
    try:
        server.wait_up()
        result = runner.invoke(app, ["profile", "--backend", "vllm", "--url", url, "--strategies", "ngram",
                                     "--tasks", "summarization,creative", "--temperatures", "0",
                                     "--limit-per-task", "8", "--max-new-tokens", "48", "--ignore-eos",
                                     "--concurrency", "4",
                                     "--no-early-stop", "--quiet", "--out", str(tmp_path / "run")])
        assert result.exit_code == 0, result.output
    finally:
        server.stop()
    cells = {c["task"]: c for c in json.loads((tmp_path / "run" / "summary.json").read_text())["cells"]}
    assert set(cells) == {"summarization", "creative"}
    for c in cells.values():
        assert c["num_draft_tokens"] == 3 and c["samples"] == 2  # two waves of four requests
        assert 0.0 <= c["alpha"] <= 1.0 and c["tokens"] > 0
    summ = cells["summarization"]
    assert summ["draft_tokens"] > 0 and summ["per_position"] and len(summ["per_position"]) <= 3
    # Prompt lookup drafts from text to copy: summarization accepts more than creative writing.
    assert summ["accepted_tokens"] >= cells["creative"]["accepted_tokens"]


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="needs a CUDA device")
def test_sglang_standalone_draft_on_the_zoo(tmp_path: Path) -> None:
    pytest.importorskip("sglang")
    from picker.zoo import build_zoo  # type: ignore[attr-defined]

    zoo = build_zoo("ci")
    port = _free_port()
    log = tmp_path / "sglang.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sglang.launch_server", "--model-path", str(zoo.target), "--host", "127.0.0.1",
             "--port", str(port), "--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path",
             str(zoo.draft), "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
             "--speculative-num-draft-tokens", "4", "--dtype", "float32"], stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_up(f"{url}/get_server_info", proc, log, limit=600)
        result = runner.invoke(app, ["profile", "--backend", "sglang", "--url", url, "--tasks", "code,creative",
                                     "--temperatures", "0,1", "--limit-per-task", "16", "--max-new-tokens", "64",
                                     "--quiet", "--out", str(tmp_path / "run")])
        assert result.exit_code == 0, result.output
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert {c["strategy"] for c in summary["cells"]} == {"vanilla"}
    assert all(c["num_draft_tokens"] == 3 and c["per_position"] for c in summary["cells"])
    assert summary["run"]["server_report"]["avg_spec_accept_length"] > 1.0

"""``specpick profile --ignore-eos``: every generation is exactly --max-new-tokens long, so tests and
measurements do not depend on whether the model likes to stop (a zoo that answers EOS at once).
Engines get their own flag in their documented request formats; the torch loop stops at no EOS."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from picker.cli.main import app
from tests.test_endpoints_llamacpp import RATES, LlamaDouble, llama

runner = CliRunner()


class Recording(LlamaDouble):
    def __init__(self, rates: list[float], **kw: Any) -> None:
        super().__init__(rates, **kw)
        self.bodies: list[dict[str, Any]] = []

    def _complete(self, req: dict[str, Any]) -> dict[str, Any]:
        self.bodies.append(req)
        return super()._complete(req)


def test_llamacpp_requests_carry_ignore_eos_only_when_asked(tmp_path: Path) -> None:
    args = ["--strategies", "vanilla", "--tasks", "math", "--temperatures", "0", "--limit-per-task", "2",
            "--max-new-tokens", "12", "--no-early-stop", "--num-draft-tokens", "3", "--concurrency", "1"]
    with Recording(RATES) as on:
        assert llama(on.url, tmp_path / "on", *args, "--ignore-eos").exit_code == 0
    with Recording(RATES) as off:
        assert llama(off.url, tmp_path / "off", *args).exit_code == 0
    # Every request, the untimed warm-up first (shaped like the timed ones: source.WARMUP).
    assert len(on.bodies) == len(off.bodies) == 3 and all(b["n_predict"] == 12 for b in on.bodies + off.bodies)
    assert all(b.get("ignore_eos") is True for b in on.bodies)
    assert not any("ignore_eos" in b for b in off.bodies)
    assert json.loads((tmp_path / "on" / "run.json").read_text())["ignore_eos"] is True


def test_torch_generations_are_exactly_max_new_tokens(tmp_path: Path) -> None:
    out = tmp_path / "t"
    result = runner.invoke(app, ["profile", "--model", "zoo", "--strategies", "ngram", "--tasks", "code,chat",
                                 "--temperatures", "0", "--limit-per-task", "3", "--max-new-tokens", "20",
                                 "--no-early-stop", "--ignore-eos", "--quiet", "--no-plot", "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    for cell in [*summary["cells"], *summary["baselines"]]:
        assert cell["tokens"] == 20 * cell["samples"], cell

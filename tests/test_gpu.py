"""The reference engine on a CUDA device (marker ``gpu``: out of the default suite, skipped where
torch sees no CUDA): every built-in strategy keeps the target's greedy output, the CUDA reference
agrees with the CPU reference, and one profile cell runs end to end on the device.

``SPECPICKER_TEST_DEVICE=cpu`` runs the same checks on the CPU, which is how this file is checked on
a machine without a GPU; ``scripts/gpu_check.sh`` runs it on one.

A greedy divergence is tolerated only as a near tie (``tests/agreement.py``): a verify forward over
k tokens and a decode step over one run different kernels on a GPU, so the last bits of a logit may
differ; both tokens must then be the reference's top two, within :data:`TIE` nats.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from picker.engine.backend import TorchBackend  # noqa: E402
from picker.engine.drafting import bind  # noqa: E402
from picker.engine.loop import serve  # noqa: E402
from picker.engine.plugins import load_strategies  # noqa: E402
from picker.engine.runtime import build_drafter  # noqa: E402
from picker.tasks.agreement import first_divergence  # noqa: E402
from picker.tasks.encoding import load_prompt_tokenizer  # noqa: E402
from tests.agreement import Divergence, encoded_prompts, reference_tokens, reference_top2  # noqa: E402

DEVICE = os.environ.get("SPECPICKER_TEST_DEVICE", "cuda")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(DEVICE.startswith("cuda") and not torch.cuda.is_available(),
                                                  reason="needs a CUDA device")]
PROMPTS, MAX_NEW, CONCURRENCY, N = 6, 24, 3, 4
TIE = 1e-3  # nats between the first and second token: float order may flip nothing wider


@pytest.fixture(scope="module")
def zoo() -> tuple[Path, dict[str, Path]]:
    from picker.zoo.resolve import resolve_target

    target, artifacts, _ = resolve_target("zoo")
    return target, artifacts


@pytest.fixture(scope="module")
def prompts(zoo: tuple[Path, dict[str, Path]]) -> list[tuple[str, list[int]]]:
    """Every third agreement prompt: every task type once or more, short enough for the zoo."""
    return [(p.id, ids) for p, ids in encoded_prompts(load_prompt_tokenizer(zoo[0]))][::3][:PROMPTS]


@pytest.fixture(scope="module")
def single(zoo: tuple[Path, dict[str, Path]]) -> TorchBackend:
    """One row on the device: the reference's log-probs where a run diverges."""
    return TorchBackend.from_pretrained(zoo[0], device=DEVICE)


@pytest.fixture(scope="module")
def plain(zoo: tuple[Path, dict[str, Path]],
          prompts: list[tuple[str, list[int]]]) -> tuple[TorchBackend, list[list[int]]]:
    """The device's plain greedy decoding of every prompt at the test's concurrency."""
    target = TorchBackend.from_pretrained(zoo[0], device=DEVICE, rows=CONCURRENCY)
    assert target.device.type == torch.device(DEVICE).type
    run = serve(target, [ids for _, ids in prompts], None, concurrency=CONCURRENCY, max_new_tokens=MAX_NEW)
    return target, [g.tokens for g in run.generations]


def _tolerated(single: TorchBackend, pid: str, ids: list[int], ours: list[int], theirs: list[int]) -> Divergence | None:
    """None when the two agree; else the first divergence, judged on the reference's own log-probs."""
    pos = first_divergence(ours, theirs)
    if pos is None:
        return None
    top = reference_top2(single, ids, ours, pos)
    return Divergence(pid, pos, ours[pos], theirs[pos], top, top, TIE)


def test_the_device_reference_agrees_with_the_cpu_reference(zoo: tuple[Path, dict[str, Path]], single: TorchBackend,
                                                             prompts: list[tuple[str, list[int]]]) -> None:
    cpu = TorchBackend.from_pretrained(zoo[0], device="cpu")
    divergences = [_tolerated(single, pid, ids, reference_tokens(single, ids, MAX_NEW),
                              reference_tokens(cpu, ids, MAX_NEW)) for pid, ids in prompts]
    assert all(d is None or d.tolerated for d in divergences), [d.describe() for d in divergences if d]
    assert sum(d is None for d in divergences) >= len(prompts) - 1


@pytest.mark.parametrize("strategy", ["ngram", "lookahead", "vanilla", "medusa", "eagle3"])
def test_every_builtin_strategy_keeps_the_greedy_output_on_the_device(
        strategy: str, zoo: tuple[Path, dict[str, Path]], prompts: list[tuple[str, list[int]]], single: TorchBackend,
        plain: tuple[TorchBackend, list[list[int]]]) -> None:
    target, expected = plain
    plugin = load_strategies()[strategy]
    options, max_draft = plugin.draft_options.chain(N)

    def build() -> Any:
        return build_drafter(plugin, target, zoo[1], options)

    run = serve(target, [ids for _, ids in prompts], bind(build(), plugin.capabilities, build),
                concurrency=CONCURRENCY, max_new_tokens=MAX_NEW, max_draft=max_draft)
    divergences = [_tolerated(single, pid, ids, want, g.tokens)
                   for (pid, ids), want, g in zip(prompts, expected, run.generations)]
    assert all(d is None or d.tolerated for d in divergences), [d.describe() for d in divergences if d]
    totals = run.totals()
    assert totals["drafted"] > 0 and totals["new_tokens"] == PROMPTS * MAX_NEW


def test_one_profile_cell_on_the_device(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from picker.cli.main import app

    out = tmp_path / "run"
    result = CliRunner().invoke(app, [
        "profile", "--model", "zoo", "--strategies", "eagle3", "--tasks", "code", "--temperatures", "0",
        "--num-draft-tokens", str(N), "--limit-per-task", "2", "--max-new-tokens", "16", "--no-early-stop",
        "--no-plot", "--device", DEVICE, "--quiet", "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    (cell,) = [c for c in summary["cells"] if c["strategy"] == "eagle3"]
    assert cell["samples"] == 2 and cell["tau"] >= 1.0 and cell["speedup_vs_plain"] is not None
    run = json.loads((out / "run.json").read_text())
    assert run["source"]["device"] == DEVICE and run["provenance"]["hardware"]["device"] == DEVICE

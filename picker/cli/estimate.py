"""`specpick estimate`: the cost model's speedup for one configuration of any registered strategy.

    $ specpick estimate --strategy eagle3 --alpha 0.8 --model-params 8e9 --hardware h100-sxm
    $ specpick estimate --strategy repeat-last --alpha 0.5 --model-params 8e9 --hardware h100-sxm --format json
    $ specpick estimate --strategy eagle3 --alpha 0.7 --model-params 8e9 --hardware h200 --calibration cal.json

``--calibration`` takes a file from ``specpick calibrate``: its constants replace the engine
curve's (``policies.calibration_for``: all of them when measured on ``--engine``, the accelerator's
efficiencies only otherwise; another accelerator is refused), and the output says so.

``--strategy`` is checked against the registry (built-ins and installed plugins alike); an unknown
name is one ``error:`` line listing the registered ones, exit code 2.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from picker.cli.common import Fmt, user_errors, write_output
from picker.errors import UserError


class EstimateEngine(str, Enum):
    sglang = "sglang"
    vllm = "vllm"
    tensorrt_llm = "tensorrt_llm"
    llama_cpp = "llama_cpp"
    hf = "hf"


@user_errors
def estimate(
    strategy: Annotated[str, typer.Option(help="Strategy to cost: any registered plugin (specpick strategies).")],
    model_params: Annotated[float, typer.Option(help="Target parameter count, e.g. 8e9.", min=1e6, max=1e13)],
    hardware: Annotated[str, typer.Option(help="Hardware catalog name, e.g. h100-sxm.")],
    alpha: Annotated[float | None, typer.Option(help="Per-token acceptance rate.", min=0.0, max=1.0)] = None,
    mean_accepted_tokens: Annotated[float | None, typer.Option(
        help="Mean tokens per verify step, bonus included (needs --num-draft-tokens).", min=1.0)] = None,
    num_draft_tokens: Annotated[int | None, typer.Option(
        help="Tokens drafted per step (tree nodes for a tree); searched when omitted.", min=1, max=256)] = None,
    tree_topk: Annotated[int | None, typer.Option(help="Branching of a draft tree (>1 makes a tree).", min=1, max=64)] = None,
    draft_params: Annotated[float | None, typer.Option(help="Draft model size for vanilla, e.g. 1e9.", min=1e5, max=1e13)] = None,
    engine: Annotated[EstimateEngine, typer.Option(help="Serving engine; hf = eager PyTorch.")] = EstimateEngine.sglang,
    batch_size: Annotated[int, typer.Option(min=1, max=65536)] = 1,
    context_len: Annotated[int, typer.Option(min=0, max=10_000_000)] = 1024,
    num_devices: Annotated[int, typer.Option(help="Tensor-parallel degree.", min=1, max=64)] = 1,
    temperature: Annotated[float, typer.Option(
        help="Sampling temperature; > 0 adds what sampling costs on the host (an eager loop's calibrated "
             "sampling_* constants; zero on every shipped curve).", min=0.0, max=2.0)] = 0.0,
    calibration: Annotated[Path | None, typer.Option(
        help="Load-curve calibration JSON from a GPU run (specpick calibrate).")] = None,
    fmt: Annotated[Fmt, typer.Option("--format", help="md (a table) or json.")] = Fmt.md,
) -> None:
    """Predict the speedup of one configuration with the cost model."""
    import json

    from picker.engine.plugins import load_strategies
    from picker.inputs.hardware import get_hardware
    from policies import estimate as run

    if (alpha is None) == (mean_accepted_tokens is None):
        raise UserError("give exactly one of --alpha and --mean-accepted-tokens", field="--alpha")
    if mean_accepted_tokens is not None and num_draft_tokens is None:
        raise UserError("--mean-accepted-tokens needs --num-draft-tokens (the N it was measured at)",
                        field="--num-draft-tokens")
    if mean_accepted_tokens is not None and num_draft_tokens is not None and mean_accepted_tokens > num_draft_tokens + 1:
        raise UserError(f"cannot exceed num_draft_tokens + 1 = {num_draft_tokens + 1}", field="--mean-accepted-tokens")
    plugins = load_strategies()
    if strategy not in plugins:
        raise UserError(f"{strategy!r} is not registered; registered: {', '.join(sorted(plugins))}",
                        field="--strategy")
    caps = plugins[strategy].capabilities
    if tree_topk and tree_topk > 1 and not caps.tree:
        raise UserError(f"{strategy} drafts chains, not trees", field="--tree-topk")
    hw = get_hardware(hardware)
    cal = None
    if calibration is not None:
        from policies import calibration_for

        cal = calibration_for(calibration, engine.value, hw.name)
    result = run(caps.draft_cost, model_params=model_params, hardware=hw, alpha=alpha,
                 mean_accepted_tokens=mean_accepted_tokens, num_draft_tokens=num_draft_tokens,
                 tree_topk=tree_topk, draft_params=draft_params, engine=engine.value, batch_size=batch_size,
                 context_len=context_len, num_devices=num_devices, temperature=temperature,
                 calibration=cal.overrides if cal else None, **({"calibration_label": cal.label} if cal else {}))
    result = {"strategy": strategy, **result, "calibration": cal.note if cal else None}
    if fmt is Fmt.json:
        write_output(json.dumps(result, indent=2) + "\n", None)
        return
    from picker.cli.tables import print_estimate

    print_estimate(result)

"""`specpick estimate`: the cost model's speedup for one configuration of any registered strategy.

    $ specpick estimate --strategy eagle3 --alpha 0.8 --model-params 8e9 --hardware h100-sxm
    $ specpick estimate --strategy repeat-last --alpha 0.5 --model-params 8e9 --hardware h100-sxm --format json
    $ specpick estimate --strategy eagle3 --alpha 0.7 --model-params 8e9 --hardware h200 --calibration cal.json

The answer comes first: the speedup, its range and one line of why; the numbers behind it follow,
and ``--verbose`` adds every load-curve constant with its source. The range is the load curve's
held-out error (:data:`HELD_OUT_ERROR`): alpha is taken as given, so what is uncertain is the step
cost. ``--format json`` / ``yaml`` print the same result as data.

A configuration the engine cannot run (EAGLE-3 on llama.cpp, lookahead on vLLM, a tree on an engine
that verifies chains only) or weights that do not fit the accelerators' memory is one ``error:``
line with the reason ``specpick recommend`` gives (``picker.recommend.options``), exit code 2.
``--engine hf`` (the project's own eager loop) runs every registered strategy.

``--calibration`` takes a file from ``specpick calibrate``: its constants replace the engine
curve's (``policies.calibration_for``: all of them when measured on ``--engine``, the accelerator's
efficiencies only otherwise; another accelerator is refused), and the output says so.

``--strategy`` is checked against the registry (built-ins and installed plugins alike); an unknown
name is one ``error:`` line listing the registered ones, exit code 2.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from picker.cli.common import Fmt, user_errors, write_output
from picker.errors import UserError, UserErrors
from policies import HELD_OUT_ERROR, HELD_OUT_SHARE  # the load curve's held-out error (policies.speedup_model)

if TYPE_CHECKING:
    from picker.engine.plugins import Capabilities
    from picker.inputs.hardware import Hardware

LOOP_ENGINE = "hf"  # the project's own eager loop: every registered strategy runs on it


class EstimateEngine(str, Enum):
    sglang = "sglang"
    vllm = "vllm"
    tensorrt_llm = "tensorrt_llm"
    llama_cpp = "llama_cpp"
    hf = "hf"


class EstimateDtype(str, Enum):
    bf16 = "bf16"
    fp16 = "fp16"
    fp8 = "fp8"
    int8 = "int8"
    int4 = "int4"


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
    draft_params: Annotated[float | None, typer.Option(
        help="Draft model size (strategies that draft with a separate model), e.g. 1e9.", min=1e5, max=1e13)] = None,
    engine: Annotated[EstimateEngine, typer.Option(help="Serving engine; hf = eager PyTorch.")] = EstimateEngine.sglang,
    batch_size: Annotated[int, typer.Option(min=1, max=65536)] = 1,
    context_len: Annotated[int, typer.Option(min=0, max=10_000_000)] = 1024,
    num_devices: Annotated[int, typer.Option(help="Tensor-parallel degree.", min=1, max=64)] = 1,
    dtype: Annotated[EstimateDtype, typer.Option(help="Weight precision served.")] = EstimateDtype.bf16,
    temperature: Annotated[float, typer.Option(
        help="Sampling temperature; > 0 adds what sampling costs on the host (an eager loop's calibrated "
             "sampling_* constants; zero on every shipped curve).", min=0.0, max=2.0)] = 0.0,
    calibration: Annotated[Path | None, typer.Option(
        help="Load-curve calibration JSON from a GPU run (specpick calibrate).")] = None,
    fmt: Annotated[Fmt, typer.Option("--format", help="md (the answer, then the numbers), json or yaml.")] = Fmt.md,
    verbose: Annotated[bool, typer.Option(help="Also list every load-curve constant and where it comes from.")] = False,
) -> None:
    """Predict the speedup of one configuration with the cost model."""
    from picker.engine.plugins import load_strategies
    from picker.inputs.hardware import get_hardware, hardware_note
    from picker.inputs.model import BYTES_PER_PARAM
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
    bytes_per_param = BYTES_PER_PARAM[dtype.value]
    problems = [p for p in (_not_runnable(strategy, caps, engine.value, bool(tree_topk and tree_topk > 1)),
                            _not_fitting(caps, hw, model_params, draft_params, bytes_per_param, num_devices,
                                         dtype.value)) if p is not None]
    if problems:
        raise problems[0] if len(problems) == 1 else UserErrors(problems)
    cal = None
    if calibration is not None:
        from policies import calibration_for

        cal = calibration_for(calibration, engine.value, hw.name)
    result = run(caps.draft_cost, model_params=model_params, hardware=hw, alpha=alpha,
                 mean_accepted_tokens=mean_accepted_tokens, num_draft_tokens=num_draft_tokens,
                 tree_topk=tree_topk, draft_params=draft_params, engine=engine.value, batch_size=batch_size,
                 context_len=context_len, num_devices=num_devices, bytes_per_param=bytes_per_param,
                 temperature=temperature, calibration=cal.overrides if cal else None,
                 **({"calibration_label": cal.label} if cal else {}))
    note = hardware_note(hardware)
    result = {"strategy": strategy, "hardware": hw.name, "num_devices": num_devices, "dtype": dtype.value,
              **result, "speedup_range": speedup_range(result["speedup"]),
              "calibration": cal.note if cal else None}
    if note:
        result["assumptions"] = [note, *result["assumptions"]]
    if fmt is Fmt.md:
        from picker.cli.tables import display_name, estimate_text

        write_output(estimate_text(result, display_name(strategy, caps.needs_draft_model), verbose=verbose), None)
        return
    write_output(_dump(result, fmt), None)


def speedup_range(speedup: float) -> dict[str, Any]:
    """The published speedups the load curve predicted within :data:`HELD_OUT_ERROR` (80 % of them),
    turned around: a true value that far from this prediction, either way."""
    return {"low": speedup / (1 + HELD_OUT_ERROR), "high": speedup / (1 - HELD_OUT_ERROR),
            "what": f"{HELD_OUT_SHARE:.0%} of 60 published speedups held out of the load curve's fit were "
                    f"predicted within {HELD_OUT_ERROR:.1%} (bench/load/README.md); alpha taken as given"}


def _not_runnable(strategy: str, caps: Capabilities, engine: str, tree: bool) -> UserError | None:
    """The engine cannot run the strategy (or not as a tree): the reason the plan gives, and where it runs."""
    from picker.recommend.options import engine_support

    why = None if engine == LOOP_ENGINE else engine_support(caps, engine, tree)
    if why is None:
        return None
    can = [e.value for e in EstimateEngine if e.value != LOOP_ENGINE and engine_support(caps, e.value, tree) is None]
    where = f"; engines that can: {', '.join(can)}" if can else ""
    return UserError(f"{engine} cannot run {strategy}{' as a tree' if tree else ''}: {why}{where}", field="--engine")


def _not_fitting(caps: Capabilities, hw: Hardware, model_params: float, draft_params: float | None,
                 bytes_per_param: float, devices: int, dtype: str) -> UserError | None:
    """The weights (the target's, and a draft model's when the strategy drafts with one) do not fit."""
    from picker.recommend.options import memory_shortfall
    from policies.costmodel import DEFAULT_DRAFT_FRACTION

    weights = model_params
    if caps.draft_cost == "draft_model":
        weights += draft_params if draft_params is not None else model_params * DEFAULT_DRAFT_FRACTION
    short = memory_shortfall(weights * bytes_per_param / devices / 2**30, hw.memory_gib, f"{hw.name} memory")
    if short is None:
        return None
    what = "target and draft model" if caps.draft_cost == "draft_model" else "target"
    return UserError(f"does not fit: the {dtype} {what} over {devices} accelerator{'s' if devices > 1 else ''} "
                     f"{short}; give more --num-devices or a smaller --dtype", field="--model-params")


def _dump(result: dict[str, Any], fmt: Fmt) -> str:
    if fmt is Fmt.yaml:
        import yaml

        return str(yaml.safe_dump(result, sort_keys=False, allow_unicode=True))
    import json

    return json.dumps(result, indent=2) + "\n"

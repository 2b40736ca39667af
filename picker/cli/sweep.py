"""`specpick sweep`: the oracle -- every grid point measured on the reference engine, at a stated cost.

    $ specpick sweep --model zoo --tasks code,chat --temperatures 0,1 --out runs/sweep
    $ specpick sweep --model zoo --workload profiles/chat-70b-h100.yaml --out runs/sweep --resume

Writes the profiler's files (``records.jsonl``, ``summary.json``, ``run.json``) with sequential
stopping off, plus ``verify_curve.jsonl`` (verify seconds against tokens in flight, which stands
in for batch size on this batch-1 engine) and ``sweep.json`` (the grid and what it cost).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from picker.cli.common import user_errors
from picker.errors import UserError
from picker.profiler.options import (
    parse_artifacts,
    parse_concurrency,
    parse_draft_lengths,
    parse_list,
    parse_temperatures,
    unfilled_levels,
)
from picker.profiler.options import prompts_by_task as _prompts
from picker.profiler.options import resolve_model as _resolve_model
from picker.profiler.options import workload_defaults as _workload_defaults

if TYPE_CHECKING:
    from picker.engine.plugins import StrategyPlugin

DEFAULT_STRATEGIES = "ngram,vanilla,lookahead,medusa,eagle3"


def parse_trees(text: str) -> list[tuple[int, int, int]]:
    """``5x4x8,4x2x8`` → [(5, 4, 8), (4, 2, 8)] (depth x topk x verified tokens incl. the root)."""
    out = []
    for item in parse_list(text, "--trees"):
        try:
            depth, topk, tokens = (int(x) for x in item.lower().split("x"))
        except ValueError:
            raise UserError(f"expected DEPTHxTOPKxTOKENS, got {item!r}", field="--trees") from None
        if not (depth >= 1 and topk >= 2 and depth + 1 < tokens <= depth * topk + 1):
            raise UserError(f"{item!r}: need topk >= 2 and depth + 1 < tokens <= depth * topk + 1", field="--trees")
        out.append((depth, topk, tokens))
    return out


@user_errors
def sweep(
    out: Annotated[Path, typer.Option(
        help="Run folder (records.jsonl, summary.json, verify_curve.jsonl, sweep.json).")],
    model: Annotated[str, typer.Option(help="'zoo' (zoo:ci, zoo:small) or a local HF folder.")] = "zoo",
    strategies: Annotated[str, typer.Option(help="Comma list of strategies.")] = DEFAULT_STRATEGIES,
    artifact: Annotated[list[str] | None, typer.Option(help="STRATEGY=PATH: a draft model or heads folder.")] = None,
    tasks: Annotated[str | None, typer.Option(
        help="Comma list of task types (default: the workload's, else all).")] = None,
    workload: Annotated[Path | None, typer.Option(help="Workload profile: its task types and temperatures.")] = None,
    temperatures: Annotated[str | None, typer.Option(help="Comma list (default: the workload's, else 0,1).")] = None,
    chain_lengths: Annotated[str, typer.Option(help="Chain lengths N: A-B or a list.")] = "1-6,8",
    trees: Annotated[str, typer.Option(help="Trees for tree-capable strategies: DEPTHxTOPKxTOKENS,...")] =
    "3x2x6,4x2x8,5x4x8,4x4x12,6x4x16",
    prompts_per_task: Annotated[int, typer.Option(help="Prompts per task type (every cell runs all).", min=1)] = 8,
    max_new_tokens: Annotated[int, typer.Option(min=1, max=4096)] = 48,
    concurrency: Annotated[str, typer.Option(help="Requests in flight: N or a list, e.g. 1,4 (every grid point "
                                                  "at each level, against plain decoding at that level).")] = "1",
    wave_rounds: Annotated[int, typer.Option(
        help="At concurrency C, serve C x this many prompts per wave, a finished request replaced by the next "
             "(closed loop); the wave's drain, when rows empty one by one, then weighs about 1/this.",
        min=1, max=64)] = 1,
    curve: Annotated[bool, typer.Option(help="Measure verify time against tokens in flight.")] = True,
    curve_repeats: Annotated[int, typer.Option(help="Timings per (tokens in flight, context); the fastest counts.",
                                               min=1, max=200)] = 15,
    resume: Annotated[bool, typer.Option(help="Continue the sweep in OUT.")] = False,
    threads: Annotated[int, typer.Option(help="CPU threads (1 times best on shared CPUs).", min=0)] = 1,
    device: Annotated[str, typer.Option(help="cpu, cuda, cuda:1, ... (where the models load).")] = "cpu",
    seed: Annotated[int, typer.Option()] = 0,
    quiet: Annotated[bool, typer.Option(help="No progress output.")] = False,
) -> None:
    """Measure every grid point (strategy x N x tree x temperature) on the reference engine."""
    from picker.engine.plugins import load_strategies
    from picker.inputs.verify_curve import CURVE_NAME
    from picker.profiler.progress import RichProgress
    from picker.profiler.run import ProfileConfig, Profiler
    from picker.profiler.stopping import StopRule
    from picker.profiler.sweep import SweepSource, check_grid, measure_verify_curve, sweep_grid, write_sweep_file

    wl_tasks, wl_temps = _workload_defaults(workload)
    task_list = parse_list(tasks, "--tasks") if tasks else wl_tasks
    temps = parse_temperatures(temperatures) if temperatures else (wl_temps or [0.0, 1.0])
    chosen = parse_list(strategies, "--strategies")
    plugins = load_strategies()
    unknown = [s for s in chosen if s not in plugins]
    if unknown:
        raise UserError(f"not registered: {', '.join(unknown)}", field="--strategies")
    target, found = _resolve_model(model, parse_artifacts(artifact or []))
    runnable = [s for s in chosen if plugins[s].capabilities.artifact is None or s in found]
    skipped = sorted(set(chosen) - set(runnable))
    grid = sweep_grid({s: plugins[s].capabilities for s in runnable}, parse_draft_lengths(chain_lengths),
                      parse_trees(trees), _artifact_depths(runnable, found, plugins))
    check_grid(grid)
    levels = parse_concurrency(concurrency, default=1)
    by_task = _prompts("builtin", task_list, prompts_per_task, "", seed)
    # Said once the run is done, so that a run failing on bad input still ends in one error line.
    unfilled = unfilled_levels(levels, by_task)
    source = SweepSource(target, found, device=device, threads=threads, grid=grid)
    config = ProfileConfig(
        out=out, tasks=list(by_task), temperatures=temps, strategies=runnable, num_draft_tokens=[1],
        max_new_tokens=max_new_tokens, limit_per_task=prompts_per_task,
        rule=StopRule(ci_target=0.0, min_samples=2, early=False), seed=seed, resume=resume, plain=True, plot=False,
        concurrency=levels, wave_rounds=wave_rounds,
        meta={"concurrency": levels, "backend": "torch", "target": model, "target_path": str(target),
              "prompts": "builtin", "kind": "sweep",
              "tasks": list(by_task),
              "temperatures": temps, "strategies": runnable, "skipped_strategies": skipped,
              "prompts_per_task": prompts_per_task})
    progress = RichProgress("quiet" if quiet else None)
    profiler = Profiler(source, by_task, config, progress)
    points = []
    if curve:  # first: it is short, and a resumed sweep finds it done
        points = measure_verify_curve(source.target, out / CURVE_NAME, repeats=curve_repeats)
    try:
        with progress:
            profiler.run()
    except KeyboardInterrupt:
        typer.echo(f"interrupted: continue with --resume (records kept in {out / 'records.jsonl'})", err=True)
        raise typer.Exit(code=130) from None
    if unfilled is not None:
        typer.echo(f"warning: {unfilled}", err=True)
    data = write_sweep_file(out, grid, {"model": model, "tasks": list(by_task), "temperatures": temps,
                                         "skipped_strategies": skipped, "max_new_tokens": max_new_tokens,
                                         "concurrency": levels}, points)
    cost = data["cost"]
    typer.echo(f"sweep: {len(grid)} grid points x {len(by_task)} tasks x {len(temps)} temperatures; "
               f"cost {cost['target_forwards']} target forwards, {cost['seconds']:.1f} s "
               f"(+ verify curve {cost['verify_curve']['forwards']} forwards); {out / 'sweep.json'}")
    if skipped:
        typer.echo(f"skipped (no artifact): {', '.join(skipped)}", err=True)


def _artifact_depths(names: list[str], found: dict[str, Path], plugins: dict[str, StrategyPlugin]) -> dict[str, int]:
    """The deepest draft each strategy's artifact allows, where its plugin declares a hook that knows.

    Medusa heads draft no deeper than the number of heads the folder holds.
    """
    out = {}
    for name in names:
        depth = plugins[name].max_depth(found[name]) if name in found else None
        if depth:
            out[name] = depth
    return out

"""`specpick calibrate`: time forwards on this machine and fit the load curve's engine constants.

    $ specpick calibrate --out cal.json                                   # CUDA, a random llama-3.2-1b
    $ specpick calibrate --model /path/to/hf-model --hardware h100-sxm --out cal.json
    $ specpick calibrate --model zoo --draft zoo --eagle3 zoo --medusa zoo --forward reference \\
          --device cpu --hardware cpu --batches 1,2,4,8,16 --tokens 1,2,3,5,9,17 --contexts 64,128,256,512 \\
          --out cal.json                                                   # the reference loop on a CPU
    $ specpick recommend PROFILE --calibration cal.json

For every (batch B, new tokens per sequence k, context L) it prefills B random sequences of L tokens
and times one forward of B × k new tokens against that cache (what verifying k - 1 drafts plus the
pending token costs); the median of ``--repeats`` timings after ``--warmup`` is one point.
``policies.calibration.fit_engine_constants`` fits bandwidth efficiency, FLOP efficiency and the fixed
per-forward time (an efficiency only from points its term sets: eager launches on a GPU set none).
``--forward reference`` times the reference engine's own batched verify forward instead, and the
loop's own costs from ``serve()`` (host work per sequence, what a speculative step adds, the n-gram
lookup; with ``--draft`` / ``--eagle3`` / ``--medusa`` each drafter's host work). The file is
engine ``hf``: applied to it, every constant carries; applied to another engine, only the GPU's
efficiencies do (``policies.calibration.calibration_for``). Bad input: one ``error:`` line, exit 2.
"""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from picker.cli.common import check_outputs, user_errors, write_output
from picker.cli.generate import Dtype
from picker.errors import UserError, UserErrors


class Forward(str, Enum):
    hf = "hf"
    reference = "reference"


def _ints(text: str, field: str, problems: list[UserError]) -> tuple[int, ...]:
    """A comma list of positive integers; a bad one adds its problem to ``problems``."""
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        values = ()
    if not values or min(values) < 1:
        problems.append(UserError(f"a comma list of positive integers, got {text!r}", field=field))
    return values


def _artifact(spec: str | None, kind: str, field: str, zoo_artifacts: dict[str, Path]) -> Path | None:
    """A folder, or ``zoo``: the zoo build's own (``--model zoo`` only)."""
    if spec is None:
        return None
    if spec == "zoo":
        if kind not in zoo_artifacts:
            raise UserError("'zoo' needs --model zoo", field=field)
        return zoo_artifacts[kind]
    path = Path(spec).expanduser()
    if not (path / "config.json").is_file():
        raise UserError("not a model or heads folder (no config.json)", file=str(path), field=field)
    return path


@user_errors
def calibrate(
    out: Annotated[Path, typer.Option(help="The calibration file to write (JSON).")],
    model: Annotated[str | None, typer.Option(
        help="'zoo' or a local Hugging Face folder; default: a random-weight Llama of --shape.")] = None,
    shape: Annotated[str, typer.Option(help="Published shape of the random-weight model (without --model).")] =
    "llama-3.2-1b",
    device: Annotated[str, typer.Option(help="cuda, cuda:1, ... or cpu.")] = "cuda",
    dtype: Annotated[Dtype | None, typer.Option(help="Default: bfloat16 on CUDA, float32 on CPU.")] = None,
    hardware: Annotated[str | None, typer.Option(help="Hardware catalog name; guessed from the GPU's name.")] = None,
    batches: Annotated[str, typer.Option(help="Comma list of batch sizes.")] = "1,2,4,8,16,32,64,128",
    tokens: Annotated[str, typer.Option(help="Comma list of new tokens per sequence.")] = "1,2,4,8,16",
    contexts: Annotated[str, typer.Option(help="Comma list of cached tokens per sequence.")] = "512,2048",
    repeats: Annotated[int, typer.Option(min=1, max=1000)] = 5,
    warmup: Annotated[int, typer.Option(min=0, max=1000)] = 2,
    seed: Annotated[int, typer.Option(min=0)] = 0,
    threads: Annotated[int, typer.Option(help="CPU threads for torch (1 times best on a busy machine).", min=1)] = 1,
    forward: Annotated[Forward, typer.Option(
        help="hf: transformers' forward with a DynamicCache; reference: the reference engine's verify forward "
             "and its loop's own costs.")] = Forward.hf,
    draft: Annotated[str | None, typer.Option(help="With --forward reference: a draft model folder (or zoo).")] = None,
    eagle3: Annotated[str | None, typer.Option(help="With --forward reference: an EAGLE-3 head folder (or zoo).")] =
    None,
    medusa: Annotated[str | None, typer.Option(help="With --forward reference: a Medusa heads folder (or zoo).")] =
    None,
    loop_tokens: Annotated[int, typer.Option(help="New tokens per sequence of the serve() runs that time the loop.",
                                             min=1, max=4096)] = 16,
    quiet: Annotated[bool, typer.Option(help="No progress output.")] = False,
) -> None:
    """Time forwards on this machine and fit the load curve's engine constants to them."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from picker.calibrate.options import CalibrateOptions
    from picker.calibrate.run import calibrate as run_calibration

    check_outputs(out=out)  # any name: the file is always JSON
    problems: list[UserError] = []
    grid = (_ints(batches, "--batches", problems), _ints(tokens, "--tokens", problems),
            _ints(contexts, "--contexts", problems))
    if problems:
        raise problems[0] if len(problems) == 1 else UserErrors(problems)
    folder, found = None, {}
    if model is not None:
        from picker.zoo.resolve import resolve_target

        folder, found, _ = resolve_target(model)
    opts = CalibrateOptions(
        model=folder, shape=shape, device=device, dtype=None if dtype is None else dtype.value, hardware=hardware,
        batches=grid[0], tokens=grid[1], contexts=grid[2], repeats=repeats, warmup=warmup, seed=seed,
        threads=threads, forward=forward.value, draft=_artifact(draft, "draft_model", "--draft", found),
        eagle3=_artifact(eagle3, "eagle3_head", "--eagle3", found),
        medusa=_artifact(medusa, "medusa_heads", "--medusa", found), loop_tokens=loop_tokens)
    console = Console(stderr=True)
    bars = Progress(TextColumn("calibrate"), BarColumn(), MofNCompleteColumn(), TextColumn("ETA"),
                    TimeRemainingColumn(), console=console, disable=quiet or not console.is_terminal)
    with bars:
        task = bars.add_task("grid", total=len(opts.grid))
        cal = run_calibration(opts, say=(lambda line: None) if quiet else (lambda line: console.print(line)),
                              advance=lambda: bars.advance(task))
    write_output(json.dumps(cal.model_dump(), indent=2) + "\n", out)
    typer.echo(json.dumps({"constants": cal.constants.model_dump(exclude_none=True),
                           "fit": cal.fit.model_dump()}, indent=2))

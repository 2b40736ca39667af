"""`specpick check-load`: the load curve's predictions against a profile run's measured curves.

    $ specpick check-load RUN --calibration cal.json --draft ZOO/draft     # the load curve vs your curve
    $ specpick check-load RUN --against RUN2                              # two runs of one command: the noise floor

``RUN`` is a ``specpick profile ... --concurrency 1,2,4,8,16`` folder. With ``--calibration`` (a
``specpick calibrate`` file of the same target) each measured curve is predicted from its smallest
level (``picker.profiler.load_check``); with ``--against`` a second run of the same command is scored
as the "prediction" in both directions, the floor no cost model can beat on that machine. Prints a
markdown table and the summary lines; ``--json`` also writes every check. Bad input: one ``error:``
line each, exit 2.
"""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from picker.cli.common import user_errors, write_output
from picker.errors import UserError


class Pricing(str, Enum):
    """How the run's waves are priced (``picker.profiler.load_check.Pricing``)."""

    waves = "waves"
    mean_steps = "mean-steps"
    decode_only = "decode-only"


@user_errors
def check_load(
    run: Annotated[list[Path], typer.Argument(help="`specpick profile --concurrency ...` run folder(s).")],
    calibration: Annotated[Path | None, typer.Option(
        help="`specpick calibrate` file of the run's target: the load curve's constants.")] = None,
    draft: Annotated[Path | None, typer.Option(help="The draft model's folder (runs with a draft model).")] = None,
    engine: Annotated[str, typer.Option(help="Engine curve the run is priced on (hf: the reference loop).")] = "hf",
    hardware: Annotated[str, typer.Option(help="Hardware catalog name of the machine the run was measured on.")] =
    "cpu",
    pricing: Annotated[Pricing, typer.Option(
        help="waves: as the profiler served them; mean-steps: every request at the mean; decode-only: no "
             "prefill, fixed context.")] = Pricing.waves,
    strategies: Annotated[str | None, typer.Option(help="Comma list: check only these strategies' curves.")] = None,
    against: Annotated[Path | None, typer.Option(
        help="A second run of the same profile command: score each run as the other's prediction instead.")] = None,
    raw: Annotated[bool, typer.Option(help="With --against: no anchoring at the smallest level.")] = False,
    json_out: Annotated[Path | None, typer.Option("--json", help="Also write the checks as JSON here.")] = None,
) -> None:
    """Check the load curve's predicted gains against a profile run's measured ones."""
    from picker.profiler.load_check import check_runs, format_checks

    if json_out is not None and json_out.suffix.lower() != ".json":
        raise UserError("the checks are written as JSON; name the file .json", file=str(json_out), field="--json")
    if against is not None:
        if len(run) != 1:
            raise UserError("--against compares one run with one other; give one RUN", field="RUN")
        text, doc = _replicates(run[0], against, anchor=not raw)
    else:
        if calibration is None:
            raise UserError("required: the `specpick calibrate` file of the run's target (or --against RUN2)",
                            field="--calibration")
        only = {s.strip() for s in strategies.split(",") if s.strip()} if strategies else None
        checks = check_runs(run, calibration, draft, engine, hardware, pricing.value, only)  # type: ignore[arg-type]
        text, doc = format_checks(checks), [c.as_json() for c in checks]
    typer.echo(text, nl=False)
    if json_out is not None:
        write_output(json.dumps(doc, indent=1) + "\n", json_out)


def _replicates(first: Path, second: Path, anchor: bool) -> tuple[str, dict[str, list[dict[str, Any]]]]:
    """Each run scored as the other's prediction: the printed sections and their JSON."""
    from picker.profiler.load_check import compare_runs, curves, format_checks

    a, b = curves(first), curves(second)
    both = {"A from B": compare_runs(a, b, anchor), "B from A": compare_runs(b, a, anchor)}
    how = "anchored at the smallest level" if anchor else "raw"
    text = "".join(f"\n## {name} ({how})\n\n" + format_checks(checks) for name, checks in both.items())
    return text, {name: [c.as_json() for c in checks] for name, checks in both.items()}

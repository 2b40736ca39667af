"""`specpick recommend`: a workload profile in, a speculative-decoding plan out.

    $ specpick recommend profiles/chat-70b-h100.yaml --format json
    $ specpick recommend PROFILE --measurements runs/zoo/summary.json --explain --plot explain.png
    $ specpick recommend PROFILE --calibration cal.json      # load-curve constants from specpick calibrate

A measurements file with cells at several concurrency levels (``specpick profile --concurrency
1,2,4``) prices the measured configurations' steps inside the measured range from the measured
gain (``picker.recommend.measured_load``); ``--calibration`` replaces load-curve constants
(``policies.calibration_for``). Both are stated in the plan.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from picker.cli.common import Fmt, check_outputs, user_errors, write_output


@user_errors
def recommend(
    profile: Annotated[Path, typer.Argument(help="Workload profile YAML (see profiles/).")],
    measurements: Annotated[Path | None, typer.Option(help="Profiler summary.json with measured acceptance.")] = None,
    fmt: Annotated[Fmt, typer.Option("--format", help="Output format.")] = Fmt.md,
    out: Annotated[Path | None, typer.Option(help="Write here instead of stdout.")] = None,
    explain: Annotated[bool, typer.Option(
        help="Add the top candidates per task type with ranges and evidence.")] = False,
    policy: Annotated[Path | None, typer.Option(
        help="Fitted policy artifact (JSON) for the learned correction.")] = None,
    plot: Annotated[Path | None, typer.Option(help="Write a PNG of predicted speedup vs N and vs batch size.")] = None,
    allow_other_model: Annotated[bool, typer.Option(help="Use measurements of another model (labelled so).")] = False,
    calibration: Annotated[Path | None, typer.Option(
        help="Load-curve calibration JSON from a GPU run (specpick calibrate).")] = None,
) -> None:
    """Recommend a speculative-decoding setting for a workload, with engine configs and a rollout."""
    check_outputs(out=out, fmt=fmt, plot=plot)  # a bad --out / --plot is refused before any work
    from picker.recommend.pipeline import load_inputs, recommend_inputs
    from picker.recommend.render import render_result

    inputs = load_inputs(profile, measurements, policy=policy, calibration=calibration,
                         allow_other_model=allow_other_model)
    result = recommend_inputs(inputs)
    said = []
    if plot is not None:
        from picker.recommend.explain import plot as draw

        said.append(f"plot written to {plot}" if draw(plot, result) else
                    "no plot drawn (no strategy chosen, or no matplotlib)")
    section = explain or policy is not None or plot is not None
    write_output(render_result(result, fmt.value, explain=explain, section=section, notes=said), out)

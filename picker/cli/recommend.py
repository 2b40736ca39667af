"""`specpick recommend`: a workload profile in, a speculative-decoding plan out.

    $ specpick recommend profiles/chat-70b-h100.yaml --format json
    $ specpick recommend PROFILE --measurements runs/zoo/summary.json --explain --plot explain.png
    $ specpick recommend PROFILE --calibration cal.json      # load-curve constants from scripts/gpu_calibrate.py

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
    explain: Annotated[bool, typer.Option(help="Add the top candidates per task type with ranges and evidence.")] = False,
    policy: Annotated[Path | None, typer.Option(help="Fitted policy artifact (JSON) for the learned correction.")] = None,
    plot: Annotated[Path | None, typer.Option(help="Write a PNG of predicted speedup vs N and vs batch size.")] = None,
    allow_other_model: Annotated[bool, typer.Option(help="Use measurements of another model (labelled so).")] = False,
    calibration: Annotated[Path | None, typer.Option(
        help="Load-curve calibration JSON from a GPU run (scripts/gpu_calibrate.py).")] = None,
) -> None:
    """Recommend a speculative-decoding setting for a workload, with engine configs and a rollout."""
    check_outputs(out=out, fmt=fmt, plot=plot)  # a bad --out / --plot is refused before any work
    from picker.inputs.measurements import load_measurements
    from picker.inputs.workload import load_profile
    from picker.recommend.pipeline import recommend as build
    from picker.recommend.render import render

    prof = load_profile(profile)
    meas = load_measurements(measurements) if measurements is not None else None
    if meas is not None:  # refuse another model's measurements unless overridden (picker.inputs.provenance)
        from picker.inputs.provenance import check_measurements

        check_measurements(meas, prof, allow_other_model)
    cal = None
    if calibration is not None:
        from policies import calibration_for

        cal = calibration_for(calibration, prof.engine.name, prof.hardware.gpu)
    if explain or policy is not None or plot is not None:
        from picker.recommend.explain import recommend_command

        write_output(recommend_command(prof, meas, measurements, policy, explain, plot, fmt.value, str(profile),
                                       calibration=cal), out)
        return
    from picker.inputs.verify_curve import verify_curve_beside

    # The sweep's verify curve beside the measurements, as --explain, --policy and report read it.
    write_output(render(build(prof, meas, path=str(profile), calibration=cal,
                              verify_curve=verify_curve_beside(measurements)), fmt.value), out)

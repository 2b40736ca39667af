"""`specpick report`: the plan as one self-contained HTML page (``picker.recommend.report``).

    $ specpick report profiles/chat-70b-h100.yaml --out chat.html
    $ specpick report profiles/code-assistant-8b-a100.yaml --measurements runs/zoo/summary.json \\
          --allow-other-model --out code.html

Registered in ``picker.cli.main`` with ``app.command("report")(report.report)``; this module does
not import ``main`` (so main may import it). Bad input: one ``error:`` line, exit code 2, and no
page written (the page is written to a temporary file and renamed into place).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from picker.cli.common import check_outputs, user_errors, write_output


def build_page(profile: Path, measurements: Path | None = None, policy: Path | None = None,
               calibration: Path | None = None, allow_other_model: bool = False) -> str:
    """The HTML page for ``profile`` (and the optional inputs), as ``specpick report`` writes it."""
    from picker.recommend.pipeline import load_inputs, recommend_inputs
    from picker.recommend.report import html_page

    inputs = load_inputs(profile, measurements, policy=policy, calibration=calibration,
                         allow_other_model=allow_other_model)
    return html_page(recommend_inputs(inputs))


@user_errors
def report(
    profile: Annotated[Path, typer.Argument(help="Workload profile YAML (see profiles/).")],
    out: Annotated[Path, typer.Option(help="The HTML file to write.")],
    measurements: Annotated[Path | None, typer.Option(help="Profiler summary.json with measured acceptance.")] = None,
    policy: Annotated[Path | None, typer.Option(
        help="Fitted policy artifact (JSON) for the learned correction.")] = None,
    calibration: Annotated[Path | None, typer.Option(
        help="Roofline calibration JSON from a GPU run (specpick calibrate).")] = None,
    allow_other_model: Annotated[bool, typer.Option(help="Use measurements of another model (labelled so).")] = False,
) -> None:
    """Write the recommendation as one self-contained HTML page: decision, plots, configs, evidence."""
    check_outputs(out=out, fmt="html")  # a bad --out is refused before any work
    page = build_page(profile, measurements, policy, calibration, allow_other_model)
    write_output(page, out)
    typer.echo(f"wrote {out} ({len(page.encode('utf-8')) / 1024:.0f} KiB)")

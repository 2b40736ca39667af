"""``specpick zoo``: build the project's own tiny models and show what they measure.

    $ specpick zoo build --size ci
    $ specpick zoo build --size small --out ./zoo-small
    $ specpick zoo path --size ci

The lead mounts this sub-app with ``app.add_typer(zoo.cli.app, name="zoo")``; torch is imported only
inside the commands.
"""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from picker.errors import UserError

if TYPE_CHECKING:  # rich is imported when a command runs: `specpick` mounts this app at start-up
    from rich.table import Table

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="Train and cache the tiny target/draft models used by tests and demos.")


class Size(str, Enum):
    ci = "ci"
    small = "small"


SizeOpt = Annotated[
    Size, typer.Option("--size", help="ci builds in ~3 min, small in ~10 min (one idle core).")
]
OutOpt = Annotated[
    Path | None, typer.Option("--out", help="Build folder (default: cache dir by recipe hash).")
]


def _fail(exc: UserError) -> typer.Exit:
    typer.echo(f"error: {exc}", err=True)
    return typer.Exit(code=UserError.exit_code)


@app.command()
def build(size: SizeOpt = Size.ci, out: OutOpt = None,
          quiet: Annotated[bool, typer.Option("--quiet", help="No progress bars.")] = False) -> None:
    """Build the zoo (a no-op when the same recipe is already built) and print its report."""
    from picker.zoo.build import build_zoo

    try:
        paths = build_zoo(size.value, out=out, progress=not quiet)
    except UserError as exc:
        raise _fail(exc) from None
    from rich.console import Console

    console = Console()
    console.print(report_table(json.loads(paths.report.read_text())))
    for line in heads_lines(paths.root):
        console.print(line)
    typer.echo(str(paths.root))


def heads_lines(root: Path) -> list[str]:
    """One line per trained head artifact in the build: its steps, CPU seconds and accuracy."""
    lines = []
    for recipe in sorted(root.glob("*/recipe.json")):
        rec = json.loads(recipe.read_text())
        rep, cpu = rec.get("report", {}), rec.get("cpu_seconds", {})
        acc = rep.get("depth_accuracy") or [row[0] for row in rep.get("accuracy", [])]
        shown = " ".join(f"{a:.2f}" for a in acc)
        lines.append(f"{recipe.parent.name}: {rec['recipe']['steps'].get(recipe.parent.name, 0)} steps, "
                     f"{cpu.get('data', 0) + cpu.get('train', 0):.0f} CPU s (shared distillation data "
                     f"{cpu.get('data', 0):.0f} s); held-out top-1 accuracy per depth: {shown}")
    return lines


@app.command()
def path(size: SizeOpt = Size.ci) -> None:
    """Print the folder a build of this size goes to (built or not)."""
    from picker.zoo.build import zoo_path

    typer.echo(str(zoo_path(size.value).root))


def report_table(report: dict[str, Any]) -> Table:
    """Held-out loss, agreement per domain, then sizes and costs, as one rich table."""
    from rich.table import Table

    params = report["params"]
    table = Table(title=f"zoo {report['size']} ({report['recipe_hash']})")
    for col in ("domain", "target loss", "draft loss", "greedy agree", "α (T=1)"):
        table.add_column(col, justify="right" if col != "domain" else "left")
    for d, t_loss in report["heldout_loss"]["target"].items():
        agree = report["agreement"][d]
        table.add_row(d, f"{t_loss:.3f}", f"{report['heldout_loss']['draft'][d]:.3f}",
                      f"{agree['greedy_agreement']:.3f}", f"{agree['alpha_t1']:.3f}")
    costs, secs = report["costs"], report["seconds"]
    table.caption = (
        f"params target {params['target']:,} / draft {params['draft']:,} "
        f"({params['target_over_draft']}x) · 6-vs-1 forward {costs['six_vs_one']:.2f}x · "
        f"draft/target cost {costs['draft_vs_target']:.2f} · "
        f"build {secs['wall']['total']:.0f}s wall, {secs['cpu']['total']:.0f}s CPU"
    )
    return table


if __name__ == "__main__":  # python -m picker.zoo.cli build --size ci
    app()

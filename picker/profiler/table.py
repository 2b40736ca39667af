"""The profile summary as a rich table on stdout (what `specpick profile` prints at the end).

    >>> print_summary({"cells": [], "baselines": [], "totals": {"target_forwards": 0, "seconds": 0.0}})
    no cells measured
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.table import Table


def _f(x: float | None, fmt: str = ".3f") -> str:
    return "-" if x is None else format(x, fmt)


def print_summary(summary: Mapping[str, Any], console: Console | None = None) -> None:
    """One row per cell: α with its interval, τ, c, speed and the forwards it cost."""
    # A log file is not a terminal: give the table room instead of wrapping every cell.
    console = console or Console(width=None if Console().is_terminal else 200)
    cells = summary.get("cells", [])
    if not cells:
        console.print("no cells measured")
        return
    table = Table(title="acceptance by task type x strategy x temperature", title_justify="left")
    left = ("task", "strategy", "per position", "stopped")
    loaded = any(c.get("concurrency", 1) != 1 for c in cells)  # a column only when some level is not 1
    for name in ("task", "strategy", "T", *(("C",) if loaded else ()), "N", "alpha", "95% CI", "a_iid",
                 "per position", "tau", "c", "tok/s", "x plain", "n", "fwd", "stopped"):
        table.add_column(name, justify="left" if name in left else "right", no_wrap=True)
    for c in cells:
        lo, hi = c["alpha_ci"]
        per = " ".join(_f(p, ".2f") for p in (c.get("per_position") or [])[:4])
        level = (str(c.get("concurrency", 1)),) if loaded else ()
        table.add_row(c["task"], c["strategy"], f"{c['temperature']:g}", *level, c["tree"] or str(c["num_draft_tokens"]),
                      f"{c['alpha']:.3f}", f"{lo:.2f}-{hi:.2f}", _f(c.get("alpha_iid")), per,
                      _f(c.get("tau"), ".2f"), _f(c.get("cost_ratio"), ".2f"), _f(c.get("tokens_per_second"), ".0f"),
                      _f(c.get("speedup_vs_plain"), ".2f"), str(c["samples"]), str(c["target_forwards"]),
                      c.get("stopped") or "")
    console.print(table)
    totals = summary.get("totals", {})
    formats = sorted({str(c["prompt_format"]) for c in cells if c.get("prompt_format")})
    rendered = f"   prompts: {', '.join(formats)}" if formats else ""
    console.print(f"target forwards: {totals.get('target_forwards', 0)}   seconds: {totals.get('seconds', 0.0)}"
                  f"{rendered}")

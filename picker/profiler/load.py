"""Speculation under load: the gain over plain decoding against concurrency, and where it crosses 1.

A profile run with several ``--concurrency`` levels measures every cell at each level against plain
decoding at the same level. This module reads those cells back as one curve per (task, strategy,
draft shape, temperature) and finds the crossover, the concurrency from which the gain stays at or
below 1 (interpolated linearly in log C between the two measured levels around its last fall
through 1, never extrapolated).

    >>> crossover([(1, 1.6), (4, 1.2), (16, 0.8)])
    8.0
    >>> crossover([(1, 1.6), (16, 1.1)]) is None, crossover([(1, 0.9), (4, 0.7)])
    (True, 1.0)
    >>> crossover([(1, 0.28), (2, 1.05), (8, 1.16), (16, 0.66)])   # rises above 1, then falls
    9.99
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def _gain(cell: Mapping[str, Any]) -> float | None:
    """Throughput gain where the waves were timed, else the per-request speed-up (equal at C = 1)."""
    g = cell.get("throughput_gain_vs_plain")
    return g if g is not None else cell.get("speedup_vs_plain")


def crossover(points: Sequence[tuple[int, float]]) -> float | None:
    """The concurrency from which the gain stays at or below 1; ``points`` sorted by level.

    The last fall through 1: a curve below 1 at its first level that rises above it later (vLLM's
    CPU build ran prompt lookup at 0.28x plain at C = 1, 1.05-1.31x at C = 2-8, 0.66x at C = 16)
    crosses where it falls back, not at its first level. The lowest level when the gain is at or
    below 1 everywhere; None when it ends above 1 (the curve says nothing beyond its last point).
    """
    if not points or points[-1][1] > 1.0:
        return None
    above = [i for i, (_, g) in enumerate(points) if g > 1.0]
    if not above:
        return float(points[0][0])
    (c0, g0), (c1, g1) = points[above[-1]], points[above[-1] + 1]
    w = (g0 - 1.0) / (g0 - g1)
    return round(math.exp(math.log(c0) + w * (math.log(c1) - math.log(c0))), 2)


def _note(points: Sequence[tuple[int, float]], x: float | None) -> str:
    """The crossover in words, naming lower levels that were at or below 1 too."""
    low = [c for c, g in points if g <= 1.0 and (x is None or c < x)]
    also = f"; also <= 1 at concurrency {', '.join(map(str, low))}" if low else ""
    if x is None:
        return f"none up to {points[-1][0]}{also}"
    return f"gain <= 1 from concurrency {x:g}{also}"


def load_curves(cells: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One curve per (task, temperature, strategy, N, tree) measured at two or more levels."""
    groups: dict[tuple[Any, ...], list[tuple[int, float]]] = defaultdict(list)
    for c in cells:
        g = _gain(c)
        if g is not None:
            key = (c["task"], c["temperature"], c["strategy"], c.get("num_draft_tokens"), c.get("tree"))
            groups[key].append((int(c.get("concurrency", 1)), float(g)))
    out = []
    for (task, temp, strategy, n, tree), pts in sorted(groups.items(), key=lambda kv: str(kv[0])):
        pts.sort()
        if len(pts) < 2:
            continue
        x = crossover(pts)
        out.append({"task": task, "temperature": temp, "strategy": strategy, "num_draft_tokens": n, "tree": tree,
                    "gain": [[c, round(g, 4)] for c, g in pts], "crossover": x,
                    "crossover_note": _note(pts, x)})
    return out


def print_load_table(summary: Mapping[str, Any], console: Any = None) -> None:
    """Gain against concurrency, one row per curve, and the crossover."""
    from rich.console import Console
    from rich.table import Table

    curves = summary.get("load") or []
    if not curves:
        return
    console = console or Console(width=None if Console().is_terminal else 200)
    levels = sorted({c for cur in curves for c, _ in cur["gain"]})
    table = Table(title="throughput gain over plain decoding against concurrency (same concurrency)",
                  title_justify="left")
    for name in ("task", "strategy", "T", "N", *(f"C={c}" for c in levels), "crosses 1"):
        table.add_column(name, justify="left" if name in ("task", "strategy", "crosses 1") else "right")
    for cur in curves:
        by = dict(cur["gain"])
        table.add_row(cur["task"], cur["strategy"], f"{cur['temperature']:g}",
                      cur["tree"] or str(cur["num_draft_tokens"]),
                      *("-" if c not in by else f"{by[c]:.2f}" for c in levels), cur["crossover_note"])
    console.print(table)


def plot_gain(summary: Mapping[str, Any], out: Path) -> bool:
    """A PNG of gain against concurrency, one panel per temperature, the crossover marked."""
    curves = summary.get("load") or []
    if not curves:
        return False
    from picker.profiler.plot import pyplot, save

    plt = pyplot()
    if plt is None:
        return False
    temps = sorted({c["temperature"] for c in curves})
    fig, axes = plt.subplots(len(temps), 1, figsize=(7.5, 3.4 * len(temps)), squeeze=False)
    for ax, temp in zip(axes[:, 0], temps):
        for cur in (c for c in curves if c["temperature"] == temp):
            xs, ys = zip(*cur["gain"])
            label = f"{cur['task']} {cur['strategy']} {cur['tree'] or 'N=' + str(cur['num_draft_tokens'])}"
            (line,) = ax.plot(xs, ys, marker="o", label=label)
            if cur["crossover"] is not None:
                ax.plot([cur["crossover"]], [1.0], marker="X", markersize=11, color=line.get_color())
        ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrency (requests in flight)")
        ax.set_ylabel("gain over plain")
        ax.set_title(f"temperature {temp:g}   (X: gain crosses 1)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.005, 1.0))
    return save(fig, out)

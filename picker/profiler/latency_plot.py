"""A PNG of p99 ITL and mean TPOT against load, plain decoding beside each strategy.

One row per task and temperature; left p99 inter-token latency, right mean TPOT; x is concurrency
(closed loop) or the offered request rate (open loop: rows of their own when a run has both). Plain
decoding is the dashed line of each task, so a configuration whose mean TPOT falls while its p99 ITL
rises (every rejected draft costs a whole draft + verify step) shows as lines crossing in opposite
directions.

    >>> import tempfile, pathlib
    >>> cell = {"task": "code", "strategy": "ngram", "temperature": 0.0, "num_draft_tokens": 4, "tree": None,
    ...         "concurrency": 1, "itl_ms_p99": 30.0, "tpot_ms_mean": 9.0}
    >>> base = {**cell, "strategy": "plain", "itl_ms_p99": 12.0, "tpot_ms_mean": 12.0}
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "latency.png"
    >>> plot_latency({"cells": [cell], "baselines": [base]}, out) in (True, False)
    True
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

Panel = tuple[str, float, str]  # (axis, temperature, task)


def series(summary: Mapping[str, Any]) -> dict[Panel, dict[str, list[tuple[float, float, float]]]]:
    """(axis, temperature, task) -> label -> sorted [(x, p99 ITL ms, mean TPOT ms)]; axis is
    ``concurrency`` or ``request_rate_per_second``."""
    out: dict[Panel, dict[str, list[tuple[float, float, float]]]] = defaultdict(lambda: defaultdict(list))
    rows: Sequence[Mapping[str, Any]] = [*summary.get("cells", []), *summary.get("baselines", []),
                                         *summary.get("open_loop", []), *summary.get("open_loop_baselines", [])]
    for c in rows:
        if c.get("itl_ms_p99") is None or c.get("tpot_ms_mean") is None:
            continue
        axis = "request_rate_per_second" if c.get("request_rate_per_second") is not None else "concurrency"
        shape = "" if c["strategy"] == "plain" else f" {c.get('tree') or 'N=' + str(c.get('num_draft_tokens'))}"
        label = f"{c['strategy']}{shape}"
        out[(axis, c["temperature"], c["task"])][label].append((float(c[axis]), float(c["itl_ms_p99"]),
                                                     float(c["tpot_ms_mean"])))
    return {k: {label: sorted(pts) for label, pts in v.items()} for k, v in out.items()}


def plot_latency(summary: Mapping[str, Any], out: Path) -> bool:
    """Draw ``out``; False when there is nothing timed per token or no matplotlib."""
    panels = series(summary)
    if not panels:
        return False
    from picker.profiler.plot import pyplot, save

    plt = pyplot()
    if plt is None:
        return False
    keys = sorted(panels)
    fig, axes = plt.subplots(len(keys), 2, figsize=(11, 3.4 * len(keys)), squeeze=False)
    for (axis, temp, task), row in zip(keys, axes):
        for label, pts in sorted(panels[(axis, temp, task)].items()):
            xs = [p[0] for p in pts]
            style = {"linestyle": "--", "color": "black", "alpha": 0.6} if label == "plain" else {}
            row[0].plot(xs, [p[1] for p in pts], marker="o", label=label, **style)
            row[1].plot(xs, [p[2] for p in pts], marker="o", label=label, **style)
        name = "concurrency (requests in flight)" if axis == "concurrency" else "offered request rate (requests/s)"
        for ax, what in zip(row, ("p99 inter-token latency (ms)", "mean TPOT (ms)")):
            if len({x for pts in panels[(axis, temp, task)].values() for x, _, _ in pts}) > 1:
                ax.set_xscale("log", base=2)
            ax.set_xlabel(name)
            ax.set_ylabel(what)
            ax.set_title(f"{task}, T = {temp:g}: {what.split(' (')[0]}")
            ax.grid(alpha=0.3)
        row[1].legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.005, 1.0))
    return save(fig, out)

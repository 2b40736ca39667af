"""A PNG of α per task type and strategy, one panel per temperature, beside ``summary.json``.

matplotlib is optional (the ``plot`` extra) and imported only here, lazily: without it the run
notes that no plot was drawn and carries on.

    >>> summary = {"cells": [{"task": "code", "strategy": "ngram", "temperature": 0.0,
    ...                       "num_draft_tokens": 4, "alpha": 0.6, "alpha_ci": [0.55, 0.65]}]}
    >>> import tempfile, pathlib
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "alpha.png"
    >>> plot_alpha(summary, out) in (True, False)
    True
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any


def _pick(cells: list[dict[str, Any]]) -> dict[tuple[float, str, str], dict[str, Any]]:
    """One bar per (temperature, task, strategy): the cell with the most drafts among its N's."""
    best: dict[tuple[float, str, str], dict[str, Any]] = {}
    for c in cells:
        key = (c["temperature"], c["task"], c["strategy"])
        if key not in best or c.get("draft_tokens", 0) > best[key].get("draft_tokens", 0):
            best[key] = c
    return best


def pyplot() -> Any:
    """matplotlib's pyplot on the file-only backend, or None without the ``plot`` extra."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display: files only
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def save(fig: Any, out: Path) -> bool:
    """Write ``fig`` to ``out`` and release it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return True


def plot_alpha(summary: Mapping[str, Any], out: Path) -> bool:
    """Draw grouped bars of α with their 95% intervals; False when matplotlib is missing."""
    plt = pyplot()
    if plt is None:
        return False
    cells = _pick(list(summary.get("cells", [])))
    temps = sorted({k[0] for k in cells})
    tasks = sorted({k[1] for k in cells})
    strategies = sorted({k[2] for k in cells})
    if not cells:
        return False
    fig, axes = plt.subplots(len(temps), 1, figsize=(max(6, 1.3 * len(tasks) * max(1, len(strategies)) ** 0.5 + 3),
                                                      3.2 * len(temps)), squeeze=False)
    width = 0.8 / max(1, len(strategies))
    for ax, temp in zip(axes[:, 0], temps):
        for j, strategy in enumerate(strategies):
            xs, ys, lo, hi = [], [], [], []
            for i, task in enumerate(tasks):
                c = cells.get((temp, task, strategy))
                if c is None:
                    continue
                xs.append(i + (j - (len(strategies) - 1) / 2) * width)
                ys.append(c["alpha"])
                lo.append(max(0.0, c["alpha"] - c["alpha_ci"][0]))
                hi.append(max(0.0, c["alpha_ci"][1] - c["alpha"]))
            ax.bar(xs, ys, width, yerr=[lo, hi], capsize=2, label=strategy)
        ax.set_xticks(range(len(tasks)), tasks)
        ax.set_ylim(0, 1)
        ax.set_ylabel("alpha (accepted / drafted)")
        ax.set_title(f"temperature {temp:g}")
        ax.grid(axis="y", alpha=0.3)
    axes[0, 0].legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.005, 1.0))  # outside the bars
    return save(fig, out)

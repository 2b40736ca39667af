"""The report's plots as PNG data URIs (matplotlib, Agg): nothing is fetched when the page opens.

    >>> from picker.recommend.series import Series
    >>> uri = gain_vs_batch([Series("x", (1, 2, 4), (1.5, 1.1, 0.9), (1.4, 1.0, 0.8), (1.6, 1.2, 1.0))], [(3, "off")])
    >>> uri.startswith("data:image/png;base64,")          # doctest: +SKIP
    True

The gain plots draw the result's series and nothing else: against batch size the deployment as
the schedule runs it, its switch points marked where the schedule's rows start; against N the
deployed strategy's shape first (its crossing of 1x, if any, and the deployed N marked in its own
colour), the other strategies' chains for comparison, unmarked.

Each function returns None when it has nothing to draw, and :func:`available` says whether
matplotlib is installed (the ``plot`` extra); the page says so instead of showing a broken image.
"""

from __future__ import annotations

import base64
import io
from typing import Any

from picker.recommend.series import AlphaPoint, MeasuredCell, Series, crossover

DPI = 100


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _figure(width: float = 6.4, height: float = 3.6) -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(width, height))


def _uri(fig: Any) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=DPI)
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _curves(ax: Any, series: list[Series]) -> None:
    """Each curve with its range, the deployed one (first) bold, and the 1x line."""
    ax.axhline(1.0, color="#888", lw=0.9, ls="--")
    for i, s in enumerate(series):
        ax.plot(s.x, s.mean, marker="o", label=s.label, color=f"C{i}", lw=2.0 if i == 0 else 1.0,
                alpha=1.0 if i == 0 else 0.6)
        ax.fill_between(s.x, s.low, s.high, alpha=0.15 if i == 0 else 0.06, color=f"C{i}")
    ax.legend(fontsize=7, loc="best")


def gain_vs_n(series: list[Series], deployed_n: int | None = None) -> str | None:
    """Predicted workload speedup against the draft length N: the deployed strategy's shape (first),
    its crossing of 1x and the deployed N marked; every other deployable strategy's chains."""
    if not series or not available():
        return None
    fig, ax = _figure()
    _curves(ax, series)
    first = series[0]
    x = crossover(first.x, first.mean)
    if x is not None and deployed_n is not None:
        ax.axvline(x, color="C0", lw=1.0, ls=":")
        ax.annotate(f"gain = 1 at N = {x:.3g}", (x, 1.0), textcoords="offset points", xytext=(5, 8), color="C0",
                    fontsize=8)
    if deployed_n is not None and float(deployed_n) in first.x:
        y = first.mean[first.x.index(float(deployed_n))]
        ax.plot([deployed_n], [y], marker="*", ms=14, color="C0", zorder=5)
        ax.annotate(f"deployed N = {deployed_n}", (deployed_n, y), textcoords="offset points", xytext=(6, -12),
                    color="C0", fontsize=8)
    ax.set(xlabel="N (draft tokens per step)", ylabel="predicted speedup (workload)", title="gain against N")
    return _uri(fig)


def gain_vs_batch(series: list[Series], switches: list[tuple[int, str]]) -> str | None:
    """Predicted speedup of the deployment against batch size (the schedule applied); ``switches``:
    (first batch of a schedule row, what it runs) marked where the rows change."""
    if not series or not available():
        return None
    fig, ax = _figure()
    _curves(ax, series)
    top = max(max(s.high) for s in series)
    for batch, what in switches:
        ax.axvline(batch, color="#555", lw=0.9, ls=":")
        ax.annotate(f"{what} from {batch}", (batch, top), textcoords="offset points", xytext=(-2, -4), color="#555",
                    fontsize=7, va="top", ha="right", rotation=90)
    ax.set_xscale("log", base=2)
    ax.set(xlabel="batch size (concurrent sequences)", ylabel="predicted speedup, as deployed",
           title="gain against batch size (the batch schedule applied)")
    return _uri(fig)


def alpha_by_task(points: list[AlphaPoint]) -> str | None:
    """α per task type with its interval; filled markers are measured, hollow ones priors."""
    if not points or not available():
        return None
    tasks = list(dict.fromkeys(p.task for p in points))
    strategies = list(dict.fromkeys(p.strategy for p in points))
    fig, ax = _figure(6.4, 0.5 + 0.45 * len(tasks) * max(1, len(strategies)) ** 0.5 + 1.2)
    width = 0.8 / max(1, len(strategies))
    for j, name in enumerate(strategies):
        for p in (q for q in points if q.strategy == name):
            y = tasks.index(p.task) + (j - (len(strategies) - 1) / 2) * width
            measured = p.source == "measured"
            ax.errorbar(p.alpha, y, xerr=[[max(p.alpha - p.low, 0)], [max(p.high - p.alpha, 0)]], fmt="o",
                        color=f"C{j}", mfc=f"C{j}" if measured else "white", capsize=3,
                        label=name if p.task == next(q.task for q in points if q.strategy == name) else None)
    ax.set_yticks(range(len(tasks)), tasks)
    ax.set_xlim(0, 1)
    ax.set(xlabel="alpha (per-token acceptance); filled = measured, hollow = prior", title="alpha per task type")
    # Outside the axes: inside, the legend hides the lowest task's points.
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _uri(fig)


def measured_vs_predicted(cells: list[MeasuredCell]) -> str | None:
    """Measured α against the cited prior, and measured τ against E[L] of the measured α."""
    if not cells or not available():
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_a, ax_t) = plt.subplots(1, 2, figsize=(9.0, 3.8))
    strategies = list(dict.fromkeys(c.strategy for c in cells))
    for j, name in enumerate(strategies):
        mine = [c for c in cells if c.strategy == name]
        ax_a.errorbar([c.prior_alpha for c in mine], [c.alpha for c in mine],
                      yerr=[[max(c.alpha - c.alpha_ci[0], 0) for c in mine], [max(c.alpha_ci[1] - c.alpha, 0)
                                                                           for c in mine]],
                      fmt="o", color=f"C{j}", label=name, capsize=2)
        taus = [c for c in mine if c.tau is not None and c.predicted_tau is not None]
        ax_t.plot([c.predicted_tau for c in taus], [c.tau for c in taus], "o", color=f"C{j}", label=name)
    ax_a.plot([0, 1], [0, 1], color="#888", lw=0.8, ls="--")
    ax_a.set(xlabel="prior alpha (cited)", ylabel="measured alpha", title="measured against prior", xlim=(0, 1),
             ylim=(0, 1))
    hi = max([c.tau or 1 for c in cells] + [c.predicted_tau or 1 for c in cells]) + 0.2
    ax_t.plot([1, hi], [1, hi], color="#888", lw=0.8, ls="--")
    ax_t.set(xlabel="predicted tokens per step (i.i.d. model)", ylabel="measured tokens per step",
             title="measured against predicted")
    ax_a.legend(fontsize=8)
    return _uri(fig)

"""`specpick recommend --explain`: the top candidates per task type, their ranges and evidence, and a plot.

    $ specpick recommend profiles/code-assistant-8b-a100.yaml --explain
    $ specpick recommend PROFILE --measurements runs/zoo/summary.json --policy policies/data/zoo-ci-policy.json \\
          --explain --plot explain.png

For every task type: the best few configurations by predicted speedup on that task's traffic, each
with its range and what it rests on (α measured or prior, with its interval; per-position rates;
step costs measured or from the roofline; the learned correction when a policy is applied). The
rows are built once by the pipeline (:func:`explain_rows`, read off the scored table, the evidence
index and the cost source) and carried on its :class:`~picker.recommend.result.Result`; the plot
draws the result's series: the deployed strategy against N and the deployment against batch size.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from picker.recommend.costs import CostSource, cost
from picker.recommend.evidence_index import EvidenceIndex, candidate
from picker.recommend.figures import fraction, rounded, times
from picker.recommend.measured_load import MeasuredStepCost
from picker.recommend.result import Result
from picker.recommend.table import Bucket, Scored, ScoredTable

TOP = 5


def _evidence(table: ScoredTable, index: EvidenceIndex, costs: CostSource, row: Scored,
              tb: list[Bucket]) -> dict[str, Any]:
    """What ``row``'s number on the task rests on, at the task's heaviest bucket (read from the
    evidence index and the cost source: the explanation shows the evidence behind the table)."""
    b = max(tb, key=lambda x: x.weight)
    cand = candidate(index, costs.ctx, row.option, b)
    ev = cand.evidence
    out: dict[str, Any] = {"alpha": rounded(ev.alpha), "alpha_range": [rounded(ev.alpha_low), rounded(ev.alpha_high)],
                           "source": ev.source, "at_temperature": b.temperature, "at_batch": b.batch}
    if ev.per_position:
        out["per_position"] = [rounded(p) for p in ev.per_position]
    if ev.siblings and cand.is_tree:
        out["sibling_accept"] = [rounded(x) for x in ev.siblings]  # measured, used for this tree
    c = cost(index, costs, row.option, b.batch, b.temperature > 0)
    if isinstance(c, MeasuredStepCost):  # the measured gain against concurrency outranks the rest
        out["cost"] = {"source": "measured under load", "step_ratio": rounded(c.step_ratio),
                       "levels": list(c.levels), "measurements": c.source}
    elif ev.cost is not None:
        out["cost"] = {"source": "measured", "draft_unit": round(ev.cost.draft_unit, 4),
                       "draft_share": rounded(ev.cost.draft_share), "verify_curve_points": len(ev.cost.verify)}
    else:
        out["cost"] = {"source": "roofline", "c": round(c.cost_ratio, 4), "v": rounded(c.verify_ratio),
                       "bound": c.bound, "calibration": table.calibration}
    if b.key in row.corrections:
        out["learned_correction"] = rounded(row.corrections[b.key])
    if ev.citations:
        out["citations"] = list(ev.citations)
    return out


def explain_rows(table: ScoredTable, index: EvidenceIndex, costs: CostSource,
                 top: int = TOP) -> tuple[dict[str, Any], ...]:
    """Per task type, each strategy's best deployable configuration on that task, ranked (``top`` of them)."""
    rows = []
    usable = [o for o in table.rows if o.deployable]
    for task in dict.fromkeys(b.task for b in table.buckets):
        tb = [b for b in table.buckets if b.task == task]
        scored = [([o.speedup_at(tb, which=i) for i in range(3)], o) for o in usable]
        scored.sort(key=lambda x: -x[0][0])
        # One row per strategy (its best configuration): the alternatives across drafter types.
        best: dict[str, tuple[list[float], Scored]] = {}
        for x in scored:
            best.setdefault(x[1].plugin.name, x)
        rows.append({"task": task, "candidates": [
            {"strategy": o.plugin.name, "config": o.config.label, "predicted_speedup":
             {"mean": rounded(s[0]), "low": rounded(min(s)), "high": rounded(max(s))},
             "evidence": _evidence(table, index, costs, o, tb)} for s, o in list(best.values())[:top]]})
    return tuple(rows)


def _cost_text(cost: dict[str, Any]) -> str:
    """Where a candidate's step cost comes from, in words (the JSON keeps the symbols)."""
    if cost["source"] == "measured under load":
        levels = cost["levels"]
        return (f"step cost measured under load: {fraction(cost['step_ratio'])} plain decoding steps "
                f"(from concurrency {levels[0]}-{levels[-1]})")
    if cost["source"] == "measured":
        return (f"step cost measured: drafting {cost['draft_unit']:.3g} of a plain step per draft forward, "
                f"{cost['draft_share']:.0%} of the output from steps that drafted")
    calibrated = f", calibrated from {cost['calibration']}" if cost.get("calibration") else ""
    return (f"step cost from the cost model{calibrated}: drafting {cost['c']:.3g} of a plain step per draft "
            f"token, verifying {fraction(cost['v'])} plain steps ({cost['bound']}-bound)")


def _setting(config: str) -> str:
    """A configuration label (``N=3``, ``tree(depth=6, topk=2, tokens=12)``) in the plan's words."""
    if not config.startswith("tree("):
        return config
    parts = dict(p.split("=") for p in config.removeprefix("tree(").removesuffix(")").split(", "))
    return f"depth {parts['depth']}, top-k {parts['topk']}, {parts['tokens']} tokens"


def markdown(rows: Sequence[dict[str, Any]], notes: Sequence[str]) -> str:
    """The explanation as numbered candidates per task type, each line wrapped to 80 columns."""
    from picker.recommend.words import strategy_labels

    labels = strategy_labels()
    lines = ["", "## Explain: best configuration of each strategy, per task type", ""]
    lines += [f"> {n}" for n in notes] + ([""] if notes else [])
    for row in rows:
        lines += [f"### {row['task']}", ""]
        for i, c in enumerate(row["candidates"], 1):
            e, p = c["evidence"], c["predicted_speedup"]
            lo, hi = e["alpha_range"]
            sib = ("; sibling acceptance " + "/".join(f"{x:.2f}" for x in e["sibling_accept"][:3])
                   if "sibling_accept" in e else "")
            corr = (f"; learned correction x{e['learned_correction']}" if "learned_correction" in e else "")
            head = (f"{i}. {labels.get(c['strategy'], c['strategy'])}, {_setting(c['config'])}: {times(p['mean'])} "
                    f"(range {times(p['low'])}–{times(p['high'])})")
            body = (f"α {fraction(e['alpha'])} ({fraction(lo)}–{fraction(hi)}, {e['source']}{sib}); "
                    f"{_cost_text(e['cost'])}{corr}.")
            lines += [*textwrap.wrap(head, 80, subsequent_indent="   ", break_on_hyphens=False),
                      *textwrap.wrap(body, 80, initial_indent="   ", subsequent_indent="   ", break_on_hyphens=False)]
        lines.append("")
    return "\n".join(lines) + "\n"


def plot(path: Path, result: Result) -> bool:
    """The result's two gain series in one PNG: the deployed strategy against N, and the deployment
    against batch size (False: no matplotlib, or speculation stays off and there is nothing to draw)."""
    if not result.gain_batch:
        return False
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    from picker.recommend.words import relabel, strategy_labels

    labels = strategy_labels()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, series, log_x in ((axes[0], result.gain_n[:1], False), (axes[1], result.gain_batch, True)):
        for s in series:
            ax.plot(s.x, s.mean, marker="o", label=relabel(s.label, labels))
            ax.fill_between(s.x, s.low, s.high, alpha=0.2)
        ax.axhline(1.0, color="grey", lw=0.8)
        if log_x:
            ax.set_xscale("log", base=2)
        ax.legend(fontsize=7)
    axes[0].set(xlabel="N (draft tokens)", ylabel="predicted speedup (workload)", title="speedup vs N")
    axes[1].set(xlabel="batch size", ylabel="predicted speedup", title="speedup vs batch size, as deployed")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True

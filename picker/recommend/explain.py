"""`specpick recommend --explain`: the top candidates per task type, their ranges and evidence, and a plot.

    $ specpick recommend profiles/code-assistant-8b-a100.yaml --explain
    $ specpick recommend PROFILE --measurements runs/zoo/summary.json --policy policies/data/zoo-ci-policy.json \\
          --explain --plot explain.png

For every task type: the best few configurations by predicted speedup on that task's traffic, each
with its range and what it rests on (α measured or prior, with its interval; per-position rates;
step costs measured or from the roofline; the learned correction when a policy is applied). The
plot shows predicted speedup against N and against batch size for the chosen strategy.

A ``verify_curve.jsonl`` beside the measurements file (``specpick sweep`` writes one) gives the
measured verify time against tokens in flight.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from picker.inputs.measurements import Measurements
from picker.inputs.verify_curve import verify_curve_beside
from picker.inputs.workload import WorkloadProfile
from picker.recommend.contract import Recommendation
from picker.recommend.decide import decide
from picker.recommend.measured_load import MeasuredStepCost
from picker.recommend.pipeline import score_workload
from picker.recommend.scoring import Scorer
from picker.recommend.table import BATCH_GRID, Bucket, Scored, ScoredTable

if TYPE_CHECKING:  # numpy-free at run time: policies.calibration imports numpy
    from policies import Calibration

TOP = 5
PLOT_DEPTHS = tuple(range(1, 9))


def _evidence(scorer: Scorer, row: Scored, tb: list[Bucket]) -> dict[str, Any]:
    """What ``row``'s number on the task rests on, at the task's heaviest bucket (read from the scorer:
    the explanation shows the evidence behind the table, it does not score anything anew)."""
    b = max(tb, key=lambda x: x.weight)
    cand = scorer.candidate(row.option, b)
    ev = cand.evidence
    out: dict[str, Any] = {"alpha": round(ev.alpha, 3), "alpha_range": [round(ev.alpha_low, 3), round(ev.alpha_high, 3)],
                           "source": ev.source, "at_temperature": b.temperature, "at_batch": b.batch}
    if ev.per_position:
        out["per_position"] = [round(p, 3) for p in ev.per_position]
    if ev.siblings and cand.is_tree:
        out["sibling_accept"] = [round(x, 3) for x in ev.siblings]  # measured, used for this tree
    c = scorer.cost(row.option, b.batch, b.temperature > 0)
    if isinstance(c, MeasuredStepCost):  # the measured gain against concurrency outranks the rest
        out["cost"] = {"source": "measured under load", "step_ratio": round(c.step_ratio, 3),
                       "levels": list(c.levels), "measurements": c.source}
    elif ev.cost is not None:
        out["cost"] = {"source": "measured", "draft_unit": round(ev.cost.draft_unit, 4),
                       "draft_share": round(ev.cost.draft_share, 3), "verify_curve_points": len(ev.cost.verify)}
    else:
        out["cost"] = {"source": "roofline", "c": round(c.cost_ratio, 4), "v": round(c.verify_ratio, 3), "bound": c.bound,
                       "calibration": scorer.calibration.path if scorer.calibration else None}
    if scorer.policy is not None:
        from policies import base_speedup, feature_matrix

        base = base_speedup(cand)
        out["learned_correction"] = round(float(scorer.policy.predict(feature_matrix([cand]))[0]) / base, 3)
    if ev.citations:
        out["citations"] = list(ev.citations)
    return out


def explain(scorer: Scorer, table: ScoredTable, top: int = TOP) -> list[dict[str, Any]]:
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
        scored = list(best.values())
        rows.append({"task": task, "candidates": [
            {"strategy": o.plugin.name, "config": o.config.label, "predicted_speedup":
             {"mean": round(s[0], 3), "low": round(min(s), 3), "high": round(max(s), 3)},
             "evidence": _evidence(scorer, o, tb)} for s, o in scored[:top]]})
    return rows


def _cost_text(cost: dict[str, Any]) -> str:
    if cost["source"] == "measured under load":
        levels = cost["levels"]
        return f"measured under load (R={cost['step_ratio']}, concurrency {levels[0]}-{levels[-1]})"
    if cost["source"] == "measured":
        return f"measured (d={cost['draft_unit']}, phi={cost['draft_share']})"
    calibrated = f", calibrated from {cost['calibration']}" if cost.get("calibration") else ""
    return f"roofline (c={cost['c']}, v={cost['v']}, {cost['bound']}{calibrated})"


def markdown(rows: list[dict[str, Any]], notes: list[str]) -> str:
    lines = ["", "## Explain: best configuration of each strategy, per task type", ""]
    lines += [f"> {n}" for n in notes] + ([""] if notes else [])
    for row in rows:
        lines += [f"### {row['task']}", "", "| strategy | config | predicted | range | alpha (source) | cost | correction |",
                  "|---|---|---|---|---|---|---|"]
        for c in row["candidates"]:
            e, p = c["evidence"], c["predicted_speedup"]
            cost = e["cost"]
            cost_txt = _cost_text(cost)
            sib = ("; siblings " + "/".join(f"{x:.2f}" for x in e["sibling_accept"][:3])
                   if "sibling_accept" in e else "")
            lines.append(f"| {c['strategy']} | {c['config']} | {p['mean']:.2f}x | {p['low']:.2f}-{p['high']:.2f}x | "
                         f"{e['alpha']} [{e['alpha_range'][0]}, {e['alpha_range'][1]}] ({e['source']}{sib}) | "
                         f"{cost_txt} | "
                         f"{e.get('learned_correction', '-')} |")
        lines.append("")
    return "\n".join(lines) + "\n"


def plot(path: Path, table: ScoredTable, rec: Recommendation) -> bool:
    """Predicted speedup against N and against batch size for the chosen strategy (False: no matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    d, bs = rec.decision, list(table.buckets)
    fig, (ax_n, ax_b) = plt.subplots(1, 2, figsize=(10, 4))
    chains = sorted((o for o in table.rows if o.plugin.name == d.strategy and not o.config.is_tree
                     and o.config.depth in PLOT_DEPTHS), key=lambda o: o.config.depth)
    if chains:
        s = [[o.speedup_at(bs, which=i) for o in chains] for i in range(3)]
        xs = [o.config.depth for o in chains]
        ax_n.plot(xs, s[0], marker="o", label=f"{d.strategy} chain")
        ax_n.fill_between(xs, s[1], s[2], alpha=0.2)
    ax_n.axhline(1.0, color="grey", lw=0.8)
    ax_n.set(xlabel="N (draft tokens)", ylabel="predicted speedup (workload)", title=f"{d.strategy}: speedup vs N")
    chosen = next((o for o in table.rows if o.plugin.name == d.strategy and o.config.depth == d.num_speculative_tokens
                   and (d.tree is None) == (not o.config.is_tree)
                   and (d.tree is None or (o.config.topk, o.config.num_draft_tokens) == (d.tree.topk, d.tree.num_draft_tokens))),
                  None)
    if chosen is not None:  # the deployed option: the table holds its batch grid (the schedule's)
        s = [[chosen.speedup_at(bs, batch=b, which=i) for b in BATCH_GRID] for i in range(3)]
        ax_b.plot(BATCH_GRID, s[0], marker="o", label=chosen.config.label)
        ax_b.fill_between(BATCH_GRID, s[1], s[2], alpha=0.2)
        ax_b.legend()
    ax_b.axhline(1.0, color="grey", lw=0.8)
    ax_b.set_xscale("log", base=2)
    ax_b.set(xlabel="batch size", ylabel="predicted speedup", title="speedup vs batch size")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def recommend_command(profile: WorkloadProfile, measurements: Measurements | None, measurements_path: Path | None,
                      policy_path: Path | None, want_explain: bool, plot_path: Path | None, fmt: str,
                      path: str, calibration: Calibration | None = None) -> str:
    """What ``specpick recommend`` prints when ``--explain``, ``--policy`` or ``--plot`` is given."""
    from picker.recommend.render import render, render_data

    notes, est, measured_costs = [], None, None
    if policy_path is not None:
        from policies import load_policy

        policy = load_policy(policy_path)
        ok, why = policy.covers(profile.hardware.gpu, profile.engine.name, profile.model_shape().params)
        if ok:
            est = policy.estimator
            # Score rows the way the policy's training rows were built (measured or roofline costs).
            measured_costs = policy.card.get("measured_costs")
            notes.append(f"learned correction applied ({policy_path}; cross-validated median error "
                         f"{policy.card['cross_validated_error']['median_rel_error']:.1%})")
        else:
            notes.append(f"learned correction NOT applied: {why}; the analytic model scores every option")
    scorer = Scorer(profile, measurements, est, measured_costs=measured_costs,
                    verify_curve=verify_curve_beside(measurements_path), calibration=calibration)
    table = score_workload(scorer, path=path)
    notes += list(table.cost_notes)
    from picker.recommend.provenance_labels import with_provenance

    rec = with_provenance(decide(table, path=path), profile, measurements)
    rows = explain(scorer, table) if want_explain else []
    if plot_path is not None:
        drawn = plot(plot_path, table, rec) if rec.decision.strategy != "none" else False
        notes.append(f"plot written to {plot_path}" if drawn else "no plot drawn (no strategy chosen, or no matplotlib)")
    if fmt == "md":
        return render(rec, "md") + (markdown(rows, notes) if want_explain or notes else "")
    data = rec.model_dump(mode="json")
    if want_explain or notes:
        data["explain"] = {"notes": notes, "per_task": rows}
    return render_data(data, fmt)

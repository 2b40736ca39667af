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
from typing import Any

from picker.inputs.measurements import Measurements
from picker.inputs.verify_curve import verify_curve_beside
from picker.inputs.workload import WorkloadProfile
from picker.recommend.contract import Recommendation
from picker.recommend.scoring import (
    Bucket,
    Option,
    Scorer,
    buckets,
    harmonic,
    options_for,
    score_all,
)

TOP = 5
PLOT_DEPTHS = tuple(range(1, 9))
PLOT_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


def build(profile: WorkloadProfile, measurements: Measurements | None, *, path: str = "", policy: Any = None,
          verify_curve: list[tuple[float, float]] | None = None, measured_costs: bool | None = None,
          ) -> tuple[Recommendation, Scorer, list[Option], list[Bucket]]:
    """``picker.recommend.scoring.recommend``, keeping the scorer and the scored options for the explanation."""
    from picker.engine.plugins import load_strategies
    from picker.recommend.decide import decide

    scorer = Scorer(profile, measurements, policy, measured_costs=measured_costs, verify_curve=verify_curve)
    bs = buckets(profile)
    options = options_for(profile, load_strategies(), scorer.ctx.target)
    score_all(scorer, options, bs)
    from picker.recommend.provenance_labels import with_provenance

    return with_provenance(decide(scorer, options, bs, path=path), profile, measurements), scorer, options, bs


def _evidence(scorer: Scorer, opt: Option, tb: list[Bucket]) -> dict[str, Any]:
    b = max(tb, key=lambda x: x.weight)
    cand = scorer.candidate(opt, b)
    ev = cand.evidence
    out: dict[str, Any] = {"alpha": round(ev.alpha, 3), "alpha_range": [round(ev.alpha_low, 3), round(ev.alpha_high, 3)],
                           "source": ev.source, "at_temperature": b.temperature, "at_batch": b.batch}
    if ev.per_position:
        out["per_position"] = [round(p, 3) for p in ev.per_position]
    if ev.siblings and cand.is_tree:
        out["sibling_accept"] = [round(x, 3) for x in ev.siblings]  # measured, used for this tree
    if ev.cost is not None:
        out["cost"] = {"source": "measured", "draft_unit": round(ev.cost.draft_unit, 4),
                       "draft_share": round(ev.cost.draft_share, 3), "verify_curve_points": len(ev.cost.verify)}
    else:
        c = scorer.cost(opt, b.batch)
        out["cost"] = {"source": "roofline", "c": round(c.cost_ratio, 4), "v": round(c.verify_ratio, 3), "bound": c.bound}
    if scorer.policy is not None:
        from policies.features import base_speedup, feature_matrix

        base = base_speedup(cand)
        out["learned_correction"] = round(float(scorer.policy.predict(feature_matrix([cand]))[0]) / base, 3)
    if ev.citations:
        out["citations"] = list(ev.citations)
    return out


def explain(scorer: Scorer, options: list[Option], bs: list[Bucket], top: int = TOP) -> list[dict[str, Any]]:
    """Per task type, each strategy's best deployable configuration on that task, ranked (``top`` of them)."""
    rows = []
    usable = [o for o in options if o.deployable]
    for task in dict.fromkeys(b.task for b in bs):
        tb = [b for b in bs if b.task == task]
        scorer.prime(usable, tb)
        scored = []
        for o in usable:
            s = [harmonic([(b.weight, scorer.bucket_speedup(o, b)[i]) for b in tb]) for i in range(3)]
            scored.append((s, o))
        scored.sort(key=lambda x: -x[0][0])
        # One row per strategy (its best configuration): the alternatives across drafter types.
        seen: set[str] = set()
        scored = [x for x in scored if not (x[1].plugin.name in seen or seen.add(x[1].plugin.name))]
        rows.append({"task": task, "candidates": [
            {"strategy": o.plugin.name, "config": o.config.label, "predicted_speedup":
             {"mean": round(s[0], 3), "low": round(min(s), 3), "high": round(max(s), 3)},
             "evidence": _evidence(scorer, o, tb)} for s, o in scored[:top]]})
    return rows


def markdown(rows: list[dict[str, Any]], notes: list[str]) -> str:
    lines = ["", "## Explain: best configuration of each strategy, per task type", ""]
    lines += [f"> {n}" for n in notes] + ([""] if notes else [])
    for row in rows:
        lines += [f"### {row['task']}", "", "| strategy | config | predicted | range | alpha (source) | cost | correction |",
                  "|---|---|---|---|---|---|---|"]
        for c in row["candidates"]:
            e, p = c["evidence"], c["predicted_speedup"]
            cost = e["cost"]
            cost_txt = (f"measured (d={cost['draft_unit']}, phi={cost['draft_share']})" if cost["source"] == "measured"
                        else f"roofline (c={cost['c']}, v={cost['v']}, {cost['bound']})")
            sib = ("; siblings " + "/".join(f"{x:.2f}" for x in e["sibling_accept"][:3])
                   if "sibling_accept" in e else "")
            lines.append(f"| {c['strategy']} | {c['config']} | {p['mean']:.2f}x | {p['low']:.2f}-{p['high']:.2f}x | "
                         f"{e['alpha']} [{e['alpha_range'][0]}, {e['alpha_range'][1]}] ({e['source']}{sib}) | "
                         f"{cost_txt} | "
                         f"{e.get('learned_correction', '-')} |")
        lines.append("")
    return "\n".join(lines) + "\n"


def plot(path: Path, scorer: Scorer, options: list[Option], bs: list[Bucket], rec: Recommendation) -> bool:
    """Predicted speedup against N and against batch size for the chosen strategy (False: no matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    from picker.recommend.decide import _pinned

    d = rec.decision
    fig, (ax_n, ax_b) = plt.subplots(1, 2, figsize=(10, 4))
    chains = sorted((o for o in options if o.plugin.name == d.strategy and not o.config.is_tree
                     and o.config.depth in PLOT_DEPTHS), key=lambda o: o.config.depth)
    if chains:
        scorer.prime(chains, bs)
        s = [[harmonic([(b.weight, scorer.bucket_speedup(o, b)[i]) for b in bs]) for o in chains] for i in range(3)]
        xs = [o.config.depth for o in chains]
        ax_n.plot(xs, s[0], marker="o", label=f"{d.strategy} chain")
        ax_n.fill_between(xs, s[1], s[2], alpha=0.2)
    ax_n.axhline(1.0, color="grey", lw=0.8)
    ax_n.set(xlabel="N (draft tokens)", ylabel="predicted speedup (workload)", title=f"{d.strategy}: speedup vs N")
    chosen = next((o for o in options if o.plugin.name == d.strategy and o.config.depth == d.num_speculative_tokens
                   and (d.tree is None) == (not o.config.is_tree)
                   and (d.tree is None or (o.config.topk, o.config.num_draft_tokens) == (d.tree.topk, d.tree.num_draft_tokens))),
                  None)
    if chosen is not None:
        pinned = [_pinned(bs, batch=b) for b in PLOT_BATCHES]
        scorer.prime([chosen], [x for p in pinned for x in p])
        s = [[harmonic([(b.weight, scorer.bucket_speedup(chosen, b)[i]) for b in p]) for p in pinned] for i in range(3)]
        ax_b.plot(PLOT_BATCHES, s[0], marker="o", label=chosen.config.label)
        ax_b.fill_between(PLOT_BATCHES, s[1], s[2], alpha=0.2)
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
                      path: str) -> str:
    """What ``specpick recommend`` prints when ``--explain``, ``--policy`` or ``--plot`` is given."""
    import json

    from picker.recommend.render import render

    notes, est, measured_costs = [], None, None
    if policy_path is not None:
        from policies.artifacts import load_policy

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
    rec, scorer, options, bs = build(profile, measurements, path=path, policy=est, measured_costs=measured_costs,
                                     verify_curve=verify_curve_beside(measurements_path))
    rows = explain(scorer, options, bs) if want_explain else []
    if plot_path is not None:
        drawn = plot(plot_path, scorer, options, bs, rec) if rec.decision.strategy != "none" else False
        notes.append(f"plot written to {plot_path}" if drawn else "no plot drawn (no strategy chosen, or no matplotlib)")
    if fmt == "md":
        return render(rec, "md") + (markdown(rows, notes) if want_explain or notes else "")
    data = rec.model_dump(mode="json")
    if want_explain or notes:
        data["explain"] = {"notes": notes, "per_task": rows}
    if fmt == "json":
        return json.dumps(data, indent=2) + "\n"
    import yaml

    return yaml.safe_dump(data, sort_keys=False, width=100)

"""The policy under test, run exactly as ``specpick recommend`` runs it, on zoo workloads.

Training rows come from *other* workloads (``picker.recommend.policy_fit``, what ``specpick policy
fit`` runs): each grid cell of a training workload, with the evidence its own cheap profile gave
(``sweep_data.profile_records``), labelled with the sweep's measured speedup.
The held-out workload's decision and its per-cell predictions are one
``picker.recommend.pipeline.recommend`` result (:func:`recommended`) with the fitted estimator as
``policy``, the held-out profile as ``measurements``, the sweep's verify curve, and exactly the
configurations the sweep measured as options: this module reads that result and never scores or
decides itself. Training rows and the evidence read-back use the pipeline's evidence index and cost
source (:func:`sources`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from picker.engine.plugins import load_strategies
from picker.recommend.contract import Recommendation
from picker.recommend.costs import cost_context
from picker.recommend.evidence_index import candidate
from picker.recommend.options import options_for
from picker.recommend.pipeline import recommend
from picker.recommend.policy_fit import Prepared, option, sources
from picker.recommend.result import Result
from picker.recommend.sweep_data import GridKey, SweepData
from picker.recommend.table import Bucket, Option
from policies.estimator import SpeedupEstimator
from policies.speedup_model import base_speedup, generation_steps


def recommended(p: Prepared, data: SweepData, est: SpeedupEstimator | None,
                strategies: set[str] | None = None) -> Result:
    """``specpick recommend --measurements PROFILE --policy`` on the workload, over exactly the
    configurations the sweep measured (among ``strategies`` only when given)."""
    return recommend(p.profile, p.measurements, policy=est, measured_costs=True,  # type: ignore[arg-type]
                     verify_curve=data.curve, options=grid_options(p, strategies))


def predict_grid(p: Prepared, result: Result) -> dict[GridKey, tuple[float, float, float]]:
    """(mean, low, high) predicted speedup of every measured grid cell: the rows of ``result``'s
    scored table (:func:`recommended`) on the workload's one bucket."""
    key = (p.workload.task, 1, p.workload.temperature)
    return {grid_key(r.option): r.speedups[key] for r in result.table.rows}


def read_back(p: Prepared, data: SweepData) -> list[dict[str, Any]]:
    """The analytic model on the very chain configurations the profile measured, for the profile's
    own output length, against the speedup the profile measured for them: the evidence read back.
    Same records on both sides, so no prompt or session noise; far from 1 means misread evidence."""
    plugins = load_strategies()
    index, costs = sources(p, data)
    b = Bucket(p.workload.task, 1, p.workload.temperature, 1.0)
    out = []
    for c in p.measurements.cells:  # type: ignore[attr-defined]
        tokens = getattr(c, "tokens", None)
        if c.task != p.workload.task or c.tree is not None or not (c.speedup_vs_plain and tokens and c.samples):
            continue
        g = GridKey(c.strategy, int(c.num_draft_tokens or 0))
        cand = candidate(index, costs.ctx, option(plugins, g), b)
        cost = cand.evidence.cost
        if cost is None:  # nothing measured to read back
            continue
        cand = replace(cand, evidence=replace(cand.evidence, cost=replace(cost, output_tokens=tokens / c.samples)))
        out.append({"config": g.label, "profiled": float(c.speedup_vs_plain), "analytic": base_speedup(cand),
                    # The untimed half: decode steps per generation, measured and as the model counts them.
                    "profiled_steps": float(c.decode_steps) / c.samples, "analytic_steps": generation_steps(cand)})
    return out


def grid_key(o: Option) -> GridKey:
    c = o.config
    if c.is_tree:
        return GridKey(o.plugin.name, c.nodes, f"depth={c.depth},topk={c.topk},tokens={c.num_draft_tokens}")
    return GridKey(o.plugin.name, c.depth)


def grid_options(p: Prepared, strategies: set[str] | None = None) -> list[Option]:
    """Every configuration the sweep measured, as options (feasibility and notes as ``options_for``).

    ``options_for`` alone is not enough: its trees (``analytic.configs_for``) hold 8, 16, 32 or 64
    tokens, so grid trees such as (3,2,6) and (4,4,12) would be measured by the sweep but never
    offered to the policy -- the oracle would then range over a larger space than the policy.
    """
    plugins = load_strategies()
    known = options_for(p.profile, plugins, cost_context(p.profile).target)  # type: ignore[arg-type]
    by_key = {grid_key(o): o for o in known}
    by_plugin = {o.plugin.name: o for o in known if not o.config.is_tree}
    out = []
    for g in sorted(p.workload.truth, key=lambda g: (g.strategy, g.n, g.tree or "")):
        if g.strategy == "plain" or (strategies is not None and g.strategy not in strategies):
            continue
        o = by_key.get(g)
        out.append(o if o is not None else option(plugins, g, like=by_plugin[g.strategy]))
    return out


def choice_of(p: Prepared, result: Result) -> tuple[GridKey, float]:
    """What ``result``'s plan runs on the workload (batch 1, its temperature) and its predicted speedup."""
    rec = result.recommendation
    d = rec.decision
    k = next(r.num_speculative_tokens for r in d.batch_schedule if r.min_batch <= 1)
    sw = d.temperature_switch
    off = d.strategy == "none" or k == 0 or (sw.above is not None and p.workload.temperature > sw.above)
    if off:
        return GridKey("plain", 0), 1.0
    if d.tree is not None:
        t = d.tree
        label = f"depth={t.depth},topk={t.topk},tokens={t.num_draft_tokens}"
        return GridKey(d.strategy, t.num_draft_tokens - 1, label), rec.predicted_speedup.mean
    return GridKey(d.strategy, k), rec.predicted_speedup.mean


def decide(p: Prepared, data: SweepData, est: SpeedupEstimator | None,
           strategies: set[str] | None = None) -> tuple[GridKey, float, Recommendation]:
    """The policy's choice at batch 1 and the workload's temperature, and its predicted speedup
    (among ``strategies`` only when given: e.g. those an engine serves): :func:`recommended`, read."""
    result = recommended(p, data, est, strategies)
    return (*choice_of(p, result), result.recommendation)

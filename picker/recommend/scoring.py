"""Scoring: one function from the evidence index and the cost source to the scored table.

:func:`score` scores every option on the workload's buckets, then the grids the decision reads --
the temperature grid of the leading option and the batch grid of its family (``table.family``),
which is all the decision can deploy -- into an immutable
:class:`~picker.recommend.table.ScoredTable`. Nothing outside it primes or fills anything: the
table is its return value. A fitted policy estimator scores the rows in a few batched calls (one
call per row would cost a millisecond each); without one the analytic model does.

    >>> from picker.inputs.workload import load_profile
    >>> profile = load_profile("profiles/chat-70b-h100.yaml")                          # doctest: +SKIP
    >>> index = index_evidence(profile, None)                                          # doctest: +SKIP
    >>> table = score(profile, index, choose_costs(profile, index, None))              # doctest: +SKIP
    >>> ranked(table.rows)[0].plugin.name                                              # doctest: +SKIP
    'eagle3'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from types import MappingProxyType
from typing import Any, TypeVar

from picker.engine.plugins import load_strategies
from picker.inputs.workload import WorkloadProfile
from picker.recommend.costs import CostSource, at_cost, cost, cost_notes, level_factor, measured_ratios, step_cost
from picker.recommend.engine_configs import runs_batch_schedule
from picker.recommend.evidence_index import EvidenceIndex, alpha, candidate, scorable
from picker.recommend.latency import option_slo_notes
from picker.recommend.measured_load import MEASURED, cost_source
from picker.recommend.options import check_named_strategies, options_for
from picker.recommend.table import (
    BATCH_GRID,
    NOT_WORTH_IT,
    TEMPERATURE_GRID,
    Alpha,
    Bucket,
    BucketKey,
    Option,
    Scored,
    ScoredTable,
    Speedups,
    buckets,
    family,
    harmonic,
    pinned,
    ranked,
    typical_batch,
)
from picker.recommend.uncertainty import ab_at, widened

Pairs = dict[tuple[Option, BucketKey], Speedups]
Corrections = dict[tuple[Option, BucketKey], float]
T = TypeVar("T")


def bucket_speedups(index: EvidenceIndex, costs: CostSource, pairs: Sequence[tuple[Option, Bucket]],
                    policy: Any = None) -> tuple[Pairs, Corrections]:
    """(mean, low, high) speedup of each (option, bucket), and with a policy its learned correction
    (the prediction over the analytic base); pairs are scored once per bucket key."""
    todo = list({(o, b.key): (o, b) for o, b in pairs}.values())  # each (option, task, batch, temperature) once
    if policy is not None:
        return _predicted(index, costs, todo, policy)
    out: Pairs = {}
    for o, b in todo:
        c = cost(index, costs, o, b.batch, b.temperature > 0)
        f = level_factor(index, costs, o, b)
        s = at_cost(index, costs, o, b, c, cost_source(c) == MEASURED)
        out[o, b.key] = widened((f * s[0], f * s[1], f * s[2]), ab_at(costs.intervals, o, b.key), costs.model_error)
    return out, {}


def bucket_speedup(index: EvidenceIndex, costs: CostSource, option: Option, bucket: Bucket) -> Speedups:
    """(mean, low, high) analytic speedup of ``option`` on one bucket (:func:`bucket_speedups` of one pair)."""
    return bucket_speedups(index, costs, [(option, bucket)])[0][option, bucket.key]


def _predicted(index: EvidenceIndex, costs: CostSource, todo: list[tuple[Option, Bucket]],
               policy: Any) -> tuple[Pairs, Corrections]:
    """The fitted estimator's (mean, low, high) over the evidence's α range, in three batched calls."""
    import math

    from policies import feature_matrix  # numpy + the estimator: only with a policy

    cands = [candidate(index, costs.ctx, o, b) for o, b in todo]
    # The roofline step cost does not depend on α: one value serves all three rows.
    step = [cost(index, costs, o, b.batch, b.temperature > 0) for o, b in todo]
    ratios = [c.step_ratio if cand.evidence.cost is None or cost_source(c) == MEASURED else None
              for c, cand in zip(step, cands)]
    X = feature_matrix(cands, ratios)
    mean = policy.predict(X)
    low, _ = policy.predict_interval(feature_matrix(
        [replace(c, evidence=c.evidence.at(c.evidence.alpha_low)) for c in cands], ratios))
    _, high = policy.predict_interval(feature_matrix(
        [replace(c, evidence=c.evidence.at(c.evidence.alpha_high)) for c in cands], ratios))
    out: Pairs = {}
    corrections: Corrections = {}
    for i, ((o, b), m, lo, hi) in enumerate(zip(todo, mean, low, high)):
        f = level_factor(index, costs, o, b)
        out[o, b.key] = widened((f * float(m), f * float(min(lo, m)), f * float(max(hi, m))),
                                ab_at(costs.intervals, o, b.key), costs.model_error)
        corrections[o, b.key] = float(m) / math.exp(float(X[i, 0]))  # column 0: log of the analytic base
    return out, corrections


def _workload_row(profile: WorkloadProfile, index: EvidenceIndex, costs: CostSource, opt: Option,
                  bs: Sequence[Bucket], per: Pairs, batch: int) -> tuple[float, float, float, bool, tuple[str, ...]]:
    """``opt``'s workload speedup (mean, low, high) and feasibility under the profile's latency SLOs."""
    s = [(b.weight, per[opt, b.key]) for b in bs]
    feasible, notes = opt.feasible, opt.notes
    if feasible:  # the profile's latency targets (picker.recommend.latency): broken ones make it infeasible
        priced = [(b, cost(index, costs, opt, b.batch, b.temperature > 0), per[opt, b.key][0]) for b in bs]
        broken = option_slo_notes(profile, costs.ctx, opt.caps.draft_cost, priced)
        feasible, notes = not broken, (*notes, *broken)
    return (harmonic([(w, x[0]) for w, x in s]), harmonic([(w, x[1]) for w, x in s]),
            harmonic([(w, x[2]) for w, x in s]), feasible, notes)


def _grid_pairs(index: EvidenceIndex, lead: Scored, members: list[Option], bs: Sequence[Bucket],
                by_range: bool) -> list[tuple[Option, Bucket]]:
    """What the decision reads beyond the workload's buckets: the leader's temperature grid (its
    switch) and its family's batch grid (the schedule, its break-even α per batch, a shorter deployed
    length) at the workload's temperatures -- and, with ``by_range`` (the engine switches the draft
    length by batch size, so a batch range can have its own temperature switch), at every
    temperature of the grid."""
    temps = [t for t in TEMPERATURE_GRID if scorable(index, lead.plugin, pinned(bs, temperature=t))]
    by_temperature = [b for t in temps for b in pinned(bs, temperature=t)]
    # One bucket per (task, batch, temperature): a speedup does not depend on the weight.
    tasks = dict.fromkeys(b.task for b in bs)
    at = dict.fromkeys([*(temps if by_range else ()), *(b.temperature for b in bs)])
    by_batch = [Bucket(task, batch, t, 1.0) for batch in BATCH_GRID for t in at for task in tasks]
    return [(lead.option, b) for b in by_temperature] + [(o, b) for o in members for b in by_batch]


def score(profile: WorkloadProfile, index: EvidenceIndex, costs: CostSource, options: Sequence[Option] | None = None,
          *, policy: Any = None, path: str = "") -> ScoredTable:
    """Score ``options`` (default: every registered strategy's, ``options.options_for``) on ``profile``.
    Strategies with neither measurements nor a published prior are left out (the decision warns
    about them): there is nothing to score them with."""
    plugins = load_strategies()
    check_named_strategies(profile, plugins, path)
    bs = buckets(profile)
    if options is None:
        options = options_for(profile, plugins, costs.ctx.target)
    ok = {name: scorable(index, p, bs) for name, p in {o.plugin.name: o.plugin for o in options}.items()}
    kept = [o for o in options if ok[o.plugin.name]]
    batch = typical_batch(bs)
    per, corrections = bucket_speedups(index, costs, [(o, b) for o in kept for b in bs], policy)
    rows = [Scored(o, *_workload_row(profile, index, costs, o, bs, per, batch), step_cost(index, costs, o, bs, batch),
                   MappingProxyType({})) for o in kept]
    by_batch: dict[Option, MappingProxyType] = {}
    leaders = ranked(rows)
    if leaders and leaders[0].mean >= NOT_WORTH_IT:  # else speculation stays off: the workload is all it reads
        lead, engine = leaders[0], profile.engine.name
        by_range = runs_batch_schedule(engine, lead.plugin, lead.config.topk, profile.engine.version)
        members = [r.option for r in family(rows, lead)]
        more, more_corr = bucket_speedups(index, costs, _grid_pairs(index, lead, members, bs, by_range), policy)
        per.update(more)
        corrections.update(more_corr)
        # Step costs on the grid and at the workload's own batches: a schedule row states its
        # break-even α at the batch carrying most of its traffic.
        at = sorted({*BATCH_GRID, *(b.batch for b in bs)})
        by_batch = {o: MappingProxyType({b: step_cost(index, costs, o, bs, b) for b in at}) for o in members}
    keyed, corrected = _by_option(per), _by_option(corrections)
    rows = [replace(r, speedups=MappingProxyType(keyed[r.option]),
                    costs_by_batch=by_batch.get(r.option, MappingProxyType({})),
                    measured_levels=tuple(level for level, _ in measured_ratios(index, costs, r.option)),
                    corrections=MappingProxyType(corrected.get(r.option, {})),
                    measured=MappingProxyType({k: m for k in keyed[r.option]
                                               if (m := ab_at(costs.intervals, r.option, k)) is not None}))
            for r in rows]
    strategies = {o.plugin.name: o.plugin for o in kept}
    alphas: dict[tuple[str, str, float], Alpha] = {
        (name, b.task, b.temperature): alpha(index, p, b.task, b.temperature) for name, p in strategies.items()
        for b in bs}
    return ScoredTable(profile, tuple(bs), tuple(rows), batch, MappingProxyType(alphas),
                       unscored=tuple(sorted(n for n, good in ok.items() if not good)),
                       cost_notes=tuple(cost_notes(index, costs, kept)),
                       calibration=costs.calibration.path if costs.calibration else None, cost_kind=costs.kind)


def _by_option(pairs: dict[tuple[Option, BucketKey], T]) -> dict[Option, dict[BucketKey, T]]:
    out: dict[Option, dict[BucketKey, T]] = {}
    for (o, key), s in pairs.items():
        out.setdefault(o, {})[key] = s
    return out

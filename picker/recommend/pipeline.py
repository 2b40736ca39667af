"""`specpick recommend` in one straight line: options → scored table → decision.

    >>> from picker.inputs.workload import load_profile
    >>> rec = recommend(load_profile("profiles/code-assistant-8b-a100.yaml"))   # doctest: +SKIP
    >>> rec.decision.strategy, rec.predicted_speedup.mean                        # doctest: +SKIP
    ('eagle3', 2.4)

:func:`score_workload` is the one scoring stage, shared by ``recommend``, ``--explain``
(``picker.recommend.explain``) and the regret bench (``bench/regret/policy.py``): it scores every
option on the workload's buckets, then the grids the decision reads -- the temperature grid of the
leading option and the batch grid of its family (``table.family``), which is all the decision can
deploy -- into an immutable :class:`~picker.recommend.table.ScoredTable`. The decision
(``picker.recommend.decide``) reads the table and nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from picker.engine.plugins import load_strategies
from picker.inputs.measurements import Measurements
from picker.inputs.workload import WorkloadProfile
from picker.recommend.contract import Recommendation
from picker.recommend.decide import decide
from picker.recommend.options import check_named_strategies, options_for
from picker.recommend.scoring import Scorer
from picker.recommend.table import (
    BATCH_GRID,
    NOT_WORTH_IT,
    TEMPERATURE_GRID,
    Alpha,
    Bucket,
    Option,
    Scored,
    ScoredTable,
    buckets,
    family,
    harmonic,
    pinned,
    ranked,
    typical_batch,
)
from policies import Config, StepCost

if TYPE_CHECKING:  # numpy-free at run time: policies.calibration imports numpy
    from policies import Calibration


def _workload_row(scorer: Scorer, opt: Option, bs: Sequence[Bucket], batch: int) -> Scored:
    """``opt``'s workload speedup (mean, low, high) and feasibility under the p99 ITL SLO."""
    per = [(b.weight, scorer.bucket_speedup(opt, b)) for b in bs]
    feasible, notes = opt.feasible, opt.notes
    slo = scorer.profile.slo.itl_p99_ms
    if slo is not None:
        # A step that accepts nothing emits one token: its whole time is one inter-token gap.
        costs = [scorer.cost(opt, b.batch, b.temperature > 0) for b in bs]
        step_ms = 1e3 * max(c.draft_seconds + c.verify_seconds for c in costs)
        if step_ms > slo and feasible:
            feasible = False
            notes = (*notes, f"a rejected step takes {step_ms:.0f} ms > p99 ITL SLO {slo:g} ms")
    return Scored(opt, harmonic([(w, s[0]) for w, s in per]), harmonic([(w, s[1]) for w, s in per]),
                  harmonic([(w, s[2]) for w, s in per]), feasible, notes, scorer.step_cost(opt, batch),
                  MappingProxyType({}))


def _grids(scorer: Scorer, rows: list[Scored], bs: Sequence[Bucket]) -> dict[tuple[str, Config], dict[int, StepCost]]:
    """Score what the decision may read beyond the workload's buckets: the leader's temperature grid
    (its switch) and its family's batch grid (the schedule, its break-even α per batch, and a shorter
    deployed length). Returns the family's step costs on the batch grid."""
    leaders = ranked(rows)
    if not leaders or leaders[0].mean < NOT_WORTH_IT:
        return {}  # speculation stays off: the decision reads the workload's buckets only
    lead = leaders[0]
    by_temperature = [b for t in TEMPERATURE_GRID if scorer.has_evidence(lead.plugin, pinned(bs, temperature=t))
                      for b in pinned(bs, temperature=t)]
    scorer.prime([lead.option], by_temperature)
    for b in by_temperature:
        scorer.bucket_speedup(lead.option, b)
    members = [r.option for r in family(rows, lead)]
    # Batch x temperature where the leader has evidence: each batch range's own temperature switch.
    temps = sorted({b.temperature for b in by_temperature})
    by_batch = [b for batch in BATCH_GRID for t in temps for b in pinned(pinned(bs, batch=batch), temperature=t)]
    by_batch += [b for batch in BATCH_GRID for b in pinned(bs, batch=batch)]
    scorer.prime(members, by_batch)
    for o in members:
        for b in by_batch:
            scorer.bucket_speedup(o, b)
    return {(o.plugin.name, o.config): {batch: scorer.step_cost(o, batch) for batch in BATCH_GRID} for o in members}


def score_workload(scorer: Scorer, options: Sequence[Option] | None = None, *, path: str = "") -> ScoredTable:
    """Score ``options`` (default: every registered strategy's, ``options.options_for``) on the
    scorer's profile. Strategies with neither measurements nor a published prior are left out
    (the decision warns about them): there is nothing to score them with."""
    profile = scorer.profile
    plugins = load_strategies()
    check_named_strategies(profile, plugins, path)
    bs = buckets(profile)
    if options is None:
        options = options_for(profile, plugins, scorer.ctx.target)
    scorable = {name: scorer.has_evidence(p, bs) for name, p in {o.plugin.name: o.plugin for o in options}.items()}
    kept = [o for o in options if scorable[o.plugin.name]]
    batch = typical_batch(bs)
    scorer.prime(kept, bs)
    rows = [_workload_row(scorer, o, bs, batch) for o in kept]
    costs = _grids(scorer, rows, bs)
    # Frozen copies of the scorer's memo: the table no longer changes when the scorer does.
    rows = [Scored(r.option, r.mean, r.low, r.high, r.feasible, r.notes, r.cost,
                   MappingProxyType(scorer.speedups(r.option)), MappingProxyType(costs.get((r.plugin.name, r.config), {})),
                   tuple(level for level, _ in scorer.measured_ratios(r.option)))
            for r in rows]
    strategies = {o.plugin.name: o.plugin for o in kept}
    alphas: dict[tuple[str, str, float], Alpha] = {
        (name, b.task, b.temperature): scorer.alpha(p, b.task, b.temperature) for name, p in strategies.items()
        for b in bs}
    return ScoredTable(profile, tuple(bs), tuple(rows), batch, MappingProxyType(alphas),
                       unscored=tuple(sorted(n for n, ok in scorable.items() if not ok)),
                       cost_notes=tuple(scorer.cost_notes(kept)),
                       calibration=scorer.calibration.path if scorer.calibration else None)


def recommend(profile: WorkloadProfile, measurements: Measurements | None = None, *, path: str = "",
              policy: Any = None, measured_costs: bool | None = None,
              verify_curve: Sequence[tuple[float, float]] | None = None,
              calibration: Calibration | None = None) -> Recommendation:
    """Build the :class:`~picker.recommend.contract.Recommendation` for ``profile``.

    ``policy`` is a fitted ``policies.SpeedupEstimator`` (``policies.load_policy``); without one the
    analytic model scores every option. See :class:`~picker.recommend.scoring.Scorer` for
    ``measured_costs``, ``verify_curve`` and ``calibration`` (``policies.calibration_for``).
    """
    scorer = Scorer(profile, measurements, policy, measured_costs=measured_costs, verify_curve=verify_curve,
                    calibration=calibration)
    from picker.recommend.provenance_labels import with_provenance

    return with_provenance(decide(score_workload(scorer, path=path), path=path), profile, measurements)

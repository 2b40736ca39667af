"""The numbers behind ``specpick report``: the Recommendation plus the series its plots draw.

One scoring pass (the same Scorer, options and buckets as ``recommend --explain``) gives the
decision and every curve, so the page never shows a number the decision did not use.

    >>> from picker.inputs.workload import load_profile
    >>> data = gather(load_profile("profiles/chat-70b-h100.yaml"), None, path="chat")   # doctest: +SKIP
    >>> data.rec["decision"]["strategy"], data.gain_batch[0].label                      # doctest: +SKIP
    ('eagle3', 'eagle3 depth 6, top-k 8')
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from picker.inputs.measurements import Measurements
from picker.inputs.workload import WorkloadProfile
from picker.recommend.contract import Recommendation
from picker.recommend.scoring import Scorer
from picker.recommend.table import BATCH_GRID, Bucket, Option, harmonic, pinned

PLOT_DEPTHS = tuple(range(1, 9))


@dataclass(frozen=True)
class Series:
    """One predicted curve: speedup (mean, low, high) against x."""

    label: str
    x: tuple[float, ...]
    mean: tuple[float, ...]
    low: tuple[float, ...]
    high: tuple[float, ...]


@dataclass(frozen=True)
class AlphaPoint:
    """The α one strategy's best configuration uses on one task type (heaviest bucket), with its interval."""

    task: str
    strategy: str
    alpha: float
    low: float
    high: float
    source: str


@dataclass(frozen=True)
class MeasuredCell:
    """A measured cell set against what the model predicts: α against the cited prior, and tokens
    per verify step against the i.i.d. chain model E[L] = (1 - a^(N+1)) / (1 - a) of its own α."""

    task: str
    strategy: str
    temperature: float
    num_draft_tokens: int
    alpha: float
    alpha_ci: tuple[float, float]
    prior_alpha: float
    prior_range: tuple[float, float]
    tau: float | None
    predicted_tau: float | None


@dataclass
class ReportData:
    """Everything the page shows; ``rec`` is the Recommendation's JSON contract."""

    rec: dict[str, Any]
    alpha: list[AlphaPoint]
    gain_n: list[Series]
    gain_batch: list[Series]
    measured: list[MeasuredCell]
    notes: list[str] = field(default_factory=list)
    # The Recommendation's engine configs as built, not through JSON: TensorRT-LLM's draft_len_schedule
    # has integer keys, which a JSON round trip turns into strings (the pasted YAML must keep them).
    engine_configs: dict[str, Any] | None = None


def crossover(xs: tuple[float, ...], ys: tuple[float, ...], log_x: bool = False) -> float | None:
    """The first x where the curve crosses speedup 1 (linear interpolation, in log x when asked).

        >>> round(crossover((1, 2, 4), (1.5, 1.2, 0.8), log_x=True), 3)
        2.828
    """
    for (x0, y0), (x1, y1) in zip(zip(xs, ys), zip(xs[1:], ys[1:])):
        if (y0 - 1.0) * (y1 - 1.0) <= 0 and y0 != y1:
            t = (1.0 - y0) / (y1 - y0)
            if log_x:
                return float(2 ** (math.log2(x0) + t * (math.log2(x1) - math.log2(x0))))
            return float(x0 + t * (x1 - x0))
    return None


def _curve(scorer: Scorer, opt: Option, bs: list[Bucket]) -> tuple[float, float, float]:
    per = [scorer.bucket_speedup(opt, b) for b in bs]
    return tuple(harmonic([(b.weight, s[i]) for b, s in zip(bs, per)]) for i in range(3))  # type: ignore[return-value]


def _chosen(options: list[Option], rec: Recommendation) -> Option | None:
    d = rec.decision
    for o in options:
        c = o.config
        if o.plugin.name != d.strategy or c.depth != d.num_speculative_tokens or c.is_tree != (d.tree is not None):
            continue
        if d.tree is None or (c.topk, c.num_draft_tokens) == (d.tree.topk, d.tree.num_draft_tokens):
            return o
    return None


def gain_series(scorer: Scorer, options: list[Option], bs: list[Bucket],
                rec: Recommendation) -> tuple[list[Series], list[Series]]:
    """(against N: every deployable strategy's chains; against batch: the deployed configuration).
    ``options``: the deployable ones (the scored table's rows that are)."""
    by_n = []
    for name in dict.fromkeys(o.plugin.name for o in options):
        chains = sorted((o for o in options if o.plugin.name == name and not o.config.is_tree
                         and o.config.depth in PLOT_DEPTHS), key=lambda o: o.config.depth)
        if not chains:
            continue
        scorer.prime(chains, bs)
        pts = [_curve(scorer, o, bs) for o in chains]
        by_n.append(Series(f"{name} chain", tuple(float(o.config.depth) for o in chains),
                           *(tuple(p[i] for p in pts) for i in range(3))))
    chosen = _chosen(options, rec)
    by_batch = []
    if chosen is not None:
        per_batch = [pinned(bs, batch=b) for b in BATCH_GRID]
        scorer.prime([chosen], [x for p in per_batch for x in p])
        pts = [_curve(scorer, chosen, p) for p in per_batch]
        by_batch.append(Series(f"{chosen.plugin.name} {chosen.config.label}", tuple(float(b) for b in BATCH_GRID),
                               *(tuple(p[i] for p in pts) for i in range(3))))
    return by_n, by_batch


def alpha_points(scorer: Scorer, options: list[Option], bs: list[Bucket]) -> list[AlphaPoint]:
    """Per task type, the α each deployable strategy's best configuration rests on there."""
    out = []
    usable = list(options)
    for task in dict.fromkeys(b.task for b in bs):
        tb = [b for b in bs if b.task == task]
        heavy = max(tb, key=lambda b: b.weight)
        scorer.prime(usable, tb)
        best: dict[str, tuple[float, Option]] = {}
        for o in usable:
            s = _curve(scorer, o, tb)[0]
            if o.plugin.name not in best or s > best[o.plugin.name][0]:
                best[o.plugin.name] = (s, o)
        for name, (_, o) in best.items():
            ev = scorer.candidate(o, heavy).evidence
            out.append(AlphaPoint(task, name, ev.alpha, ev.alpha_low, ev.alpha_high, ev.source))
    return out


def measured_cells(scorer: Scorer, measurements: Measurements | None, tasks: set[str]) -> list[MeasuredCell]:
    """Chain cells of the measurements on the profile's task types, against the model's predictions."""
    if measurements is None:
        return []
    from policies import expected_length_iid

    out = []
    for c in measurements.cells:
        if c.tree is not None or not c.num_draft_tokens or c.task not in tasks:
            continue
        try:
            prior = scorer.priors.lookup(c.strategy, c.task, c.temperature)
        except ValueError:  # a plugin or task the priors do not cover: nothing to set it against
            continue
        a = c.chain_alpha
        out.append(MeasuredCell(c.task, c.strategy, c.temperature, c.num_draft_tokens, a,
                                tuple(c.alpha_iid_ci or c.alpha_ci),  # type: ignore[arg-type]
                                prior.alpha, (prior.alpha_low, prior.alpha_high), c.tau,
                                float(expected_length_iid(a, c.num_draft_tokens))))
    return out


def gather(profile: WorkloadProfile, measurements: Measurements | None, *, path: str = "",
           policy_path: Path | None = None, calibration_path: Path | None = None,
           measurements_path: Path | None = None) -> ReportData:
    """Score the workload once and collect the decision and every series the page draws."""
    from picker.inputs.verify_curve import verify_curve_beside
    from picker.recommend.decide import decide
    from picker.recommend.pipeline import score_workload
    from picker.recommend.provenance_labels import with_provenance

    notes, policy, measured_costs = [], None, None
    if policy_path is not None:
        from policies import load_policy

        art = load_policy(policy_path)
        ok, why = art.covers(profile.hardware.gpu, profile.engine.name, profile.model_shape().params)
        if ok:
            policy, measured_costs = art.estimator, art.card.get("measured_costs")
            notes.append(f"learned correction applied ({policy_path})")
        else:
            notes.append(f"learned correction NOT applied: {why}")
    cal = None
    if calibration_path is not None:
        from policies import calibration_for

        # The engine constants fitted on a GPU run replace the load curve's (the same rule as recommend's).
        cal = calibration_for(calibration_path, profile.engine.name, profile.hardware.gpu)
        notes.append(cal.note)
    scorer = Scorer(profile, measurements, policy, measured_costs=measured_costs,
                    verify_curve=verify_curve_beside(measurements_path), calibration=cal)
    table = score_workload(scorer, path=path)
    bs = list(table.buckets)
    options = [r.option for r in table.rows if r.deployable]
    rec = with_provenance(decide(table, path=path), profile, measurements)
    by_n, by_batch = gain_series(scorer, options, bs, rec)
    return ReportData(rec=rec.model_dump(mode="json"), alpha=alpha_points(scorer, options, bs), gain_n=by_n,
                      gain_batch=by_batch, measured=measured_cells(scorer, measurements, {b.task for b in bs}),
                      notes=notes, engine_configs=rec.engine_configs)

"""The cost source: what one speculative step costs, chosen once per recommendation and recorded.

:func:`choose_costs` picks one :class:`CostSource` -- ``measured`` (the measurements' step costs
transfer to the deployment: their measured gain against concurrency inside its measured levels,
per-step timings elsewhere, the load curve beyond), ``calibrated`` (the load curve with constants
from a calibration file) or ``modelled`` (the shipped load curve) -- and the functions below price a
configuration at a batch with it. Like the evidence index they are plain functions of immutable
data; their caches only save recomputation.

    >>> from picker.inputs.workload import load_profile
    >>> profile = load_profile("profiles/chat-70b-h100.yaml")                       # doctest: +SKIP
    >>> choose_costs(profile, index_evidence(profile, None), None).kind             # doctest: +SKIP
    'modelled'

Measured gains become step costs by inversion: each gain g on (task, level, temperature) gives
the step ratio R at which the model's speedup at the measured α equals g (:func:`measured_ratios`);
a measured configuration's siblings carry the factor by which its gain is off its own timing-based
prediction (:func:`level_factor`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

from picker.inputs.measurements import TEMPERATURE_MATCH, Measurements
from picker.inputs.workload import WorkloadProfile
from picker.recommend.evidence_index import CACHE, EvidenceIndex, candidate, evidence_at
from picker.recommend.measured_load import (
    MEASURED,
    AnchoredStepCost,
    MeasuredGain,
    MeasuredStepCost,
    cost_source,
    gain_curves,
    interpolate,
    pooled,
    with_ratio,
)
from picker.recommend.table import Bucket, Option, Speedups, pinned
from picker.recommend.uncertainty import ABGain, ab_gains
from policies import (
    CPU_HELD_OUT_ERROR,
    HELD_OUT_ERROR,
    Config,
    CostContext,
    ModelShape,
    StepCost,
    base_range,
    config_cost,
    engine_curve,
    expected_length,
    step_ratio,
)

if TYPE_CHECKING:  # numpy-free at run time: policies.calibration imports numpy
    from policies import Calibration

CostKind = Literal["measured", "calibrated", "modelled"]


@dataclass(frozen=True)
class EngineOverhead:
    """A live engine's cost of speculation beyond the forwards the load curve prices, in plain decode
    steps of that engine (the terms of ``picker.profiler.overhead``): ``per_step`` on every step once
    speculation is enabled, ``per_draft_step`` on a step that drafted, ``per_draft_token`` per drafted
    token. The load curve prices a step that drafts, so all three apply to it."""

    per_step: float = 0.0
    per_draft_step: float = 0.0
    per_draft_token: float = 0.0

    def at(self, drafted: int) -> float:
        """Plain steps a step drafting ``drafted`` tokens pays on top of its forwards."""
        return self.per_step + (self.per_draft_step + self.per_draft_token * drafted if drafted else 0.0)


NO_OVERHEAD = EngineOverhead()


@dataclass(frozen=True, eq=False)
class CostSource:
    """One choice of step costs for a recommendation.

    ``ctx`` is the load curve every step the measurements do not price is priced on (its constants
    from ``calibration`` where a file was given; another engine's curve where the caller names one:
    ``bench.regret.load`` prices the reference loop itself, ``hf``, which no profile's engine names).
    ``gains``: the measured gain against concurrency per configuration, empty unless ``kind`` is
    ``measured``; ``unused_gains``: the measurements had such curves but their costs do not transfer.
    """

    kind: CostKind
    ctx: CostContext
    gains: Mapping[tuple[str, Config], tuple[MeasuredGain, ...]]
    calibration: Calibration | None = None
    source: str = ""
    unused_gains: bool = False
    # The A/B gains with their intervals (picker.recommend.uncertainty.ab_gains), where the
    # measurements' costs transfer: a gain measured on another deployment says nothing of this one's.
    intervals: Mapping[tuple[str, Config], tuple[ABGain, ...]] = field(default_factory=dict)
    # The model's own relative error on this deployment's speedups (policies.HELD_OUT_ERROR, on a CPU
    # CPU_HELD_OUT_ERROR): every predicted range carries it (picker.recommend.uncertainty.widened).
    model_error: float = HELD_OUT_ERROR
    # What speculation costs on the live engine beyond the tokens it verifies (EngineOverhead): none
    # until a per-engine fit (policies/data/engine_overhead.json, picker.profiler.overhead) is wired in.
    overhead: EngineOverhead = field(default_factory=lambda: NO_OVERHEAD)


def shape_of(resolved: object) -> ModelShape:  # ResolvedModelShape -> roofline ModelShape
    return ModelShape(**resolved.roofline_kwargs(), name=resolved.name)  # type: ignore[attr-defined]


def cost_context(profile: WorkloadProfile) -> CostContext:
    """The load curve's view of the deployment: target and draft shapes, hardware, engine, context."""
    target = shape_of(profile.model_shape())
    draft = None
    dm = profile.drafters.draft_model
    if dm is not None:
        draft = ModelShape.from_params(dm.params_b * 1e9, target.bytes_per_param)
    t = profile.traffic
    context = int(t.prompt_tokens.expected() + t.output_tokens.expected() / 2)
    return CostContext(target, profile.hardware.spec, profile.engine.name, context, profile.hardware.count, draft)


def choose_costs(profile: WorkloadProfile, index: EvidenceIndex, measurements: Measurements | None,
                 calibration: Calibration | None = None, engine: str | None = None) -> CostSource:
    """The cost source of a recommendation: measured where the index says step costs transfer
    (``EvidenceIndex.measured_costs``), else the load curve, calibrated where a file is given."""
    ctx = cost_context(profile)
    if engine is not None:
        ctx = replace(ctx, engine=engine)
    if calibration is not None:  # the file's constants replace the engine curve's (policies.calibration_for)
        ctx = replace(ctx, engine=engine_curve(  # type: ignore[arg-type]
            engine or profile.engine.name, calibration.overrides, label=calibration.label))
    curves = gain_curves(measurements)
    kind: CostKind = "measured" if index.measured_costs and measurements is not None else \
        "calibrated" if calibration is not None else "modelled"
    return CostSource(kind, ctx, curves if index.measured_costs else {}, calibration,
                      getattr(measurements, "source", "") or "", bool(curves) and not index.measured_costs,
                      ab_gains(measurements) if index.measured_costs else {},
                      CPU_HELD_OUT_ERROR if profile.hardware.gpu == "cpu" else HELD_OUT_ERROR)


@functools.lru_cache(maxsize=CACHE)
def model_cost(costs: CostSource, option: Option, batch: int, sampled: bool = False) -> StepCost:
    """The load curve's step cost (``policies.config_cost``), calibrated where a file was given, plus
    the live engine's overhead of speculation (``CostSource.overhead``) on the verify side."""
    step = config_cost(option.caps, option.config, costs.ctx, batch, sampled=sampled)
    extra = costs.overhead.at(step.n_draft)
    return replace(step, verify_seconds=step.verify_seconds + extra * step.plain_seconds) if extra else step


def at_cost(index: EvidenceIndex, costs: CostSource, option: Option, bucket: Bucket, price: StepCost,
            use_ratio: bool) -> Speedups:
    """(mean, low, high) analytic speedup on ``bucket`` at step cost ``price``; ``use_ratio``: its ratio
    replaces the measured cost evidence's own (the measured curve outranks the per-step timings)."""
    c = option.config
    ev = evidence_at(index, option.plugin, bucket.task, bucket.temperature, 0 if c.is_tree else c.depth, bucket.batch)
    if ev.cost is None and not ev.per_position:  # α alone: the load curve's cost model, E[L] / R
        step = price.draft_seconds + price.verify_seconds  # as policies.speedup computes it, E[L]·T_plain/T_step
        mean, low, high = (length * price.plain_seconds / step
                           for length in _lengths(c, ev.alpha, ev.alpha_low, ev.alpha_high))
        return mean, low, high
    # per-position acceptance and/or measured step costs
    return base_range(candidate(index, costs.ctx, option, bucket),
                      price.step_ratio if ev.cost is None or use_ratio else None)


@functools.lru_cache(maxsize=CACHE)
def _lengths(config: Config, *alphas: float) -> tuple[float, ...]:
    """E[L] of ``config`` at each α (``policies.expected_length``): it does not depend on the batch,
    so one value serves every batch a bucket is scored at."""
    return tuple(expected_length(config, a) for a in alphas)


@functools.lru_cache(maxsize=CACHE)
def measured_ratios(index: EvidenceIndex, costs: CostSource, option: Option) -> tuple[tuple[int, float], ...]:
    """(level, step ratio) from the measured gains of ``option``'s configuration (empty when it has
    no curve, or when step costs do not transfer from the measurements).

    Every speedup here has the form A / (B + S·R) (E[L] / R, or with the prefill F:
    (F + T − 1) / (F + S·R)), so 1 / speedup is linear in R and two evaluations invert it. R is
    floored at 1 (a step never costs less than a plain one) and pooled over tasks and temperatures
    per level (:func:`~picker.recommend.measured_load.pooled`).
    """
    per_level: dict[int, list[float]] = {}
    for m in costs.gains.get((option.plugin.name, option.config), ()):
        bucket = Bucket(m.task, m.concurrency, m.temperature, 1.0)
        model = model_cost(costs, option, m.concurrency, m.temperature > 0)
        f1 = at_cost(index, costs, option, bucket, with_ratio(model, 1.0), True)[0]
        f2 = at_cost(index, costs, option, bucket, with_ratio(model, 2.0), True)[0]
        slope = 1.0 / f2 - 1.0 / f1
        if f1 <= 0 or f2 <= 0 or slope <= 0:
            continue  # no acceptance to divide by: this group says nothing about the step cost
        ratio = 1.0 + (1.0 / m.gain - 1.0 / f1) / slope
        per_level.setdefault(m.concurrency, []).append(max(ratio, 1.0))
    return pooled(per_level) if len(per_level) >= 2 else ()


@functools.lru_cache(maxsize=CACHE)
def cost(index: EvidenceIndex, costs: CostSource, option: Option, batch: int, sampled: bool = False) -> StepCost:
    """The step cost of ``option`` at ``batch``, sampling (temperature > 0) or not: from the measured
    gain against concurrency inside its measured levels (measured at every temperature, so the same
    either way), else the load curve's. Every speedup, break-even α and schedule row reads it here."""
    model = model_cost(costs, option, batch, sampled)
    points = measured_ratios(index, costs, option)
    ratio = interpolate(points, batch)
    if ratio is None:
        return model
    return with_ratio(model, ratio, MeasuredStepCost, levels=tuple(level for level, _ in points), source=costs.source)


def step_cost(index: EvidenceIndex, costs: CostSource, option: Option, bs: Sequence[Bucket], batch: int) -> StepCost:
    """The step cost the speedups at ``batch`` are priced with, as one number for the workload ``bs``:
    :func:`cost` where the measured gain curve or the load curve alone prices them; where the
    evidence carries per-step costs measured at one concurrency (which the speedups prefer to the
    load curve), their ratio at ``batch`` weighted by the traffic (an :class:`AnchoredStepCost`).
    Break-even α, the plan's "one step costs" line and the SDK's R table read this, so they say
    what the speedups were computed with (each bucket at its own temperature's cost)."""
    plain = cost(index, costs, option, batch)
    if cost_source(plain) == MEASURED:
        return plain
    pairs, anchor = [], None
    depth = 0 if option.config.is_tree else option.config.depth
    for b in pinned(bs, batch=batch):
        if evidence_at(index, option.plugin, b.task, b.temperature, depth, batch).cost is None:
            pairs.append((b.weight, cost(index, costs, option, batch, b.temperature > 0).step_ratio))
        else:
            cand = candidate(index, costs.ctx, option, b)
            pairs.append((b.weight, step_ratio(cand)))
            anchor = cand.evidence.cost.batch
    total = sum(w for w, _ in pairs)
    if anchor is None or total <= 0:
        return plain
    return with_ratio(plain, sum(w * r for w, r in pairs) / total, AnchoredStepCost, measured_at=anchor)


def level_factor(index: EvidenceIndex, costs: CostSource, option: Option, bucket: Bucket) -> float:
    """How far a measured sibling's gain is off what its step timings predict, at the bucket's batch:
    the factor that carries to ``option`` (1 where it does not apply).

    Step timings price a request's steps; a profiled gain at concurrency C is a throughput ratio
    over whole waves, whose requests finish at different steps while their batch drains
    (``picker.profiler``'s static waves), besides anything else the per-step pricing misses. The
    configuration the profile ran carries that in its own measured curve (:func:`cost`); a sibling
    (the same strategy, another draft length or a tree) priced from the timings alone would not. So
    at each measured level above the lowest, the measured configuration's gain over its
    timing-based prediction on the same task and temperature is a factor, 1 at the lowest level (its
    timings are that level's own), interpolated in log concurrency between levels and never
    extrapolated. The sibling nearest in depth is used."""
    if not costs.gains or cost_source(cost(index, costs, option, bucket.batch)) == MEASURED:
        return 1.0
    return _level_factor(index, costs, option, bucket.task, bucket.temperature, bucket.batch)


@functools.lru_cache(maxsize=CACHE)
def _level_factor(index: EvidenceIndex, costs: CostSource, option: Option, task: str, temperature: float,
                  batch: int) -> float:
    sibs = [(cfg, ms) for (name, cfg), ms in costs.gains.items()
            if name == option.plugin.name and cfg != option.config]
    if not sibs:
        return 1.0
    cfg, ms = min(sibs, key=lambda s: (abs(s[0].depth - option.config.depth), s[0].depth))
    sib = replace(option, config=cfg)
    mine = sorted((m.concurrency, m.gain) for m in ms
                  if m.task == task and abs(m.temperature - temperature) <= TEMPERATURE_MATCH)
    points = []
    for level, gain in mine:
        if level == mine[0][0]:
            points.append((level, 1.0))
            continue
        b = Bucket(task, level, temperature, 1.0)
        pred = at_cost(index, costs, sib, b, model_cost(costs, sib, level, temperature > 0), False)[0]
        if pred > 0:
            points.append((level, gain / pred))
    return interpolate(points, batch) or 1.0


def cost_notes(index: EvidenceIndex, costs: CostSource, options: Sequence[Option]) -> list[str]:
    """What the step costs of ``options`` rest on beyond the load curve, one sentence each."""
    notes = [costs.calibration.note] if costs.calibration is not None else []
    source = costs.source or "the measurements"
    if costs.unused_gains:
        notes.append(f"the gain against concurrency in {source} is not used: step costs do not transfer from "
                     "those measurements to this deployment (see the provenance note); the load curve "
                     "prices every batch size")
    curves: dict[tuple[int, ...], list[str]] = {}
    for o in options:
        levels = tuple(level for level, _ in measured_ratios(index, costs, o))
        if levels:
            curves.setdefault(levels, []).append(f"{o.plugin.name} {o.config.label}")
    for levels, names in curves.items():
        notes.append(f"step costs of {', '.join(names)} at batch {levels[0]}-{levels[-1]} are measured: the gain "
                     f"against concurrency in {source} (levels {', '.join(map(str, levels))}), interpolated in "
                     "log concurrency; outside that range, and for every other configuration, the cost model "
                     "prices them, never extrapolated from the measurements")
    return notes

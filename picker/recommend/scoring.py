"""Scoring: the speedup of every (option, bucket) pair, from measurements, priors and the cost model.

:class:`Scorer` turns evidence (measured cells where they exist, cited priors otherwise) and step
costs into (mean, low, high) speedups; ``picker.recommend.pipeline`` runs it over a workload into a
:class:`~picker.recommend.table.ScoredTable`. Step costs, in order of trust: the measured gain
against concurrency inside its measured levels (``picker.recommend.measured_load``), per-step
timings measured at one concurrency, the load curve (its constants from a calibration file where
one is given, ``policies.calibration_for``).

    >>> from picker.inputs.workload import load_profile
    >>> from picker.engine.plugins import load_strategies
    >>> profile = load_profile("profiles/code-assistant-8b-a100.yaml")            # doctest: +SKIP
    >>> sc = Scorer(profile, None)                                                # doctest: +SKIP
    >>> sc.alpha(load_strategies()["ngram"], "code", 0.0).source                  # doctest: +SKIP
    'prior'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from picker.engine.plugins import StrategyPlugin
from picker.inputs.measurements import TEMPERATURE_MATCH, Cell, Measurements
from picker.inputs.provenance import costs_transfer
from picker.inputs.workload import WorkloadProfile
from picker.recommend.measured_load import (
    MEASURED,
    AnchoredStepCost,
    MeasuredStepCost,
    cost_source,
    gain_curves,
    interpolate,
    pooled,
    with_ratio,
)
from picker.recommend.table import Alpha, Bucket, BucketKey, Option, Speedups, buckets, pinned
from policies import (
    Candidate,
    CostContext,
    CostEvidence,
    Evidence,
    ModelShape,
    StepCost,
    base_range,
    config_cost,
    engine_curve,
    evidence_from_cell,
    live_step_points,
    load_priors,
    speedup,
    step_ratio,
)

if TYPE_CHECKING:  # numpy-free at run time: policies.calibration imports numpy
    from policies import Calibration

__all__ = ["Alpha", "Bucket", "Option", "Scorer", "cost_context", "shape_of"]


class Scorer:
    """Speedups of options on buckets, with the evidence and step costs cached.

    Every speedup comes from a candidate row (``policies.features.Candidate``): the analytic model
    alone by default, or a fitted policy estimator (``policies.estimator.SpeedupEstimator``) when
    ``policy`` is given -- then rows are scored in batches (:meth:`prime`), since one call per row
    would cost a millisecond each. ``measured_costs`` uses the step costs of the measured cells
    (and ``verify_curve``) instead of the roofline; by default only when the measurements were
    taken on the profile's own engine (a torch-backend profile says nothing about an engine's costs);
    the measured gain against concurrency is a step cost too and obeys the same rule. ``calibration``
    replaces load-curve constants. ``engine`` names the load curve that prices steps when it is not
    the profile's engine's: ``bench.regret.load`` prices the reference loop itself (``hf``, eager
    PyTorch), which no profile's engine names.
    """

    def __init__(self, profile: WorkloadProfile, measurements: Measurements | None, policy: Any = None, *,
                 measured_costs: bool | None = None,
                 verify_curve: Sequence[tuple[float, float]] | None = None,
                 calibration: Calibration | None = None, engine: str | None = None) -> None:
        self.profile = profile
        self.measurements = measurements
        self.policy = policy
        self.priors = load_priors()
        self.ctx = cost_context(profile)
        self.calibration = calibration
        if engine is not None:
            self.ctx = replace(self.ctx, engine=engine)
        if calibration is not None:  # the file's constants replace the engine curve's (policies.calibration_for)
            self.ctx = replace(self.ctx, engine=engine_curve(  # type: ignore[arg-type]
                engine or profile.engine.name, calibration.overrides, label=calibration.label))
        # Costs transfer only from the deployment's own engine and hardware (picker.inputs.provenance).
        self.measured_costs = costs_transfer(profile, measurements, measured_costs)
        self.verify_curve = tuple(verify_curve) if verify_curve else None
        # Gain against concurrency, per configuration: a step cost, so it obeys the same rule.
        self.gain_curves = gain_curves(measurements)
        self._evidence: dict[tuple[str, str, float, int], Evidence] = {}
        self._evidence_at: dict[tuple[str, str, float, int, int], Evidence] = {}
        # Memo tables per option (options hash by identity): the scorer's own, never the option's.
        self._costs: dict[Option, dict[tuple[int, bool], StepCost]] = {}
        self._step_costs: dict[Option, dict[int, StepCost]] = {}
        self._ratios: dict[Option, tuple[tuple[int, float], ...]] = {}
        self._speedups: dict[Option, dict[BucketKey, Speedups]] = {}
        self._factors: dict[tuple[Option, BucketKey], float] = {}

    def has_evidence(self, plugin: StrategyPlugin, bs: Sequence[Bucket]) -> bool:
        """Measured cells near every bucket, or a cited prior: without either it cannot be scored."""
        return plugin.name in self.priors.data.strategies or all(
            self._cells(plugin.name, b.task, b.temperature) for b in bs)

    def _cells(self, name: str, task: str, temperature: float) -> list[Cell]:
        """Measured chain cells of one strategy × task at the nearest measured temperature."""
        if self.measurements is None:
            return []
        near = [c for c in self.measurements.cells if c.strategy == name and c.task == task and c.tree is None
                and abs(c.temperature - temperature) <= TEMPERATURE_MATCH]
        if not near:
            return []
        t = min(near, key=lambda c: abs(c.temperature - temperature)).temperature
        return [c for c in near if c.temperature == t]

    def _live_points(self, name: str, cell: Cell) -> tuple[tuple[float, float], ...]:
        """Step ratios implied by the live cells of this strategy at ``cell``'s temperature."""
        assert self.measurements is not None
        same = [c for c in self.measurements.cells if c.strategy == name and c.tree is None
                and c.temperature == cell.temperature and c.concurrency == cell.concurrency]
        return live_step_points(same)

    def _probe(self, name: str, cell: Cell) -> Cell | None:
        """A chain cell of the same strategy at another length, any task (drafting cost does not
        depend on the text), to split the drafting cost: the same temperature first (sampling
        drafts cost more than greedy ones), then the length farthest from ``cell``'s, the same
        task, the most samples."""
        if self.measurements is None:
            return None
        others = [c for c in self.measurements.cells if c.strategy == name and c.tree is None
                  and c.num_draft_tokens and c.num_draft_tokens != cell.num_draft_tokens
                  and c.concurrency == cell.concurrency]
        if not others:
            return None
        return max(others, key=lambda c: (c.temperature == cell.temperature,
                                          abs((c.num_draft_tokens or 0) - (cell.num_draft_tokens or 0)),
                                          c.task == cell.task, c.samples))

    def evidence(self, plugin: StrategyPlugin, task: str, temperature: float, depth: int = 0) -> Evidence:
        """Measured where a chain cell exists (the one at this depth, else the deepest: its
        per-position rates cover every shorter chain), else the cited prior.

        Published tree results give an equivalent-chain α that already contains the tree's sibling
        gains; for strategies that draft trees we take the prior's chain α instead (EAGLE-1 Table 5
        ratio) and let the tree model add the siblings back, so they are not counted twice.
        """
        key = (plugin.name, task, temperature, depth)
        ev = self._evidence.get(key)
        if ev is not None:
            return ev
        cells = self._cells(plugin.name, task, temperature)
        if cells:
            exact = [c for c in cells if c.num_draft_tokens == depth]
            # The lowest concurrency measured: acceptance does not depend on it, but the per-step
            # timings do, and the cost model reads them as one sequence's (the measured gain
            # against concurrency enters through ``cost``).
            cell = max(exact or cells, key=lambda c: ((c.num_draft_tokens or 0), -c.concurrency, c.samples))
            ev = evidence_from_cell(cell, plugin.capabilities, self.verify_curve,
                                    self.measurements.source if self.measurements else "",
                                    probe=self._probe(plugin.name, cell))
            if ev.cost is None and self.measured_costs and (points := self._live_points(plugin.name, cell)):
                # A live engine: no step timings, but tokens/s against plain at measured lengths.
                ev = replace(ev, cost=CostEvidence(0.0, draft_share=ev.draft_share, step_points=points,
                                                     batch=cell.concurrency))
            if ev.cost is None or not self.measured_costs:
                ev = replace(ev, cost=None)
            else:  # the fixed per-generation time (prefill) is spread over the workload's output length
                out = self.profile.traffic.output_tokens.expected()
                ev = replace(ev, cost=replace(ev.cost, output_tokens=out))
        elif depth:
            ev = self.evidence(plugin, task, temperature)  # the prior does not depend on depth
        else:
            p = self.priors.lookup(plugin.name, task, temperature)
            scale = p.alpha_chain / p.alpha if plugin.capabilities.tree and p.alpha > 0 else 1.0
            ev = Evidence(p.alpha * scale, p.alpha_low * scale, min(p.alpha_high * scale, 1.0),
                          "prior", citations=tuple(p.citations))
        self._evidence[key] = ev
        return ev

    def evidence_at(self, plugin: StrategyPlugin, task: str, temperature: float, depth: int, batch: int) -> Evidence:
        """:meth:`evidence` with its step timings from the cell measured at concurrency ``batch``
        where the measurements have one (the same strategy, task and temperature; the cell at this
        depth, else the deepest), so a level the profile measured prices every draft length with
        timings taken there; acceptance stays the lowest level's. Elsewhere the lowest level's
        timings, carried to ``batch`` by the cost model (``policies.features.step_ratio``)."""
        ev = self.evidence(plugin, task, temperature, depth)
        if ev.cost is None or ev.cost.step_points or ev.cost.batch == batch:
            return ev
        key = (plugin.name, task, temperature, depth, batch)
        done = self._evidence_at.get(key)
        if done is not None:
            return done
        cells = [c for c in self._cells(plugin.name, task, temperature) if c.concurrency == batch]
        exact = [c for c in cells if c.num_draft_tokens == depth]
        timed = None
        if cells:
            cell = max(exact or cells, key=lambda c: ((c.num_draft_tokens or 0), c.samples))
            timed = evidence_from_cell(cell, plugin.capabilities, self.verify_curve, probe=self._probe(plugin.name, cell)).cost
        if timed is not None:
            ev = replace(ev, cost=replace(timed, output_tokens=ev.cost.output_tokens))
        self._evidence_at[key] = ev
        return ev

    def alpha(self, plugin: StrategyPlugin, task: str, temperature: float) -> Alpha:
        """Top-1 per-token acceptance (accepted / examined positions) and where it came from."""
        ev = self.evidence(plugin, task, temperature)
        return Alpha(ev.alpha, ev.alpha_low, ev.alpha_high, ev.source, ev.citations)

    def cost(self, option: Option, batch: int, sampled: bool = False) -> StepCost:
        """The step cost of ``option`` at ``batch`` (cached), sampling (temperature > 0) or not:
        from the measured gain against concurrency inside its measured levels
        (:mod:`picker.recommend.measured_load`; measured at every temperature, so the same either
        way), else the load curve's. Every speedup, break-even α and schedule row reads it here."""
        costs = self._costs.setdefault(option, {})
        cost = costs.get((batch, sampled))
        if cost is None:
            cost = self.model_cost(option, batch, sampled)
            points = self.measured_ratios(option)
            ratio = interpolate(points, batch)
            if ratio is not None:
                levels = tuple(level for level, _ in points)
                cost = with_ratio(cost, ratio, MeasuredStepCost, levels=levels,
                                  source=getattr(self.measurements, "source", ""))
            costs[batch, sampled] = cost
        return cost

    def step_cost(self, option: Option, batch: int) -> StepCost:
        """The step cost the speedups at ``batch`` are priced with, as one number for the workload:
        :meth:`cost` where the measured gain curve or the load curve alone prices them; where the
        evidence carries per-step costs measured at one concurrency (which ``_score`` prefers to the
        load curve), their ratio at ``batch`` weighted by the traffic (an :class:`AnchoredStepCost`).
        Break-even α, the plan's "one step costs" line and the SDK's R table read this, so they say
        what the speedups were computed with (each bucket at its own temperature's cost)."""
        cost = self.cost(option, batch)
        if cost_source(cost) == MEASURED:
            return cost
        memo = self._step_costs.setdefault(option, {})
        if batch not in memo:
            pairs, anchor = [], None
            for b in pinned(buckets(self.profile), batch=batch):
                cand = self.candidate(option, b)
                if cand.evidence.cost is None:
                    pairs.append((b.weight, self.cost(option, batch, b.temperature > 0).step_ratio))
                else:
                    pairs.append((b.weight, step_ratio(cand)))
                    anchor = cand.evidence.cost.batch
            total = sum(w for w, _ in pairs)
            memo[batch] = cost if anchor is None or total <= 0 else with_ratio(
                cost, sum(w * r for w, r in pairs) / total, AnchoredStepCost, measured_at=anchor)
        return memo[batch]

    def model_cost(self, option: Option, batch: int, sampled: bool = False) -> StepCost:
        """The load curve's step cost (``policies.config_cost``), calibrated where a file was given."""
        return config_cost(option.caps, option.config, self.ctx, batch, sampled=sampled)

    def measured_ratios(self, option: Option) -> tuple[tuple[int, float], ...]:
        """(level, step ratio) from the measured gains of ``option``'s configuration (cached; empty
        when it has no curve, or when step costs do not transfer from the measurements).

        Each gain g on (task, level, temperature) gives the R at which this scorer's own speedup
        at the measured α equals g: every speedup here has the form A / (B + S·R) (E[L] / R, or
        with the prefill F: (F + T − 1) / (F + S·R)), so 1 / speedup is linear in R and two
        evaluations invert it. R is floored at 1 (a step never costs less than a plain one) and
        pooled over tasks and temperatures per level (:func:`~picker.recommend.measured_load.pooled`).
        """
        done = self._ratios.get(option)
        if done is not None:
            return done
        gains = self.gain_curves.get((option.plugin.name, option.config), ()) if self.measured_costs else ()
        per_level: dict[int, list[float]] = {}
        for m in gains:
            bucket = Bucket(m.task, m.concurrency, m.temperature, 1.0)
            model = self.model_cost(option, m.concurrency, m.temperature > 0)
            f1 = self._score(option, bucket, with_ratio(model, 1.0), True)[0]
            f2 = self._score(option, bucket, with_ratio(model, 2.0), True)[0]
            slope = 1.0 / f2 - 1.0 / f1
            if f1 <= 0 or f2 <= 0 or slope <= 0:
                continue  # no acceptance to divide by: this group says nothing about the step cost
            ratio = 1.0 + (1.0 / m.gain - 1.0 / f1) / slope
            per_level.setdefault(m.concurrency, []).append(max(ratio, 1.0))
        out = pooled(per_level) if len(per_level) >= 2 else ()
        self._ratios[option] = out
        return out

    def cost_notes(self, options: Sequence[Option]) -> list[str]:
        """What the step costs of ``options`` rest on beyond the load curve, one sentence each."""
        notes = [self.calibration.note] if self.calibration is not None else []
        source = getattr(self.measurements, "source", "") or "the measurements"
        if self.gain_curves and not self.measured_costs:
            notes.append(f"the gain against concurrency in {source} is not used: step costs do not transfer from "
                         "those measurements to this deployment (see the provenance note); the load curve "
                         "prices every batch size")
        curves: dict[tuple[int, ...], list[str]] = {}
        for o in options:
            levels = tuple(level for level, _ in self.measured_ratios(o))
            if levels:
                curves.setdefault(levels, []).append(f"{o.plugin.name} {o.config.label}")
        for levels, names in curves.items():
            notes.append(f"step costs of {', '.join(names)} at batch {levels[0]}-{levels[-1]} are measured: the gain "
                         f"against concurrency in {source} (levels {', '.join(map(str, levels))}), interpolated in "
                         "log concurrency; outside that range, and for every other configuration, the cost model "
                         "prices them, never extrapolated from the measurements")
        return notes

    def speedups(self, option: Option) -> dict[BucketKey, Speedups]:
        """A copy of every bucket speedup scored for ``option`` so far."""
        return dict(self._speedups.get(option, {}))

    def candidate(self, option: Option, bucket: Bucket) -> Candidate:
        """The policy's row for ``option`` on ``bucket`` (``policies.features``)."""
        c = option.config
        ev = self.evidence_at(option.plugin, bucket.task, bucket.temperature, 0 if c.is_tree else c.depth, bucket.batch)
        topk, tokens = c.topk, c.num_draft_tokens
        if c.is_tree and bucket.temperature > 0 and not option.caps.sampled_tree and self._reference_costs(ev):
            # Measured on the reference loop, whose drafter sends a sampled chain of the tree's depth
            # when sampling (declared in its capabilities): score what it will actually run.
            ev = self.evidence_at(option.plugin, bucket.task, bucket.temperature, c.depth, bucket.batch)
            topk, tokens = 1, c.depth + 1
        return Candidate(option.caps, c.depth, topk, tokens, bucket.temperature, bucket.batch,
                         self.ctx.context_len, bucket.task, ev, self.ctx)

    def _reference_costs(self, ev: Evidence) -> bool:
        """The evidence carries step costs measured on the reference loop (torch backend)."""
        run = (getattr(self.measurements, "run", None) or {}) if self.measurements is not None else {}
        return ev.cost is not None and str(run.get("backend", "")) == "torch"

    def bucket_speedup(self, option: Option, bucket: Bucket) -> tuple[float, float, float]:
        """(mean, low, high) speedup of ``option`` on one bucket, from the α range."""
        key = bucket.key
        memo = self._speedups.setdefault(option, {})
        out = memo.get(key)
        if out is None:
            if self.policy is not None:
                self.prime([option], [bucket])
                return memo[key]
            cost = self.cost(option, bucket.batch, bucket.temperature > 0)
            f = self.level_factor(option, bucket)
            out = tuple(f * x for x in self._score(option, bucket, cost, cost_source(cost) == MEASURED))  # type: ignore[assignment]
            memo[key] = out
        return out

    def level_factor(self, option: Option, bucket: Bucket) -> float:
        """How far a measured sibling's gain is off what its step timings predict, at the bucket's
        batch: the factor that carries to ``option`` (1 where it does not apply).

        Step timings price a request's steps; a profiled gain at concurrency C is a throughput
        ratio over whole waves, whose requests finish at different steps while their batch drains
        (``picker.profiler``'s static waves), besides anything else the per-step pricing misses. The
        configuration the profile ran carries that in its own measured curve (:meth:`cost`); a
        sibling (the same strategy, another draft length or a tree) priced from the timings alone
        would not. So at each measured level above the lowest, the measured configuration's gain
        over its timing-based prediction on the same task and temperature is a factor, 1 at the
        lowest level (its timings are that level's own), interpolated in log concurrency between
        levels and never extrapolated. The sibling nearest in depth is used."""
        if not self.measured_costs or not self.gain_curves or cost_source(self.cost(option, bucket.batch)) == MEASURED:
            return 1.0
        key = (option, bucket.key)
        done = self._factors.get(key)
        if done is not None:
            return done
        sibs = [(cfg, ms) for (name, cfg), ms in self.gain_curves.items()
                if name == option.plugin.name and cfg != option.config]
        factor = 1.0
        if sibs:
            cfg, ms = min(sibs, key=lambda s: (abs(s[0].depth - option.config.depth), s[0].depth))
            sib = replace(option, config=cfg)
            mine = sorted((m.concurrency, m.gain) for m in ms if m.task == bucket.task
                          and abs(m.temperature - bucket.temperature) <= TEMPERATURE_MATCH)
            points = []
            for level, gain in mine:
                if level == mine[0][0]:
                    points.append((level, 1.0))
                    continue
                b = Bucket(bucket.task, level, bucket.temperature, 1.0)
                pred = self._score(sib, b, self.model_cost(sib, level, bucket.temperature > 0), False)[0]
                if pred > 0:
                    points.append((level, gain / pred))
            factor = interpolate(points, bucket.batch) or 1.0
        self._factors[key] = factor
        return factor

    def _score(self, option: Option, bucket: Bucket, cost: StepCost, use_ratio: bool) -> Speedups:
        """(mean, low, high) on ``bucket`` at step cost ``cost``; ``use_ratio``: its ratio replaces
        the measured cost evidence's own (the measured curve outranks the per-step timings)."""
        c = option.config
        ev = self.evidence_at(option.plugin, bucket.task, bucket.temperature, 0 if c.is_tree else c.depth, bucket.batch)
        if ev.cost is None and not ev.per_position:  # α alone: the load curve's cost model
            return speedup(c, ev.alpha, cost), speedup(c, ev.alpha_low, cost), speedup(c, ev.alpha_high, cost)
        # per-position acceptance and/or measured step costs
        return base_range(self.candidate(option, bucket), cost.step_ratio if ev.cost is None or use_ratio else None)

    def prime(self, options: Sequence[Option], bs: Sequence[Bucket]) -> None:
        """With a fitted policy, score every uncached (option, bucket) pair in one batch: one
        estimator call per pair would cost a millisecond each. The analytic path needs no priming."""
        if self.policy is None:
            return
        # numpy + the estimator: only with a policy
        from policies import feature_matrix

        todo = [(o, b) for o in options for b in bs if b.key not in self._speedups.setdefault(o, {})]
        if not todo:
            return
        cands = [self.candidate(o, b) for o, b in todo]
        # The roofline step cost does not depend on α: one cached value serves all three rows.
        costs = [self.cost(o, b.batch, b.temperature > 0) for o, b in todo]
        ratios = [cost.step_ratio if c.evidence.cost is None or cost_source(cost) == MEASURED else None
                  for cost, c in zip(costs, cands)]
        mean = self.policy.predict(feature_matrix(cands, ratios))
        low, _ = self.policy.predict_interval(feature_matrix(
            [replace(c, evidence=c.evidence.at(c.evidence.alpha_low)) for c in cands], ratios))
        _, high = self.policy.predict_interval(feature_matrix(
            [replace(c, evidence=c.evidence.at(c.evidence.alpha_high)) for c in cands], ratios))
        for (o, b), m, lo, hi in zip(todo, mean, low, high):
            f = self.level_factor(o, b)
            self._speedups[o][b.key] = (f * float(m), f * float(min(lo, m)), f * float(max(hi, m)))


def shape_of(resolved: Any) -> ModelShape:  # ResolvedModelShape -> roofline ModelShape
    return ModelShape(**resolved.roofline_kwargs(), name=resolved.name)


def cost_context(profile: WorkloadProfile) -> CostContext:
    target = shape_of(profile.model_shape())
    draft = None
    dm = profile.drafters.draft_model
    if dm is not None:
        draft = ModelShape.from_params(dm.params_b * 1e9, target.bytes_per_param)
    t = profile.traffic
    context = int(t.prompt_tokens.expected() + t.output_tokens.expected() / 2)
    return CostContext(target, profile.hardware.spec, profile.engine.name, context,
                       profile.hardware.count, draft)

"""`specpick recommend`: score every feasible configuration against a workload and decide.

The decision is one deployable setting (engines run one algorithm at a time), plus a temperature
switch and a batch-size schedule; every predicted speedup carries a range from the α range.

    >>> from picker.inputs.workload import load_profile
    >>> rec = recommend(load_profile("profiles/code-assistant-8b-a100.yaml"))   # doctest: +SKIP
    >>> rec.decision.strategy, rec.predicted_speedup.mean                        # doctest: +SKIP
    ('eagle3', 2.4)

Workload speedup is token-weighted: S = 1 / Σ_b w_b / S_b over (task × concurrency × temperature)
buckets b, since the time to emit the workload's tokens is what the deployment saves.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from picker.engine.plugins import Capabilities, StrategyPlugin, load_strategies
from picker.inputs.measurements import TEMPERATURE_MATCH, Cell, Measurements
from picker.inputs.provenance import costs_transfer
from picker.inputs.workload import WorkloadProfile
from picker.recommend.engine_configs import ENGINE_VERIFIES_TREES
from policies import analytic
from policies.analytic import Config, CostContext
from policies.cell_evidence import evidence_from_cell, live_step_points
from policies.costmodel import eagle_layer_shape, medusa_heads_shape
from policies.features import Candidate, CostEvidence, Evidence, base_range
from policies.priors import load_priors
from policies.roofline import ModelShape

NOT_WORTH_IT = 1.02  # below this predicted workload speedup, recommend leaving speculation off
BATCH_GRID = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
TEMPERATURE_GRID = tuple(round(0.1 * i, 1) for i in range(21))
# `specpick profile --backend` names against workload engine names, where they differ.
BACKEND_ENGINE = {"llamacpp": "llama_cpp"}
DEFAULT_MEDUSA_HEADS = 4  # Medusa-1 ships 4-5 heads (Cai et al. 2024); used when heads are to be trained


@dataclass(frozen=True)
class Alpha:
    """Per-token acceptance for one (strategy, task, temperature), with where it came from."""

    mean: float
    low: float
    high: float
    source: str  # "measured" | "prior"
    citations: tuple[str, ...] = ()


@dataclass(frozen=True)
class Bucket:
    task: str
    batch: int
    temperature: float
    weight: float


@dataclass
class Option:
    """A strategy with one configuration, scored over the workload."""

    plugin: StrategyPlugin
    config: Config
    feasible: bool
    engine_supported: bool
    notes: list[str] = field(default_factory=list)
    mean: float = 0.0
    low: float = 0.0
    high: float = 0.0
    # Per-option memo tables: hashing (name, Config, ...) keys dominated the decision's run time.
    costs: dict = field(default_factory=dict, repr=False)
    speedups: dict = field(default_factory=dict, repr=False)

    @property
    def caps(self) -> Capabilities:
        return self.plugin.capabilities

    @property
    def deployable(self) -> bool:
        return self.feasible and self.engine_supported


class Scorer:
    """Speedups of options on buckets, with the evidence and step costs cached.

    Every speedup comes from a candidate row (``policies.features.Candidate``): the analytic model
    alone by default, or a fitted policy estimator (``policies.estimator.SpeedupEstimator``) when
    ``policy`` is given -- then rows are scored in batches (:meth:`prime`), since one call per row
    would cost a millisecond each. ``measured_costs`` uses the step costs of the measured cells
    (and ``verify_curve``) instead of the roofline; by default only when the measurements were
    taken on the profile's own engine (a torch-backend profile says nothing about an engine's costs).
    """

    def __init__(self, profile: WorkloadProfile, measurements: Measurements | None, policy: Any = None, *,
                 measured_costs: bool | None = None,
                 verify_curve: Sequence[tuple[float, float]] | None = None) -> None:
        self.profile = profile
        self.measurements = measurements
        self.policy = policy
        self.priors = load_priors()
        self.ctx = cost_context(profile)
        # Costs transfer only from the deployment's own engine and hardware (picker.inputs.provenance).
        self.measured_costs = costs_transfer(profile, measurements, measured_costs)
        self.verify_curve = tuple(verify_curve) if verify_curve else None
        self._evidence: dict[tuple[str, str, float, int], Evidence] = {}

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
                and c.temperature == cell.temperature]
        return live_step_points(same)

    def _probe(self, name: str, cell: Cell) -> Cell | None:
        """A chain cell of the same strategy at another length, any task (drafting cost does not
        depend on the text), to split the drafting cost: the same temperature first (sampling
        drafts cost more than greedy ones), then the length farthest from ``cell``'s, the same
        task, the most samples."""
        if self.measurements is None:
            return None
        others = [c for c in self.measurements.cells if c.strategy == name and c.tree is None
                  and c.num_draft_tokens and c.num_draft_tokens != cell.num_draft_tokens]
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
            cell = max(exact or cells, key=lambda c: ((c.num_draft_tokens or 0), c.samples))
            ev = evidence_from_cell(cell, plugin.capabilities, self.verify_curve,
                                    self.measurements.source if self.measurements else "",
                                    probe=self._probe(plugin.name, cell))
            if ev.cost is None and self.measured_costs and (points := self._live_points(plugin.name, cell)):
                # A live engine: no step timings, but tokens/s against plain at measured lengths.
                ev = replace(ev, cost=CostEvidence(0.0, step_points=points))
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

    def alpha(self, plugin: StrategyPlugin, task: str, temperature: float) -> Alpha:
        """Top-1 per-token acceptance (accepted / examined positions) and where it came from."""
        ev = self.evidence(plugin, task, temperature)
        return Alpha(ev.alpha, ev.alpha_low, ev.alpha_high, ev.source, ev.citations)

    def cost(self, option: Option, batch: int):  # -> StepCost
        cost = option.costs.get(batch)
        if cost is None:
            cost = option.costs[batch] = analytic.config_cost(option.caps, option.config, self.ctx, batch)
        return cost

    def candidate(self, option: Option, bucket: Bucket) -> Candidate:
        """The policy's row for ``option`` on ``bucket`` (``policies.features``)."""
        c = option.config
        ev = self.evidence(option.plugin, bucket.task, bucket.temperature, 0 if c.is_tree else c.depth)
        topk, tokens = c.topk, c.num_draft_tokens
        if c.is_tree and bucket.temperature > 0 and not option.caps.sampled_tree and self._reference_costs(ev):
            # Measured on the reference loop, whose drafter sends a sampled chain of the tree's depth
            # when sampling (declared in its capabilities): score what it will actually run.
            ev = self.evidence(option.plugin, bucket.task, bucket.temperature, c.depth)
            topk, tokens = 1, c.depth + 1
        return Candidate(option.caps, c.depth, topk, tokens, bucket.temperature, bucket.batch,
                         self.ctx.context_len, bucket.task, ev, self.ctx)

    def _reference_costs(self, ev: Evidence) -> bool:
        """The evidence carries step costs measured on the reference loop (torch backend)."""
        run = (getattr(self.measurements, "run", None) or {}) if self.measurements is not None else {}
        return ev.cost is not None and str(run.get("backend", "")) == "torch"

    def bucket_speedup(self, option: Option, bucket: Bucket) -> tuple[float, float, float]:
        """(mean, low, high) speedup of ``option`` on one bucket, from the α range."""
        key = (bucket.task, bucket.batch, bucket.temperature)
        out = option.speedups.get(key)
        if out is None:
            if self.policy is not None:
                self.prime([option], [bucket])
                return option.speedups[key]
            c = option.config
            ev = self.evidence(option.plugin, bucket.task, bucket.temperature, 0 if c.is_tree else c.depth)
            if ev.cost is None and not ev.per_position:  # α alone: the roofline cost model
                cost = self.cost(option, bucket.batch)
                out = (analytic.speedup(c, ev.alpha, cost), analytic.speedup(c, ev.alpha_low, cost),
                       analytic.speedup(c, ev.alpha_high, cost))
            else:  # per-position acceptance and/or measured step costs
                ratio = self.cost(option, bucket.batch).step_ratio if ev.cost is None else None
                out = base_range(self.candidate(option, bucket), ratio)
            option.speedups[key] = out
        return out

    def prime(self, options: Sequence[Option], bs: Sequence[Bucket]) -> None:
        """With a fitted policy, score every uncached (option, bucket) pair in one batch: one
        estimator call per pair would cost a millisecond each. The analytic path needs no priming."""
        if self.policy is None:
            return
        # numpy + the estimator: only with a policy
        from policies.features import feature_matrix

        todo = [(o, b) for o in options for b in bs if (b.task, b.batch, b.temperature) not in o.speedups]
        if not todo:
            return
        cands = [self.candidate(o, b) for o, b in todo]
        # The roofline step cost does not depend on α: one cached value serves all three rows.
        ratios = [self.cost(o, b.batch).step_ratio if c.evidence.cost is None else None
                  for (o, b), c in zip(todo, cands)]
        mean = self.policy.predict(feature_matrix(cands, ratios))
        low, _ = self.policy.predict_interval(feature_matrix(
            [replace(c, evidence=c.evidence.at(c.evidence.alpha_low)) for c in cands], ratios))
        _, high = self.policy.predict_interval(feature_matrix(
            [replace(c, evidence=c.evidence.at(c.evidence.alpha_high)) for c in cands], ratios))
        for (o, b), m, lo, hi in zip(todo, mean, low, high):
            o.speedups[(b.task, b.batch, b.temperature)] = (float(m), float(min(lo, m)), float(max(hi, m)))


def harmonic(weights_and_speedups: list[tuple[float, float]]) -> float:
    """Token-weighted workload speedup: total plain time over total speculative time."""
    total = sum(w for w, _ in weights_and_speedups)
    return total / sum(w / s for w, s in weights_and_speedups) if total > 0 else 1.0


def representative_batch(low: int, high: int) -> int:
    """One batch size standing for a concurrency range (its geometric middle)."""
    return max(1, round(math.sqrt(low * high)))


def buckets(profile: WorkloadProfile) -> list[Bucket]:
    t = profile.traffic
    out = []
    for task, wt in t.task_weights().items():
        if wt <= 0:
            continue
        for c in t.concurrency:
            for temp in t.temperature:
                w = wt * c.weight * temp.weight
                if w > 0:
                    out.append(Bucket(task, representative_batch(c.low, c.high), temp.value, w))
    return out


def shape_of(resolved) -> ModelShape:  # ResolvedModelShape -> roofline ModelShape
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


def artifact_memory_gib(caps: Capabilities, profile: WorkloadProfile, target: ModelShape) -> float:
    """Memory per accelerator the strategy's artifact needs (weights only; drafts keep a small cache)."""
    d = profile.drafters
    if caps.artifact == "draft_model" and d.draft_model is not None:
        size = d.draft_model.params_b * 1e9 * target.bytes_per_param
    elif caps.artifact == "eagle3_head":
        size = eagle_layer_shape(target).weight_bytes
    elif caps.artifact == "medusa_heads":
        heads = d.medusa_heads.num_heads if d.medusa_heads else DEFAULT_MEDUSA_HEADS
        size = medusa_heads_shape(target, heads).weight_bytes
    else:
        return 0.0
    return size / profile.hardware.count / 2**30


def feasibility(plugin: StrategyPlugin, profile: WorkloadProfile, target: ModelShape) -> tuple[bool, list[str]]:
    """Can this deployment run the strategy at all: artifact present (or trainable), memory, allowed."""
    caps, d, notes = plugin.capabilities, profile.drafters, []
    allowed = getattr(d, f"allow_{plugin.name}", True)  # the profile's own per-strategy switches
    if not allowed:
        return False, ["disabled in the profile (drafters.allow_" + plugin.name + ": false)"]
    if caps.artifact is not None and getattr(d, caps.artifact) is None:
        if caps.artifact == "draft_model" or not d.can_train_heads:
            return False, [f"needs drafters.{caps.artifact}, which the profile does not provide"]
        notes.append(f"needs {caps.artifact.replace('_', ' ')} trained first (training budget "
                     f"{d.training_budget_gpu_hours:g} GPU-hours)")
    need = artifact_memory_gib(caps, profile, target)
    if need > profile.memory_headroom_gib:
        return False, [f"needs {need:.1f} GiB per accelerator, headroom is {profile.memory_headroom_gib:g} GiB"]
    return True, notes


def options_for(profile: WorkloadProfile, plugins: dict[str, StrategyPlugin], target: ModelShape) -> list[Option]:
    out = []
    for plugin in plugins.values():
        caps = plugin.capabilities
        feasible, notes = feasibility(plugin, profile, target)
        supported = caps.engines.get(profile.engine.name) is not None
        if not supported:
            notes = [*notes, f"{profile.engine.name} has no algorithm for it"]
        max_depth = None
        if caps.artifact == "medusa_heads":
            heads = profile.drafters.medusa_heads
            max_depth = heads.num_heads if heads else DEFAULT_MEDUSA_HEADS
        trees_ok = ENGINE_VERIFIES_TREES.get(profile.engine.name, False)
        for config in analytic.configs_for(caps, max_depth):
            if config.is_tree and supported and not trees_ok:
                out.append(Option(plugin, config, feasible, False,
                                  [*notes, f"{profile.engine.name} verifies chains only"]))
                continue
            out.append(Option(plugin, config, feasible, supported, list(notes)))
    return out


def score_all(scorer: Scorer, options: list[Option], bs: list[Bucket]) -> None:
    """Fill each option's workload speedup (mean, low, high), respecting the p99 ITL SLO."""
    slo = scorer.profile.slo.itl_p99_ms
    scorer.prime(options, bs)
    for opt in options:
        per = [(b.weight, scorer.bucket_speedup(opt, b)) for b in bs]
        opt.mean = harmonic([(w, s[0]) for w, s in per])
        opt.low = harmonic([(w, s[1]) for w, s in per])
        opt.high = harmonic([(w, s[2]) for w, s in per])
        if slo is not None:
            # A step that accepts nothing emits one token: its whole time is one inter-token gap.
            step_ms = 1e3 * max(scorer.cost(opt, b.batch).draft_seconds + scorer.cost(opt, b.batch).verify_seconds
                                for b in bs)
            if step_ms > slo and opt.feasible:
                opt.feasible = False
                opt.notes.append(f"a rejected step takes {step_ms:.0f} ms > p99 ITL SLO {slo:g} ms")


def recommend(profile: WorkloadProfile, measurements: Measurements | None = None, *, path: str = "",
              policy: Any = None, measured_costs: bool | None = None,
              verify_curve: Sequence[tuple[float, float]] | None = None):
    """Build the :class:`~picker.recommend.contract.Recommendation` for ``profile``.

    ``policy`` is a fitted ``policies.estimator.SpeedupEstimator`` (``policies.artifacts``); without
    one the analytic model scores every option. See :class:`Scorer` for ``measured_costs``.
    """
    from picker.recommend.decide import decide  # the decision and its rendering into the contract
    from picker.recommend.provenance_labels import with_provenance

    scorer = Scorer(profile, measurements, policy, measured_costs=measured_costs, verify_curve=verify_curve)
    bs = buckets(profile)
    options = options_for(profile, load_strategies(), scorer.ctx.target)
    score_all(scorer, options, bs)
    return with_provenance(decide(scorer, options, bs, path=path), profile, measurements)

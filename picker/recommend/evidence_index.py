"""The evidence index: which measured cell answers which bucket, and the cited prior elsewhere.

:func:`index_evidence` reads the measurements once into an immutable :class:`EvidenceIndex`; the
functions below are plain functions of it. Their caches (``functools.lru_cache``) only save
recomputation: each value depends on its arguments and the index's frozen fields alone, so no
result depends on what was asked before.

    >>> from picker.inputs.workload import load_profile
    >>> from picker.engine.plugins import load_strategies
    >>> index = index_evidence(load_profile("profiles/code-assistant-8b-a100.yaml"), None)   # doctest: +SKIP
    >>> evidence(index, load_strategies()["ngram"], "code", 0.0).source                      # doctest: +SKIP
    'prior'

Rules, from measured to cited: a strategy's chain cells at the measured temperature nearest the
bucket's (within ``TEMPERATURE_MATCH``) answer it -- the cell at the configuration's depth, else
the deepest (its per-position rates cover every shorter chain), at the lowest concurrency measured
(acceptance does not depend on it; per-step timings do, and :func:`evidence_at` takes them from the
cell measured at the bucket's own concurrency where there is one). Without such a cell, the cited
prior answers (:mod:`policies.priors`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType

from picker.engine.plugins import StrategyPlugin
from picker.inputs.measurements import TEMPERATURE_MATCH, Cell, Measurements
from picker.inputs.provenance import costs_transfer
from picker.inputs.workload import WorkloadProfile
from picker.recommend.table import Alpha, Bucket, Option
from policies import Candidate, CostContext, CostEvidence, Evidence, evidence_from_cell, live_step_points, load_priors

CACHE = 1 << 16  # entries per cache: far above one recommendation's needs, bounded for long evaluations


@dataclass(frozen=True, eq=False)
class EvidenceIndex:
    """The measured chain cells by (strategy, task), and how their step costs may be read.

    ``measured_costs``: the cells' step costs transfer to this deployment (``picker.inputs.provenance``
    decides, or the caller overrides); without it only acceptance is read from them. ``output_tokens``:
    the workload's mean output length, over which a measured per-generation fixed time is spread.
    ``reference_loop``: the cells were timed on the torch reference loop, whose drafter sends a
    sampled chain where a tree is asked for at T > 0 (declared in its capabilities).
    """

    chains: Mapping[tuple[str, str], tuple[Cell, ...]]
    by_strategy: Mapping[str, tuple[Cell, ...]]
    measured_costs: bool
    verify_curve: tuple[tuple[float, float], ...] | None
    output_tokens: float
    source: str = ""
    reference_loop: bool = False


def index_evidence(profile: WorkloadProfile, measurements: Measurements | None, *,
                   measured_costs: bool | None = None,
                   verify_curve: Sequence[tuple[float, float]] | None = None) -> EvidenceIndex:
    """Index ``measurements`` (chain cells only: trees are scored from their chain's evidence)."""
    chains: dict[tuple[str, str], list[Cell]] = {}
    by_strategy: dict[str, list[Cell]] = {}
    for c in measurements.cells if measurements is not None else ():
        if c.tree is None:
            chains.setdefault((c.strategy, c.task), []).append(c)
            by_strategy.setdefault(c.strategy, []).append(c)
    run = (getattr(measurements, "run", None) or {}) if measurements is not None else {}
    return EvidenceIndex(
        chains=MappingProxyType({k: tuple(v) for k, v in chains.items()}),
        by_strategy=MappingProxyType({k: tuple(v) for k, v in by_strategy.items()}),
        measured_costs=costs_transfer(profile, measurements, measured_costs),
        verify_curve=tuple(verify_curve) if verify_curve else None,
        output_tokens=profile.traffic.output_tokens.expected(),
        source=getattr(measurements, "source", "") or "",
        reference_loop=str(run.get("backend", "")) == "torch")


def nearest_cells(index: EvidenceIndex, name: str, task: str, temperature: float) -> tuple[Cell, ...]:
    """Measured chain cells of one strategy × task at the measured temperature nearest ``temperature``."""
    near = [c for c in index.chains.get((name, task), ()) if abs(c.temperature - temperature) <= TEMPERATURE_MATCH]
    if not near:
        return ()
    t = min(near, key=lambda c: abs(c.temperature - temperature)).temperature
    return tuple(c for c in near if c.temperature == t)


def scorable(index: EvidenceIndex, plugin: StrategyPlugin, bs: Sequence[Bucket]) -> bool:
    """Measured cells near every bucket, or a cited prior: without either it cannot be scored."""
    return plugin.name in load_priors().data.strategies or all(
        nearest_cells(index, plugin.name, b.task, b.temperature) for b in bs)


def _probe(index: EvidenceIndex, name: str, cell: Cell) -> Cell | None:
    """A chain cell of the same strategy at another length, any task (drafting cost does not depend
    on the text), to split the drafting cost: the same temperature first (sampling drafts cost more
    than greedy ones), then the length farthest from ``cell``'s, the same task, the most samples."""
    others = [c for c in index.by_strategy.get(name, ()) if c.num_draft_tokens
              and c.num_draft_tokens != cell.num_draft_tokens and c.concurrency == cell.concurrency]
    if not others:
        return None
    return max(others, key=lambda c: (c.temperature == cell.temperature,
                                      abs((c.num_draft_tokens or 0) - (cell.num_draft_tokens or 0)),
                                      c.task == cell.task, c.samples))


def evidence(index: EvidenceIndex, plugin: StrategyPlugin, task: str, temperature: float, depth: int = 0) -> Evidence:
    """Measured where a chain cell answers (the one at this depth, else the deepest), else the prior.

    Published tree results give an equivalent-chain α that already contains the tree's sibling
    gains; for strategies that draft trees we take the prior's chain α instead (EAGLE-1 Table 5
    ratio) and let the tree model add the siblings back, so they are not counted twice.
    """
    return _evidence(index, plugin.name, _Caps(plugin), task, temperature, depth)


class _Caps:
    """A plugin as a cache key (its capabilities hold a dict, so they do not hash): by name, equal
    when the capabilities are (the same registered plugin, in practice the same object)."""

    __slots__ = ("plugin",)

    def __init__(self, plugin: StrategyPlugin) -> None:
        self.plugin = plugin

    def __hash__(self) -> int:
        return hash(self.plugin.name)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Caps) and (other.plugin is self.plugin or (
            other.plugin.name == self.plugin.name and other.plugin.capabilities == self.plugin.capabilities))


@functools.lru_cache(maxsize=CACHE)
def _evidence(index: EvidenceIndex, name: str, key: _Caps, task: str, temperature: float, depth: int) -> Evidence:
    caps = key.plugin.capabilities
    cells = nearest_cells(index, name, task, temperature)
    if cells:
        exact = [c for c in cells if c.num_draft_tokens == depth]
        # The lowest concurrency measured: acceptance does not depend on it, but the per-step
        # timings do, and the cost model reads them as one sequence's (the measured gain against
        # concurrency enters through the cost source, picker.recommend.costs).
        cell = max(exact or cells, key=lambda c: ((c.num_draft_tokens or 0), -c.concurrency, c.samples))
        ev = evidence_from_cell(cell, caps, index.verify_curve, index.source, probe=_probe(index, name, cell))
        if ev.cost is None and index.measured_costs and (points := _live_points(index, name, cell)):
            # A live engine: no step timings, but tokens/s against plain at measured lengths.
            ev = replace(ev, cost=CostEvidence(0.0, draft_share=ev.draft_share, step_points=points,
                                                 batch=cell.concurrency))
        if ev.cost is None or not index.measured_costs:
            return replace(ev, cost=None)
        # the fixed per-generation time (prefill) is spread over the workload's output length
        return replace(ev, cost=replace(ev.cost, output_tokens=index.output_tokens))
    if depth:
        return _evidence(index, name, key, task, temperature, 0)  # the prior does not depend on depth
    p = load_priors().lookup(name, task, temperature)
    scale = p.alpha_chain / p.alpha if caps.tree and p.alpha > 0 else 1.0
    return Evidence(p.alpha * scale, p.alpha_low * scale, min(p.alpha_high * scale, 1.0), "prior",
                    citations=tuple(p.citations))


def _live_points(index: EvidenceIndex, name: str, cell: Cell) -> tuple[tuple[float, float], ...]:
    """Step ratios implied by the live cells of this strategy at ``cell``'s temperature and concurrency."""
    same = [c for c in index.by_strategy.get(name, ())
            if c.temperature == cell.temperature and c.concurrency == cell.concurrency]
    return live_step_points(same)


def evidence_at(index: EvidenceIndex, plugin: StrategyPlugin, task: str, temperature: float, depth: int,
                batch: int) -> Evidence:
    """:func:`evidence` with its step timings from the cell measured at concurrency ``batch`` where the
    measurements have one (the same strategy, task and temperature; the cell at this depth, else the
    deepest), so a level the profile measured prices every draft length with timings taken there;
    acceptance stays the lowest level's. Elsewhere the lowest level's timings, carried to ``batch``
    by the cost model (``policies.step_ratio``)."""
    ev = evidence(index, plugin, task, temperature, depth)
    if ev.cost is None or ev.cost.step_points or ev.cost.batch == batch:
        return ev
    return _evidence_at(index, plugin.name, _Caps(plugin), task, temperature, depth, batch)


@functools.lru_cache(maxsize=CACHE)
def _evidence_at(index: EvidenceIndex, name: str, key: _Caps, task: str, temperature: float, depth: int,
                 batch: int) -> Evidence:
    ev = _evidence(index, name, key, task, temperature, depth)
    assert ev.cost is not None  # evidence_at returns early without measured costs
    cells = [c for c in nearest_cells(index, name, task, temperature) if c.concurrency == batch]
    if not cells:
        return ev
    exact = [c for c in cells if c.num_draft_tokens == depth]
    cell = max(exact or cells, key=lambda c: ((c.num_draft_tokens or 0), c.samples))
    timed = evidence_from_cell(cell, key.plugin.capabilities, index.verify_curve,
                               probe=_probe(index, name, cell)).cost
    return ev if timed is None else replace(ev, cost=replace(timed, output_tokens=ev.cost.output_tokens))


def alpha(index: EvidenceIndex, plugin: StrategyPlugin, task: str, temperature: float) -> Alpha:
    """Top-1 per-token acceptance (accepted / examined positions) and where it came from."""
    ev = evidence(index, plugin, task, temperature)
    return Alpha(ev.alpha, ev.alpha_low, ev.alpha_high, ev.source, ev.citations)


def candidate(index: EvidenceIndex, ctx: CostContext, option: Option, bucket: Bucket) -> Candidate:
    """The policy's row for ``option`` on ``bucket`` (``policies.Candidate``), priced on ``ctx``."""
    c = option.config
    ev = evidence_at(index, option.plugin, bucket.task, bucket.temperature, 0 if c.is_tree else c.depth, bucket.batch)
    topk, tokens = c.topk, c.num_draft_tokens
    if c.is_tree and bucket.temperature > 0 and not option.caps.sampled_tree and index.reference_loop \
            and ev.cost is not None:
        # Measured on the reference loop, whose drafter sends a sampled chain of the tree's depth
        # when sampling (declared in its capabilities): score what it will actually run.
        ev = evidence_at(index, option.plugin, bucket.task, bucket.temperature, c.depth, bucket.batch)
        topk, tokens = 1, c.depth + 1
    return Candidate(option.caps, c.depth, topk, tokens, bucket.temperature, bucket.batch, ctx.context_len,
                     bucket.task, ev, ctx)

"""The series the plan's plots draw, read off the scored table and the deployment: nothing here scores.

- gain against N: the deployed strategy's shape at each draft length (the chosen tree cut to each
  depth, or its chains), then every other deployable strategy's chains, each over the whole workload;
- gain against batch size: the deployment itself at each batch of the grid -- the draft length the
  schedule runs there, off above the temperature switches -- the very numbers the schedule rows show;
- α per task type, and measured cells set against what the model predicts for them.

    >>> round(crossover((1, 2, 4), (1.5, 1.2, 0.8), log_x=True), 3)
    2.828
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from picker.inputs.measurements import Measurements
from picker.recommend.costs import CostSource
from picker.recommend.evidence_index import EvidenceIndex, candidate
from picker.recommend.schedule import Deployment, Point, shapes_by_depth
from picker.recommend.table import Scored, ScoredTable

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


def crossover(xs: tuple[float, ...], ys: tuple[float, ...], log_x: bool = False) -> float | None:
    """The first x where the curve crosses speedup 1 (linear interpolation, in log x when asked)."""
    for (x0, y0), (x1, y1) in zip(zip(xs, ys), zip(xs[1:], ys[1:])):
        if (y0 - 1.0) * (y1 - 1.0) <= 0 and y0 != y1:
            t = (1.0 - y0) / (y1 - y0)
            if log_x:
                return float(2 ** (math.log2(x0) + t * (math.log2(x1) - math.log2(x0))))
            return float(x0 + t * (x1 - x0))
    return None


def _over_n(label: str, rows: Sequence[Scored], table: ScoredTable) -> Series:
    bs = table.buckets
    pts = [[r.speedup_at(bs, which=i) for r in rows] for i in range(3)]
    return Series(label, tuple(float(r.config.depth) for r in rows), *(tuple(p) for p in pts))


def gain_by_n(table: ScoredTable, deployed: Deployment | None) -> tuple[Series, ...]:
    """Workload speedup against the draft length: the deployed strategy first (its shape cut to each
    depth, as the schedule would run it), then every other deployable strategy's chains."""
    usable = [r for r in table.rows if r.deployable]
    out = []
    if deployed is not None:
        chosen = deployed.chosen
        shapes = shapes_by_depth(table.rows, chosen)
        if chosen.config.is_tree:
            rows = [shapes[d] for d in sorted(shapes)]
            label = f"{chosen.plugin.name} tree, top-k {chosen.config.topk} (deployed shape cut to each depth)"
        else:
            rows = sorted((r for r in usable if r.plugin.name == chosen.plugin.name and not r.config.is_tree
                           and r.config.depth in PLOT_DEPTHS), key=lambda r: r.config.depth)
            label = f"{chosen.plugin.name} chain (deployed)"
        out.append(_over_n(label, rows, table))
    for name in dict.fromkeys(r.plugin.name for r in usable):
        if deployed is not None and name == deployed.chosen.plugin.name:
            continue
        chains = sorted((r for r in usable if r.plugin.name == name and not r.config.is_tree
                         and r.config.depth in PLOT_DEPTHS), key=lambda r: r.config.depth)
        if chains:
            out.append(_over_n(f"{name} chain", chains, table))
    return tuple(out)


def gain_by_batch(deployed: Deployment | None, points: Sequence[Point]) -> tuple[Series, ...]:
    """The deployment's predicted speedup at each batch of the grid (the schedule rows' numbers)."""
    if deployed is None or not points:
        return ()
    c = deployed.chosen
    label = f"{c.plugin.name} {c.config.label}, as deployed"
    return (Series(label, tuple(float(p.batch) for p in points), tuple(p.mean for p in points),
                   tuple(p.low for p in points), tuple(p.high for p in points)),)


def alpha_points(table: ScoredTable, index: EvidenceIndex, costs: CostSource) -> tuple[AlphaPoint, ...]:
    """Per task type, the α each deployable strategy's best configuration rests on there."""
    out = []
    usable = [r for r in table.rows if r.deployable]
    for task in dict.fromkeys(b.task for b in table.buckets):
        tb = [b for b in table.buckets if b.task == task]
        heavy = max(tb, key=lambda b: b.weight)
        best: dict[str, tuple[float, Scored]] = {}
        for r in usable:
            s = r.speedup_at(tb)
            if r.plugin.name not in best or s > best[r.plugin.name][0]:
                best[r.plugin.name] = (s, r)
        for name, (_, r) in best.items():
            ev = candidate(index, costs.ctx, r.option, heavy).evidence
            out.append(AlphaPoint(task, name, ev.alpha, ev.alpha_low, ev.alpha_high, ev.source))
    return tuple(out)


def measured_cells(measurements: Measurements | None, tasks: set[str]) -> tuple[MeasuredCell, ...]:
    """Chain cells of the measurements on the profile's task types, against the model's predictions."""
    if measurements is None:
        return ()
    from policies import expected_length_iid, load_priors

    priors = load_priors()
    out = []
    for c in measurements.cells:
        if c.tree is not None or not c.num_draft_tokens or c.task not in tasks:
            continue
        try:
            prior = priors.lookup(c.strategy, c.task, c.temperature)
        except ValueError:  # a plugin or task the priors do not cover: nothing to set it against
            continue
        a = c.chain_alpha
        out.append(MeasuredCell(c.task, c.strategy, c.temperature, c.num_draft_tokens, a,
                                tuple(c.alpha_iid_ci or c.alpha_ci),  # type: ignore[arg-type]
                                prior.alpha, (prior.alpha_low, prior.alpha_high), c.tau,
                                float(expected_length_iid(a, c.num_draft_tokens))))
    return tuple(out)

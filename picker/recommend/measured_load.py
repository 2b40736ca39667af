"""The user's own curve under load: measured gain against concurrency, read as a step cost.

A profile or sweep run at several ``--concurrency`` levels (``picker.profiler.load``) measures, per
configuration, the throughput gain over plain decoding at each level. Where a configuration has
cells at two or more levels, that gain overrides the load curve's prediction *inside* the measured
range -- the cost source turns each measured gain into the step ratio R (one speculative step in plain
steps) that reproduces it at the measured acceptance (:func:`picker.recommend.costs.cost`),
so the speedups, the break-even α per batch range and the headline all follow the one number -- and
outside it the load curve is used, labelled as the model (never extrapolated).

    >>> interpolate(((1, 1.2), (4, 1.8)), 2)   # linear in log concurrency: halfway from 1 to 4
    1.5
    >>> interpolate(((1, 1.2), (4, 1.8)), 8) is None
    True
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields

from picker.inputs.measurements import Measurements, parse_tree_label
from policies import Config, StepCost, chain

MEASURED = "measured"
MODEL = "model"


@dataclass(frozen=True)
class MeasuredGain:
    """One configuration's gain over plain decoding on one task at one temperature and level."""

    task: str
    temperature: float
    concurrency: int
    gain: float


@dataclass(frozen=True)
class MeasuredStepCost(StepCost):
    """A step cost whose ratio to a plain step comes from a measured gain against concurrency.

    ``draft_seconds`` and ``verify_seconds`` are the model's, scaled together so that
    ``step_ratio`` is the measured one: the measurement is end to end and does not split the step.
    """

    levels: tuple[int, ...] = ()  # the concurrency levels measured for this configuration
    source: str = ""  # the measurements file


@dataclass(frozen=True)
class AnchoredStepCost(StepCost):
    """A step cost whose ratio comes from per-step costs measured at one concurrency (``measured_at``),
    carried to another batch by the load curve (``policies.step_ratio``), averaged over the
    workload's traffic. Draft and verify seconds are the model's, scaled together to that ratio."""

    measured_at: int = 1


def with_ratio(cost: StepCost, ratio: float, kind: type[StepCost] = StepCost, **extra: object) -> StepCost:
    """``cost`` with draft and verify seconds scaled so that its step ratio is ``ratio``, as a
    ``kind`` (:class:`MeasuredStepCost`, :class:`AnchoredStepCost`) with its own fields in ``extra``."""
    scale = ratio / cost.step_ratio
    values = {f.name: getattr(cost, f.name) for f in fields(StepCost)}
    values.update(draft_seconds=cost.draft_seconds * scale, verify_seconds=cost.verify_seconds * scale)
    return kind(**values, **extra)  # type: ignore[arg-type]


def cost_source(cost: StepCost | None) -> str:
    """``measured`` for a step cost read from the measured curve, ``model`` otherwise."""
    return MEASURED if isinstance(cost, MeasuredStepCost) else MODEL


def config_of(cell: object) -> Config | None:
    tree = getattr(cell, "tree", None)
    if tree:
        try:
            return Config(*parse_tree_label(tree))
        except ValueError:
            return None  # a label this version does not read: the cell is no curve
    n = getattr(cell, "num_draft_tokens", None)
    return chain(int(n)) if n else None


def gain_curves(measurements: Measurements | None) -> dict[tuple[str, Config], tuple[MeasuredGain, ...]]:
    """(strategy, configuration) -> its measured gains, for configurations with a (task,
    temperature) measured at two or more concurrency levels; groups with one level are left out.

    The gain is the waves' throughput gain where it was timed, else the per-request speed-up (the
    same at concurrency 1), as in ``picker.profiler.load``.
    """
    if measurements is None:
        return {}
    groups: dict[tuple[str, Config, str, float], dict[int, float]] = {}
    for c in measurements.cells:
        g = c.throughput_gain_vs_plain if c.throughput_gain_vs_plain is not None else c.speedup_vs_plain
        config = config_of(c)
        if g is None or g <= 0 or config is None:
            continue
        groups.setdefault((c.strategy, config, c.task, c.temperature), {})[c.concurrency] = float(g)
    out: dict[tuple[str, Config], list[MeasuredGain]] = {}
    for (strategy, config, task, temp), by_level in groups.items():
        if len(by_level) >= 2:
            out.setdefault((strategy, config), []).extend(
                MeasuredGain(task, temp, level, g) for level, g in sorted(by_level.items()))
    return {k: tuple(v) for k, v in out.items()}


def interpolate(points: Sequence[tuple[int, float]], batch: int) -> float | None:
    """The value at ``batch`` from (level, value) points sorted by level: linear in log concurrency
    between the two levels around it, None outside the measured range (the model answers there)."""
    if len(points) < 2 or not points[0][0] <= batch <= points[-1][0]:
        return None
    for (c0, y0), (c1, y1) in itertools.pairwise(points):
        if c0 <= batch <= c1:
            w = 0.0 if c1 == c0 else (math.log(batch) - math.log(c0)) / (math.log(c1) - math.log(c0))
            return y0 + w * (y1 - y0)
    return None  # unreachable: the range check above covers every batch between the ends


def pooled(per_level: Mapping[int, list[float]]) -> tuple[tuple[int, float], ...]:
    """One step ratio per level: the median over the (task, temperature) groups measured there
    (the step cost does not depend on the text; each group's own α already left it)."""
    return tuple((level, statistics.median(rs)) for level, rs in sorted(per_level.items()))

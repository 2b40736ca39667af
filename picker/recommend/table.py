"""The scored table: what scoring hands to the decision, and the vocabulary both stages share.

Scoring (``picker.recommend.scoring.score``) builds one immutable :class:`ScoredTable`; the
decision (``picker.recommend.decide``), the explanation and every rendering only read it. Nothing
is written back onto an :class:`Option`, and nothing in the table scores anything.

    >>> harmonic([(0.5, 2.0), (0.5, 1.0)])     # half the tokens twice as fast, half unchanged
    1.3333333333333333
    >>> [b.key for b in pinned([Bucket("chat", 4, 0.7, 1.0)], batch=64)]
    [('chat', 64, 0.7)]

Workload speedup is token-weighted: S = 1 / Σ_b w_b / S_b over (task × concurrency × temperature)
buckets b, since the time to emit the workload's tokens is what the deployment saves.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

from picker.engine.plugins import Capabilities, StrategyPlugin

from policies import Config, chain

if TYPE_CHECKING:
    from picker.inputs.workload import WorkloadProfile
    from policies import StepCost

NOT_WORTH_IT = 1.02  # below this predicted workload speedup, recommend leaving speculation off
# The one batch grid: the batch schedule's points, and the x axis of the explain plot.
BATCH_GRID = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
TEMPERATURE_GRID = tuple(round(0.1 * i, 1) for i in range(21))
# The batches the SDK Controller's step-cost table is priced at: the grid, and one cell above it
# (``picker.sdk.plan``: cell i covers (2^(i-1), 2^i], the last one everything above 512).
CONTROLLER_BATCHES = (*BATCH_GRID, 2 * BATCH_GRID[-1])

Speedups = tuple[float, float, float]  # (mean, low, high)
BucketKey = tuple[str, int, float]     # (task, batch, temperature)


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
    """One slice of the workload's traffic: a task type at a batch size and temperature, weighted by tokens."""

    task: str
    batch: int
    temperature: float
    weight: float

    @property
    def key(self) -> BucketKey:
        return (self.task, self.batch, self.temperature)


# eq=False: options are compared and hashed by identity (one object per configuration in a table),
# which keeps them usable as memo keys; hashing their fields dominated a decision's run time.
@dataclass(frozen=True, eq=False)
class Option:
    """A strategy with one configuration, and whether this deployment can run it (before scoring)."""

    plugin: StrategyPlugin
    config: Config
    feasible: bool
    engine_supported: bool
    notes: tuple[str, ...] = ()

    @property
    def caps(self) -> Capabilities:
        return self.plugin.capabilities


@dataclass(frozen=True, eq=False)
class Scored:
    """One option scored over the workload: its speedup range, feasibility after the SLOs, the step
    cost at the workload's typical batch, and per-bucket speedups (the workload's buckets, plus the
    batch and temperature grids where the table was asked for them)."""

    option: Option
    mean: float
    low: float
    high: float
    feasible: bool
    notes: tuple[str, ...]
    cost: StepCost
    speedups: Mapping[BucketKey, Speedups]
    # Step costs on the batch grid and at the workload's batches, for the leader's family: the
    # schedule's break-even α per batch range reads them.
    costs_by_batch: Mapping[int, StepCost] = field(default_factory=lambda: MappingProxyType({}))
    # Concurrency levels of the measured gain curve behind this configuration's step cost (inside
    # them the cost is measured, outside it is the load curve's); empty: the load curve everywhere.
    measured_levels: tuple[int, ...] = ()
    # With a fitted policy: its prediction over the analytic base per scored bucket (the learned
    # correction the explanation shows); empty without one.
    corrections: Mapping[BucketKey, float] = field(default_factory=lambda: MappingProxyType({}))
    # The A/B gain (gain, low, high) measured at a bucket's own concurrency, where the profiler timed
    # this configuration against plain decoding in interleaved rounds (picker.recommend.uncertainty).
    measured: Mapping[BucketKey, Speedups] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def plugin(self) -> StrategyPlugin:
        return self.option.plugin

    @property
    def config(self) -> Config:
        return self.option.config

    @property
    def caps(self) -> Capabilities:
        return self.option.caps

    @property
    def deployable(self) -> bool:
        return self.feasible and self.option.engine_supported

    def scored_at(self, bs: Sequence[Bucket], batch: int | None = None, temperature: float | None = None) -> bool:
        """Whether every pinned bucket was scored (a strategy without evidence there is not)."""
        return all(b.key in self.speedups for b in pinned(bs, batch, temperature))

    def speedup_at(self, bs: Sequence[Bucket], batch: int | None = None, temperature: float | None = None,
                   which: int = 0) -> float:
        """Workload speedup with the batch and/or temperature pinned (weights kept); ``which``: 0 mean,
        1 low, 2 high. A KeyError means the scoring stage was not asked for that grid."""
        return harmonic([(b.weight, self.speedups[b.key][which]) for b in pinned(bs, batch, temperature)])


@dataclass(frozen=True)
class ScoredTable:
    """Every candidate of a workload, scored; the input of the decision and the explanation."""

    profile: WorkloadProfile
    buckets: tuple[Bucket, ...]
    rows: tuple[Scored, ...]
    typical_batch: int
    # (strategy, task, temperature) -> acceptance, for every strategy at every bucket's task and temperature.
    alphas: Mapping[tuple[str, str, float], Alpha]
    # Registered strategies left out: neither measured here nor covered by a published prior.
    unscored: tuple[str, ...] = ()
    # What the step costs rest on beyond the load curve: a calibration file, measured gain curves.
    cost_notes: tuple[str, ...] = ()
    calibration: str | None = None  # the calibration file the load curve's constants came from
    cost_kind: str = "modelled"  # the cost source: measured, calibrated or modelled (picker.recommend.costs)

    def alpha(self, strategy: str, task: str, temperature: float) -> Alpha:
        return self.alphas[(strategy, task, temperature)]


def harmonic(weights_and_speedups: Sequence[tuple[float, float]]) -> float:
    """Token-weighted workload speedup: total plain time over total speculative time."""
    total = sum(w for w, _ in weights_and_speedups)
    if total <= 0:
        return 1.0
    if any(s <= 0 for w, s in weights_and_speedups if w > 0):
        return 0.0  # a bucket that never finishes makes the workload's speedup 0, not a division error
    return total / sum(w / s for w, s in weights_and_speedups if w > 0)


def pinned(bs: Sequence[Bucket], batch: int | None = None, temperature: float | None = None) -> list[Bucket]:
    """The buckets with the batch and/or the temperature replaced (weights kept)."""
    return [Bucket(b.task, batch or b.batch, b.temperature if temperature is None else temperature, b.weight)
            for b in bs]


def representative_batch(low: int, high: int) -> int:
    """One batch size standing for a concurrency range (its geometric middle)."""
    return max(1, round(math.sqrt(low * high)))


def buckets(profile: WorkloadProfile) -> list[Bucket]:
    """The workload's traffic as weighted buckets (task × concurrency range × temperature)."""
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


def typical_batch(bs: Sequence[Bucket]) -> int:
    """The batch size carrying the most traffic."""
    weights: dict[int, float] = {}
    for b in bs:
        weights[b.batch] = weights.get(b.batch, 0.0) + b.weight
    return max(weights, key=lambda k: weights[k])


def ranked(rows: Sequence[Scored]) -> list[Scored]:
    """Deployable rows, best first (mean, then low): the decision deploys the first."""
    return sorted((r for r in rows if r.deployable), key=lambda r: (-r.mean, -r.low))


def family(rows: Sequence[Scored], chosen: Scored) -> list[Scored]:
    """Configurations a schedule may switch between: same strategy and branching, no deeper than the
    deployed one (engines take the deployed length as the maximum: vLLM's num_speculative_tokens,
    TensorRT-LLM's max_draft_len at the smallest schedule key)."""
    return [r for r in rows if r.plugin.name == chosen.plugin.name and r.config.topk == chosen.config.topk
            and r.config.depth <= chosen.config.depth]


def cut_to_depth(config: Config, depth: int) -> Config:
    """The same shape drafted ``depth`` deep: a chain of ``depth``, or the tree with its top-k and its
    tokens capped by what a tree that deep can hold (SGLang's rule: tokens ≤ depth·topk + 1)."""
    if not config.is_tree:
        return chain(depth)
    return Config(depth, config.topk, min(config.num_draft_tokens, depth * config.topk + 1))

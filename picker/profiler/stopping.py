"""Sequential stopping: spend target forwards only on cells that can still change the decision.

A cell stops, after at least ``min_samples`` generations, when one of these holds:

1. ``precision``: the 95% interval of α is at most ± ``ci_target`` wide;
2. ``below-break-even``: even the upper end of its α interval predicts a speedup under 1 at
   batch 1 — its α upper bound is below the break-even α for its N (``policies.theory``);
3. ``dominated``: the upper end of its predicted speedup is below the lower end of another
   cell's (another strategy, or another N) on the same task and temperature.

The plain baseline (timing only) stops after ``plain_samples`` prompts; speedups are computed on
the prompts both ran. With ``gain_ci_target`` set, precision also needs the A/B gain's interval over
rounds (``picker.profiler.ab``) within ± that share of the gain, and plain decoding runs every round
a configuration runs (the gain is paired round by round). Rules 2 and 3 use the i.i.d. α
(``alpha_iid``) and the measured step costs: S(α) = E[L](α, N) / (N·c + v), with c and v relative to a
plain target forward when the plain baseline was timed.
(Stopping at a data-dependent time makes a percentile interval slightly optimistic; the minimum
sample count and a target far below the gaps that decide a strategy keep that harmless here.)

    >>> rule = StopRule(ci_target=0.03, min_samples=8)
    >>> rule.precise(0.02, samples=10), rule.precise(0.02, samples=3)
    (True, False)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from picker.profiler.records import CellKey
from picker.profiler.stats import CellStats
from policies.scalar import chain_length

PRECISION = "precision"
BASELINE_TIMED = "baseline-timed"
BELOW_BREAK_EVEN = "below-break-even"
DOMINATED = "dominated"
EXHAUSTED = "prompts-exhausted"


@dataclass(frozen=True)
class StopRule:
    """Thresholds of the sequential stopping rule; ``early=False`` measures every prompt (fixed-sample)."""

    ci_target: float = 0.03
    min_samples: int = 8
    early: bool = True
    plain_samples: int = 16  # plain decoding is timed on this many prompts, then only speculation runs
    gain_ci_target: float = 0.0  # relative half-width of the gain's interval over rounds (0: not asked)

    def precise(self, half_width: float, samples: int) -> bool:
        return self.early and self.ci_target > 0 and samples >= self.min_samples and half_width <= self.ci_target


@dataclass(frozen=True)
class StepCost:
    """Batch-1 step costs relative to one plain target forward: S = E[L] / (N·c + v)."""

    c: float = 0.0
    v: float = 1.0


def step_cost(stats: CellStats, plain: CellStats | None) -> StepCost:
    """c and v from measured times; without a plain baseline v = 1 and c is draft/verify time."""
    plain_fwd = None
    if plain is not None:  # a plain decode forward: its measured step time, else wall per forward
        plain_fwd = plain.verify_s_per_step or (plain.wall_s / plain.forwards if plain.forwards else None)
    if plain_fwd and stats.verify_s_per_step:  # 0: a live source that reports no step timings
        return StepCost(c=(stats.draft_s_per_token or 0.0) / plain_fwd, v=stats.verify_s_per_step / plain_fwd)
    return StepCost(c=stats.cost_ratio or 0.0, v=1.0)


def speedup_bounds(key: CellKey, stats: CellStats, cost: StepCost) -> tuple[float, float] | None:
    """(low, high) predicted batch-1 speedup from the α_iid interval; None for trees or no interval."""
    if key.tree is not None or key.num_draft_tokens < 1:
        return None
    if stats.drafted == 0:
        return (1.0 / cost.v, 1.0 / cost.v)  # never drafted: each step is a plain verify
    if stats.alpha_iid_ci is None:
        return None
    n = key.num_draft_tokens
    denom = n * cost.c + cost.v
    lo, hi = stats.alpha_iid_ci
    return (chain_length(min(max(lo, 0.0), 1.0), n) / denom, chain_length(min(max(hi, 0.0), 1.0), n) / denom)


def decide(
    group: Mapping[CellKey, CellStats],
    active: set[CellKey],
    rule: StopRule,
    plain: CellStats | None = None,
    gains: Mapping[CellKey, Mapping[str, Any]] | None = None,
) -> dict[CellKey, str]:
    """Which of the ``active`` cells of one (task, temperature) group stop now, and why; ``gains``
    (``picker.profiler.ab.paired_gain`` per cell) when the rule asks for the gain's precision."""
    from picker.profiler.ab import relative_half_width

    stops: dict[CellKey, str] = {}
    bounds = {k: speedup_bounds(k, s, step_cost(s, plain)) for k, s in group.items() if not k.is_plain}
    paired = rule.gain_ci_target > 0
    for key in active:
        stats = group.get(key)
        if key.is_plain and stats is not None and rule.early and not paired and stats.samples >= rule.plain_samples:
            stops[key] = BASELINE_TIMED  # a plain forward's cost is known; its α is not a question
        if key.is_plain or stats is None or stats.samples < rule.min_samples:
            continue
        gain = (gains or {}).get(key, {})
        spread = relative_half_width(gain.get("gain_ci"), gain.get("gain_vs_plain"))
        gain_ok = not paired or spread <= rule.gain_ci_target
        alpha_ok = rule.precise(stats.half_width, stats.samples) or (
            paired and rule.early and rule.ci_target == 0 and stats.samples >= rule.min_samples)
        if alpha_ok and gain_ok:
            stops[key] = PRECISION
            continue
        own = bounds.get(key)
        if not rule.early or own is None:
            continue
        if own[1] < 1.0:
            stops[key] = BELOW_BREAK_EVEN
            continue
        rivals = [b[0] for k, b in bounds.items()
                  if k != key and b is not None and group[k].samples >= rule.min_samples]
        if rivals and own[1] < max(rivals):
            stops[key] = DOMINATED
    return stops

"""What the plan deploys, batch by batch: the temperature switch, the batch schedule, and the
deployed setting's predicted speedup at every batch on the grid, as the engine will run it.

The schedule switches the draft length by batch size only where the engine can
(``engine_configs.runs_batch_schedule``: SGLang's adaptive EAGLE chains, vLLM, TensorRT-LLM's linear
drafting). Elsewhere -- SGLang and TensorRT-LLM trees, llama.cpp -- the engine drafts the deployed
length at every batch, and so does the schedule: its rows then split only where the step cost's
source changes or the predicted speedup crosses 1.0x, so the plan says where it stops paying.

Every number a schedule row, the headline and the batch plot show is read off one
:class:`Deployment` (which setting runs on which bucket), so they agree by construction.

    >>> merge_schedule([(1, 4), (2, 4), (4, 3), (8, 0)])
    [(1, 2, 4), (3, 4, 3), (5, None, 0)]
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from picker.recommend.contract import BatchRange, TemperatureSwitch
from picker.recommend.measured_load import MEASURED, cost_source
from picker.recommend.table import BATCH_GRID, TEMPERATURE_GRID, Bucket, Scored, family, harmonic, pinned
from picker.recommend.uncertainty import enabled
from policies import break_even


def merge_schedule(points: list[tuple[int, Hashable]]) -> list[tuple[int, int | None, Any]]:
    """(batch, key) at grid points → contiguous ranges (min, max, key); point b_i covers (b_{i-1}, b_i]."""
    ranges: list[list] = []
    prev = 0
    for batch, k in points:
        if ranges and ranges[-1][2] == k:
            ranges[-1][1] = batch
        else:
            ranges.append([prev + 1, batch, k])
        prev = batch
    if ranges:
        ranges[-1][1] = None  # the last range is open-ended
    return [tuple(r) for r in ranges]  # type: ignore[misc]


def temperature_switch(opt: Scored, bs: Sequence[Bucket], batch: int | None = None) -> TemperatureSwitch:
    """Speculation off above the highest temperature at which it still pays.

    Scanned from the top, not from 0: the curve need not fall monotonically when its evidence
    differs by temperature (measured cells near the workload's temperatures, priors and the
    roofline elsewhere). A scan from 0 stopped at the first dip -- a prior-based 0.9x at T = 0 --
    and switched speculation off above 0 for a T = 1 workload measured at 1.8x. A temperature with
    no evidence (a plugin measured only near the workload's, with no published prior) never pays.
    ``batch`` pins the batch size too (a batch range's own switch), else the workload's batch mix.
    """
    known = [t for t in TEMPERATURE_GRID if opt.scored_at(bs, batch=batch, temperature=t)]
    paying = [t for t in known if opt.speedup_at(bs, batch=batch, temperature=t) >= 1.0]
    top = TEMPERATURE_GRID[-1]
    if paying and paying[-1] == known[-1] != top:
        return TemperatureSwitch(above=paying[-1], action="disable",
                                 reason=f"nothing measured or published above temperature {paying[-1]:g}")
    if paying and paying[-1] == top:
        return TemperatureSwitch(above=None, action="none",
                                 reason=f"predicted speedup stays above 1.0x up to temperature {top:g}")
    if not paying:
        return TemperatureSwitch(above=0.0, action="disable",
                                 reason="predicted speedup is below 1.0x at every temperature")
    return TemperatureSwitch(above=paying[-1], action="disable",
                             reason=f"predicted speedup falls below 1.0x above temperature {paying[-1]:g}")


def range_switch(opt: Scored, bs: Sequence[Bucket], batch: int, switch: TemperatureSwitch) -> float | None:
    """The temperature above which ``opt`` stops paying at ``batch``, where that is below the global
    switch: a larger batch makes verification dearer, so speculation can stop paying at a lower
    temperature there than over the workload's batch mix."""
    at = temperature_switch(opt, bs, batch).above
    if at is None or (switch.above is not None and at >= switch.above):
        return None
    return at


def shapes_by_depth(rows: Sequence[Scored], chosen: Scored) -> dict[int, Scored]:
    """The shape that runs where the schedule drafts k tokens: the chosen one cut to depth k (the same
    top-k and, for a tree, the node budget nearest the chosen one). (Keying the family by depth alone
    let the last shape listed stand for each depth -- a 32-node tree for a 12-node one.)"""
    budget = chosen.config.num_draft_tokens
    out: dict[int, Scored] = {chosen.config.depth: chosen}
    for o in family(rows, chosen):
        if o.config.topk != chosen.config.topk or o.config.depth == chosen.config.depth:
            continue
        held = out.get(o.config.depth)
        if held is None or abs(o.config.num_draft_tokens - budget) < abs(held.config.num_draft_tokens - budget):
            out[o.config.depth] = o
    return out


@dataclass(frozen=True)
class Deployment:
    """Which setting runs on which bucket: the schedule's draft length at the bucket's batch, the
    shape cut to it, off above the temperature switch (a range's own where it has a lower one)."""

    chosen: Scored
    shapes: Mapping[int, Scored]
    switch: TemperatureSwitch
    ranges: tuple[BatchRange, ...]

    def runs(self, b: Bucket) -> Scored | None:
        """The setting that serves bucket ``b`` (None: plain decoding)."""
        r = next(r for r in self.ranges if r.min_batch <= b.batch and (r.max_batch is None or b.batch <= r.max_batch))
        above = r.disable_above_temperature if r.disable_above_temperature is not None else self.switch.above
        if r.num_speculative_tokens == 0 or (above is not None and b.temperature > above):
            return None
        return self.shapes.get(r.num_speculative_tokens, self.chosen)

    def speedup(self, bs: Sequence[Bucket]) -> tuple[float, float, float]:
        """(mean, low, high) token-weighted over ``bs``, plain decoding (1.0) where nothing runs."""
        settings = [(b, self.runs(b)) for b in bs]
        return tuple(harmonic([(b.weight, 1.0 if s is None else s.speedups[b.key][i]) for b, s in settings])
                     for i in range(3))  # type: ignore[return-value]


Measure = Callable[[Scored, Sequence[int]], str]  # (setting, concurrency levels) -> the command that decides it


@dataclass(frozen=True)
class Point:
    """The deployed setting at one batch of the grid: its draft length (0: off) and speedup range."""

    batch: int
    k: int
    mean: float
    low: float
    high: float


def _choices(chosen: Scored, shapes: Mapping[int, Scored], kept: list[Bucket],
             varies: bool) -> tuple[dict[int, int], dict[int, Scored], dict[int, float]]:
    """Per grid batch: the draft length to run, the shape behind it, its speedup over ``kept``."""
    ks, best_o, best_s = {}, {}, {}
    cap = chosen.config.depth
    for batch in BATCH_GRID:
        if varies:
            # Never lengthen as the batch grows: verification only gets dearer with more tokens in flight.
            allowed = [o for d, o in shapes.items() if d <= cap] or list(shapes.values())
            # On only where the range's low end clears the bar, or a measured A/B gain there does
            # (uncertainty.enabled); the best of those, else off (the best setting's range is shown).
            sure = [o for o in allowed if enabled(o, kept, batch)]
            best = max(sure or allowed, key=lambda o: o.speedup_at(kept, batch=batch))
        else:
            best = chosen  # the engine drafts the deployed length at every batch
            sure = [best]  # one setting for the whole batch mix: decide.py decides it on the whole
        s = best.speedup_at(kept, batch=batch)
        k = best.config.depth if sure else 0
        cap = max(k, 1) if k else cap
        ks[batch], best_o[batch], best_s[batch] = k, best, s
    sources = {batch: cost_source(best_o[batch].costs_by_batch.get(batch)) for batch in BATCH_GRID}
    # Once off, stay off: a schedule that turns speculation back on at a larger batch is noise --
    # in the model. A measured gain against concurrency is no noise to smooth away: where the
    # step cost is measured the row follows the measurement (the reference loop, for one, batches
    # plain decoding badly at concurrency 1 and gains more at 2 and 4).
    for prev, batch in zip(BATCH_GRID, BATCH_GRID[1:]):
        if ks[prev] == 0 and sources[batch] != MEASURED:
            ks[batch] = 0
    return ks, best_o, best_s


def batch_schedule(rows: Sequence[Scored], chosen: Scored, bs: Sequence[Bucket], switch: TemperatureSwitch,
                   varies: bool = True, measure: Measure | None = None) -> tuple[Deployment, tuple[Point, ...]]:
    """The deployment of ``chosen`` batch by batch, and its predicted speedup at each grid batch.

    ``varies``: the engine can switch the draft length by batch size; else the chosen length runs at
    every batch. Each grid point b_i decides the range (b_{i-1}, b_i] (the largest batch in it, the
    dearest); a range ends where the draft length or the step cost's source changes, and for a fixed
    length also where the predicted range's low end stops clearing the bar (``uncertainty.enabled``).
    ``measure`` writes the command that would decide an uncertain range (its ``measure`` field):
    the setting in question and the traffic's batch sizes inside the range (else its first batch).
    """
    shapes = shapes_by_depth(rows, chosen)
    kept = [b for b in bs if switch.above is None or b.temperature <= switch.above] or list(bs)
    ks, best_o, best_s = _choices(chosen, shapes, kept, varies)
    sources = {batch: cost_source(best_o[batch].costs_by_batch.get(batch)) for batch in BATCH_GRID}
    keys = [(batch, (ks[batch], sources[batch], None if varies else enabled(best_o[batch], kept, batch)))
            for batch in BATCH_GRID]
    spans = [(lo, hi, key[0], [b for b in BATCH_GRID if b >= lo and (hi is None or b <= hi)])
             for lo, hi, key in merge_schedule(keys)]
    # Each range's own temperature switch (only where the engine switches by batch at all: a range
    # switch turns speculation off at some batch sizes), then what runs where; the rows read it.
    switches = {lo: range_switch(best_o[grid[0]], bs, grid[0], switch) if k and varies else None
                for lo, _, k, grid in spans}
    bare = tuple(BatchRange(min_batch=lo, max_batch=hi, num_speculative_tokens=k, predicted_speedup=1.0,
                            predicted_speedup_at_max_batch=1.0, disable_above_temperature=switches[lo])
                 for lo, hi, k, _ in spans)
    deployment = Deployment(chosen, shapes, switch, bare)
    points = tuple(Point(batch, ks[batch], *deployment.speedup(pinned(bs, batch=batch))) for batch in BATCH_GRID)
    at = {p.batch: p for p in points}
    ranges = []
    for (lo, hi, k, grid), row in zip(spans, bare):
        first = at[grid[0]]
        if k:
            low, high = first.low, first.high
            ref = _reference_batch(bs, lo, hi, grid[0])
            shape = shapes.get(k, chosen)
            cost = shape.costs_by_batch.get(ref)
            be = round(break_even(shape.config, cost), 3) if cost is not None else None
        else:  # off: what the best setting would give there
            low, high = (best_o[grid[0]].speedup_at(kept, batch=grid[0], which=w) for w in (1, 2))
            ref, be = None, None
        # Uncertain: the range does not decide it. Off where the best setting could still pay (its
        # high end reaches 1) but its low end does not clear the bar; on at a length the engine
        # runs at every batch, where the low end here does not clear it.
        sure = enabled(best_o[grid[0]], kept, grid[0])
        ranges.append(row.model_copy(update=dict(
            predicted_speedup=round(first.mean, 3), predicted_speedup_at_max_batch=round(at[grid[-1]].mean, 3),
            break_even_alpha=be, break_even_at_batch=ref if be is not None else None,
            predicted_speedup_range=(round(low, 3), round(high, 3)),
            uncertain=not sure and (high >= 1.0 if not k else True), step_cost=sources[grid[0]])))
        if ranges[-1].uncertain and measure is not None:
            levels = sorted({b.batch for b in bs if lo <= b.batch and (hi is None or b.batch <= hi)}) or [grid[0]]
            ranges[-1] = ranges[-1].model_copy(update={"measure": measure(best_o[grid[0]], levels)})
    return Deployment(chosen, shapes, switch, tuple(ranges)), points


def _reference_batch(bs: Sequence[Bucket], lo: int, hi: int | None, first: int) -> int:
    """The batch a range's break-even α is stated at: the one carrying most of its traffic, else its
    first batch on the grid."""
    weights: dict[int, float] = {}
    for b in bs:
        if lo <= b.batch and (hi is None or b.batch <= hi):
            weights[b.batch] = weights.get(b.batch, 0.0) + b.weight
    return max(weights, key=lambda k: (weights[k], -k)) if weights else first

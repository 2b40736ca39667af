"""How sure a predicted speedup is, and when that is sure enough to turn speculation on.

A predicted speedup's range (mean, low, high) carries two spreads, combined in quadrature in log
space (they are independent): the evidence's -- the speedup at the ends of the α interval, and the
measured A/B gain's interval where the profiler timed that configuration at that concurrency
(:func:`widened`) -- and the model's own: the load curve's held-out error
(``policies.HELD_OUT_ERROR``: 80 % of 60 published speedups it was not fitted on lie within 15.5 %;
on a CPU deployment ``CPU_HELD_OUT_ERROR``, 32.5 %, from interleaved runs on the zoo and llama.cpp).
How often measured gains fall inside, on held-out runs: ``docs/load-curve.md`` (coverage).

The decision rule (:func:`enabled`): a setting is on for some traffic only where its predicted
range's low end clears :data:`ENABLE_LOW`, or where the A/B gain measured at that concurrency, with
its interval, has its low end above 1. A straddling range is no reason to enable: it is off, and the
plan says what to measure (``picker.recommend.measure``).

    >>> lo, hi = widened((1.02, 1.00, 1.04), None)[1:]
    >>> round(lo, 3), round(hi, 3)
    (0.882, 1.208)
    >>> clears(0.99), clears(1.03)
    (False, True)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from picker.inputs.measurements import TEMPERATURE_MATCH, Measurements
from picker.recommend.measured_load import config_of
from picker.recommend.table import Bucket, BucketKey, Option, Scored, Speedups, harmonic, pinned
from policies import HELD_OUT_ERROR, Config

# The lower bound must clear 1 by this much to turn speculation on. The bound already holds the
# model's held-out error (policies.HELD_OUT_ERROR / CPU_HELD_OUT_ERROR, each the 80th percentile of
# |error|: about one outcome in ten falls below the low end); the margin is the 2 % a deployment change
# must buy anyway (table.NOT_WORTH_IT). Checked on held-out runs (docs/load-curve.md, coverage; 60
# interleaved gains on the zoo and llama.cpp): of the 22 whose predicted low end cleared 1.02, one
# measured below 1 (0.82x, one prompt of summarization that the other run of the same measured at 1.27x).
ENABLE_MARGIN = 0.02
ENABLE_LOW = 1.0 + ENABLE_MARGIN


@dataclass(frozen=True)
class ABGain:
    """The profiler's A/B gain (interleaved rounds against plain decoding) and its 95% interval."""

    task: str
    temperature: float
    concurrency: int
    gain: float
    low: float
    high: float


def ab_gains(measurements: Measurements | None) -> dict[tuple[str, Config], tuple[ABGain, ...]]:
    """(strategy, configuration) -> the cells' ``gain_vs_plain`` with their ``gain_ci``
    (``picker.profiler.ab``: a percentile bootstrap over paired rounds); cells without an interval
    are left out (a gain without one cannot say it is above 1)."""
    out: dict[tuple[str, Config], list[ABGain]] = {}
    for c in measurements.cells if measurements is not None else ():
        extra = c.model_extra or {}
        gain, ci, config = extra.get("gain_vs_plain"), extra.get("gain_ci"), config_of(c)
        if gain is None or not ci or config is None:
            continue
        out.setdefault((c.strategy, config), []).append(
            ABGain(c.task, c.temperature, c.concurrency, float(gain), float(ci[0]), float(ci[1])))
    return {k: tuple(v) for k, v in out.items()}


def ab_at(gains: Mapping[tuple[str, Config], tuple[ABGain, ...]], option: Option, key: BucketKey) -> Speedups | None:
    """The A/B gain (gain, low, high) measured for ``option`` on the bucket's task at its batch as the
    concurrency, at the nearest temperature within ``TEMPERATURE_MATCH``; None where none was."""
    if not gains:  # no A/B cells at all (every profile without measurements): skip hashing the option
        return None
    task, batch, temperature = key
    near = [g for g in gains.get((option.plugin.name, option.config), ())
            if g.task == task and g.concurrency == batch and abs(g.temperature - temperature) <= TEMPERATURE_MATCH]
    if not near:
        return None
    g = min(near, key=lambda g: abs(g.temperature - temperature))
    return g.gain, g.low, g.high


def widened(s: Speedups, measured: Speedups | None, error: float = HELD_OUT_ERROR) -> Speedups:
    """(mean, low, high) with the model's relative ``error`` added to the evidence's spread in
    quadrature (log space), and a measured A/B interval at this point taken in whole."""
    mean, low, high = s
    if mean <= 0:
        return s
    down = math.hypot(math.log(mean / low) if low > 0 else 0.0, math.log1p(error))
    up = math.hypot(math.log(high / mean) if high > 0 else 0.0, -math.log1p(-error))
    low, high = mean * math.exp(-down), mean * math.exp(up)
    if measured is not None:
        low, high = min(low, measured[1]), max(high, measured[2])
    return mean, low, high


def clears(low: float) -> bool:
    """Whether a predicted range's low end is sure enough to turn speculation on."""
    return low >= ENABLE_LOW


def measured_low(opt: Scored, bs: Sequence[Bucket], batch: int | None = None) -> float | None:
    """The low end of the measured A/B gain over ``bs`` (the batch pinned where given), token-weighted
    as every workload speedup is; None unless every bucket was measured at its own concurrency."""
    pins = pinned(bs, batch=batch)
    if not pins or any(b.key not in opt.measured for b in pins):
        return None
    return harmonic([(b.weight, opt.measured[b.key][1]) for b in pins])


def enabled(opt: Scored, bs: Sequence[Bucket], batch: int | None = None) -> bool:
    """The decision rule: the predicted low end over ``bs`` clears :data:`ENABLE_LOW`, or the A/B gain
    measured there has its low end above 1."""
    if clears(opt.speedup_at(bs, batch=batch, which=1)):
        return True
    low = measured_low(opt, bs, batch)
    return low is not None and low > 1.0

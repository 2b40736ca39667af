"""Rates from counters, in one place, each with its convention; bootstrap intervals over prompts.

Conventions (written into ``summary.json`` as well):

- ``alpha``: accepted draft tokens / proposed draft tokens, the bonus token excluded (vLLM's
  "draft acceptance rate"). For a chain of N it counts tokens drafted after a rejection as not
  accepted, so it falls with N even when every position accepts alike.
- ``alpha_iid``: accepted / examined draft positions (a position is examined when all before it
  were accepted): the maximum-likelihood per-token α of the i.i.d. model E[L] = (1-α^(N+1))/(1-α)
  (Leviathan 2023), independent of N when positions accept alike. This is the α of the theory.
- ``per_position[k]``: P(position k accepted | positions < k accepted), conditional.
- ``tau``: tokens per verify step that carried drafts, bonus included: 1 + accepted / draft steps
  (vLLM's "mean acceptance length"; SGLang's ``spec_accept_length`` up to its prefill token);
  ``tokens_per_forward`` = tokens / all target forwards, prefill and draftless steps included.
- ``cost_ratio`` c: (draft seconds per draft token) / (verify seconds per verify step).

Intervals: percentile bootstrap that resamples *generations* (prompts), the independent units;
tokens within one generation are correlated, so a binomial interval over tokens is too narrow.
With fewer than :data:`MIN_BOOTSTRAP` generations that drafted anything, the Wilson interval over
tokens stands in, and ``alpha_ci_method`` says which was used.

    >>> from picker.profiler.records import CellKey, Record
    >>> key = CellKey("code", "ngram", 0.0, 2)
    >>> recs = [Record(key, (f"p{i}",), tokens=6, forwards=3, steps=2, drafted=4, accepted=i % 3,
    ...                pos_reached=(2, i % 3), pos_accepted=(i % 3, 0)) for i in range(10)]
    >>> s = cell_stats(recs)
    >>> s.alpha, s.samples, s.alpha_ci_method
    (0.225, 10, 'bootstrap-prompts')
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from picker.profiler.records import Record

Z95 = 1.959963984540054
MIN_BOOTSTRAP = 5     # fewer units than this: a bootstrap interval is meaningless, use Wilson
BOOTSTRAP_DRAWS = 2000


@dataclass(frozen=True)
class CellStats:
    """Sums and derived rates of one cell's records."""

    samples: int            # independent units: generations (or waves, for counter-delta sources)
    tokens: int
    forwards: int
    steps: int
    draft_steps: int
    drafted: int
    accepted: int
    alpha: float | None
    alpha_ci: tuple[float, float] | None
    alpha_ci_method: str
    alpha_iid: float | None
    alpha_iid_ci: tuple[float, float] | None
    per_position: list[float | None]
    per_position_n: list[int]
    sibling_accept: list[float | None]  # conditional acceptance of sibling ranks 2.. (picker.engine.siblings)
    sibling_reached: list[float]        # expected rejections that reached each of those ranks
    tau: float | None
    tokens_per_forward: float | None
    cost_ratio: float | None
    draft_s_per_token: float | None
    verify_s_per_step: float | None
    wall_s: float
    tokens_per_second: float | None

    @property
    def half_width(self) -> float:
        """Half the CI width of ``alpha`` (1.0 when there is no interval yet)."""
        if self.alpha_ci is None:
            return 1.0
        return (self.alpha_ci[1] - self.alpha_ci[0]) / 2


def _div(a: float, b: float) -> float | None:
    return a / b if b else None


def wilson(successes: int, trials: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion.

        >>> [round(x, 4) for x in wilson(8, 10)]
        [0.4902, 0.9433]
    """
    if trials <= 0:
        return (0.0, 1.0)
    p = successes / trials
    denom = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denom
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def bootstrap_ratio(num: np.ndarray, den: np.ndarray, seed: int,
                    draws: int = BOOTSTRAP_DRAWS) -> tuple[float, float] | None:
    """95% percentile interval of Σnum/Σden when units (rows) are resampled with replacement."""
    n = len(num)
    if n == 0 or den.sum() <= 0:
        return None
    rng = np.random.default_rng(seed)
    # Multinomial counts per draw = how often each unit is picked: one matrix product, no loops.
    weights = rng.multinomial(n, np.full(n, 1.0 / n), size=draws).astype(float)
    tot_den = weights @ den
    ok = tot_den > 0  # a resample made only of units without drafts has no ratio
    ratios = (weights @ num)[ok] / tot_den[ok]
    if len(ratios) == 0:
        return None
    lo, hi = np.percentile(ratios, [2.5, 97.5])
    return (float(lo), float(hi))


def _units(records: Sequence[Record]) -> list[list[Record]]:
    """Group records into independent units: all records of a prompt (its turns, re-runs) together."""
    units: dict[tuple[str, ...], list[Record]] = {}
    for r in records:
        units.setdefault(r.prompt_ids, []).append(r)
    return list(units.values())


def _positions(records: Sequence[Record], reached_field: str = "pos_reached", accepted_field: str = "pos_accepted",
               dtype: type = np.int64) -> tuple[np.ndarray, np.ndarray]:
    """Per-position (reached, accepted) summed over records (lists of unequal length, zero-padded):
    draft positions by default, or the sibling probe's expected counts (``sib_*``, floats)."""
    depth = max((len(getattr(r, reached_field)) for r in records), default=0)
    reached, acc = np.zeros(depth, dtype=dtype), np.zeros(depth, dtype=dtype)
    for r in records:
        n, a = getattr(r, reached_field), getattr(r, accepted_field)
        reached[: len(n)] += np.asarray(n, dtype=dtype)
        acc[: len(a)] += np.asarray(a, dtype=dtype)
    return reached, acc


def cell_stats(records: Sequence[Record], seed_key: str = "") -> CellStats:
    """Aggregate one cell's records; intervals are reproducible for a given ``seed_key``."""
    units = _units(records)
    sums = np.array([[sum(getattr(r, f) for r in u) for f in ("accepted", "drafted")] +
                     [sum(sum(r.pos_accepted) for r in u), sum(sum(r.pos_reached) for r in u)]
                     for u in units], dtype=float).reshape(len(units), 4)
    tokens = sum(r.tokens for r in records)
    forwards = sum(r.forwards for r in records)
    steps = sum(r.steps for r in records)
    draft_steps = sum(r.steps if r.draft_steps is None else r.draft_steps for r in records)
    drafted = sum(r.drafted for r in records)
    accepted = sum(r.accepted for r in records)
    draft_s = sum(r.draft_s for r in records)
    verify_s = sum(r.verify_s for r in records)
    wall_s = sum(r.wall_s for r in records)
    seed = zlib.crc32(seed_key.encode())
    # Units without drafts carry no information on α: a bootstrap over one drafting prompt
    # would return a zero-width interval, so count only units that drafted.
    if int((sums[:, 1] > 0).sum()) >= MIN_BOOTSTRAP:
        ci, method = bootstrap_ratio(sums[:, 0], sums[:, 1], seed), "bootstrap-prompts"
        ci_iid = bootstrap_ratio(sums[:, 2], sums[:, 3], seed)
    else:
        ci = wilson(accepted, drafted) if drafted else None
        ci_iid = wilson(int(sums[:, 2].sum()), int(sums[:, 3].sum())) if sums[:, 3].sum() else None
        method = "wilson-tokens"
    reached, acc = _positions(records)
    sib_reached, sib_acc = _positions(records, "sib_reached", "sib_accepted", float)
    per_s = _div(draft_s, drafted)
    ver_s = _div(verify_s, steps)
    return CellStats(
        samples=len(units), tokens=tokens, forwards=forwards, steps=steps, draft_steps=draft_steps,
        drafted=drafted,
        accepted=accepted, alpha=_div(accepted, drafted), alpha_ci=ci, alpha_ci_method=method,
        alpha_iid=_div(float(acc.sum()), float(reached.sum())), alpha_iid_ci=ci_iid,
        per_position=[_div(int(a), int(n)) for a, n in zip(acc, reached)],
        per_position_n=[int(n) for n in reached],
        sibling_accept=[_div(float(a), float(n)) for a, n in zip(sib_acc, sib_reached)],
        sibling_reached=[float(n) for n in sib_reached],
        tau=(1 + accepted / draft_steps) if draft_steps else None,
        tokens_per_forward=_div(tokens, forwards),
        cost_ratio=(per_s / ver_s) if per_s is not None and ver_s else None,
        draft_s_per_token=per_s, verify_s_per_step=ver_s, wall_s=wall_s,
        tokens_per_second=_div(tokens, wall_s),
    )


def wave_seconds(records: Sequence[Record]) -> float:
    """Wall-clock seconds the records' waves took: per wave, last finish minus its start.

    Records stamped by the runner (``picker.profiler.records.stamp_wave``) share a wave id; older
    records without one count their own ``wall_s`` (one request in flight at a time).
    """
    spans: dict[str, tuple[float, float]] = {}
    loose = 0.0
    for r in records:
        wave, t0, t1 = r.extra.get("wave"), r.extra.get("wave_t0"), r.extra.get("t1")
        if wave is None or t0 is None or t1 is None:
            loose += r.wall_s
            continue
        lo, hi = spans.get(wave, (float(t0), float(t1)))
        spans[wave] = (min(lo, float(t0)), max(hi, float(t1)))
    return loose + sum(hi - lo for lo, hi in spans.values())


def tau_by_depth(per_position: Sequence[float | None]) -> list[float]:
    """Expected tokens per step had the chain been cut at depth n = 1..len: 1 + Σ_k Π_{j≤k} α_j.

    A chain drafter's k-th token does not depend on how many follow it, so the conditional
    acceptances measured at depth N predict every shorter chain without measuring it.

        >>> tau_by_depth([0.8, 0.5])
        [1.8, 2.2]
    """
    out, reach, total = [], 1.0, 1.0
    for a in per_position:
        if a is None:
            break
        reach *= a
        total += reach
        out.append(round(total, 6))
    return out

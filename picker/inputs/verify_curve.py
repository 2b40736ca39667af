"""The verify-time curve: one verify forward's time against the tokens in flight, read from disk.

``specpick sweep`` measures it (``picker.profiler.sweep.measure_verify_curve``) into
``verify_curve.jsonl``, one JSON line per timed forward of m query tokens over a cached context;
the recommender reads it back as ``(m, T(m)/T(1))`` pairs that stand in for the roofline's
verify cost.

    >>> curve = [CurvePoint(1, 128, 0.010), CurvePoint(4, 128, 0.012), CurvePoint(16, 128, 0.020)]
    >>> round(verify_ratio(curve, 4), 3), ratio_curve(curve)[-1]
    (1.2, (16.0, 2.0))
"""

from __future__ import annotations

import bisect
import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CURVE_NAME = "verify_curve.jsonl"


@dataclass(frozen=True)
class CurvePoint:
    """Median seconds of one verify forward of ``tokens`` query tokens over ``context`` cached ones."""

    tokens: int
    context: int
    seconds: float


def read_curve_lines(path: Path) -> list[dict[str, Any]]:
    """The timings in a ``verify_curve.jsonl`` (a torn last line is dropped)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # only the last line can be torn; it is measured again
    return out


def curve_medians(lines: Sequence[Mapping[str, Any]]) -> list[CurvePoint]:
    """One time per (m, context): the fastest repeat.

    Contention on a shared CPU only ever adds time (seen here: repeats of one forward spread from
    13 to 24 ms), so the minimum estimates the forward's own cost best (``timeit``'s rule); the
    name stays for the callers.
    """
    groups: dict[tuple[int, int], list[float]] = {}
    for d in lines:
        groups.setdefault((int(d["tokens"]), int(d["context"])), []).append(float(d["seconds"]))
    return [CurvePoint(m, c, min(v)) for (m, c), v in sorted(groups.items())]


def verify_ratio(curve: Sequence[CurvePoint], tokens: float, base: float = 1.0) -> float:
    """T(tokens) / T(base) from the measured curve (log-log interpolation, contexts pooled by
    median ratio; beyond the largest m, extrapolated linearly in m from the last two points)."""
    by_context: dict[int, list[CurvePoint]] = {}
    for p in curve:
        by_context.setdefault(p.context, []).append(p)
    ratios = [_interp(sorted(ps, key=lambda p: p.tokens), tokens) / _interp(sorted(ps, key=lambda p: p.tokens), base)
              for ps in by_context.values() if len(ps) >= 2]
    if not ratios:
        raise ValueError("the verify curve needs at least two token counts")
    return statistics.median(ratios)


def ratio_curve(curve: Sequence[CurvePoint]) -> list[tuple[float, float]]:
    """(m, T(m)/T(1)) for every measured m, made non-decreasing by pooling adjacent violators.

    More tokens in a forward never take less time; a dip in the medians is timing noise (a shared
    CPU drifts by tens of percent), so violators are pooled (isotonic regression, equal weights).
    """
    ms = sorted({p.tokens for p in curve})
    if len(ms) < 2:
        return [(1.0, 1.0)]
    blocks: list[list[float]] = []  # [sum, count, first m index]
    for i, m in enumerate(ms):
        blocks.append([verify_ratio(curve, m), 1.0, float(i)])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            total, count, _ = blocks.pop()
            blocks[-1][0] += total
            blocks[-1][1] += count
    out: list[tuple[float, float]] = []
    for b_i, (total, count, start) in enumerate(blocks):
        end = int(blocks[b_i + 1][2]) if b_i + 1 < len(blocks) else len(ms)
        out += [(float(ms[j]), total / count) for j in range(int(start), end)]
    base = out[0][1]
    return [(m, r / base) for m, r in out]


def _interp(points: list[CurvePoint], m: float) -> float:
    xs = [p.tokens for p in points]
    ys = [p.seconds for p in points]
    if m <= xs[0]:
        return ys[0]
    if m >= xs[-1]:
        slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
        return ys[-1] + max(slope, 0.0) * (m - xs[-1])
    i = bisect.bisect_right(xs, m)
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    w = (math.log(m) - math.log(x0)) / (math.log(x1) - math.log(x0))
    return math.exp(math.log(y0) + w * (math.log(y1) - math.log(y0)))


def verify_curve_beside(measurements_path: Path | None) -> list[tuple[float, float]] | None:
    """(tokens in flight, T(m)/T(1)) from ``verify_curve.jsonl`` next to the measurements, if any."""
    if measurements_path is None:
        return None
    path = Path(measurements_path).parent / CURVE_NAME
    if not path.is_file():
        return None
    curve = ratio_curve(curve_medians(read_curve_lines(path)))
    return curve if len(curve) >= 2 else None

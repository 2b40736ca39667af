"""The gain over plain decoding measured like an A/B test: paired rounds, balanced order, an interval.

A *round* is one block of prompts that every cell of a group (plain decoding and each
configuration, same task, temperature and load) runs. Within a round the cells run one after
another in an order that alternates -- ABBA (the order reversed every other round: A B, B A, A B
...), or a seeded random order per round -- so a slow drift of a shared machine, a server that
warms up, or whatever runs first or after a pause, falls on both sides alike. The gain is

    (Σ tokens / Σ seconds of the cell) / (Σ tokens / Σ seconds of plain)

over the rounds both ran, the seconds of a round being its wave's wall-clock span (first request
sent to last answer), and its 95% interval is a percentile bootstrap over rounds (pairs
resampled together: the pairing is what removes the drift). ``decode_gain`` is the same ratio of
decode rates from the requests' own clocks: Σ (tokens − 1) / Σ (e2e − TTFT), the prefill left out.

    >>> order = round_order(["plain", "ngram", "vanilla"], 1, seed=0, how="abba")
    >>> order
    ['vanilla', 'ngram', 'plain']
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np

from picker.profiler.records import Record

T = TypeVar("T")
ORDERS = ("abba", "random")
MIN_ROUNDS = 5  # fewer paired rounds: no interval
DRAWS = 2000


def round_order(cells: Sequence[T], index: int, *, seed: int, how: str) -> list[T]:
    """The order the cells of a group run in round ``index``."""
    if how == "random":
        out = list(cells)
        random.Random(f"{seed}|{index}").shuffle(out)
        return out
    return list(cells) if index % 2 == 0 else list(reversed(cells))


def _round(r: Record) -> Any:
    """The round a record belongs to: the runner's stamp, else its wave (older records)."""
    return r.extra.get("round", r.extra.get("wave", id(r)))


def per_round(records: Sequence[Record]) -> dict[Any, tuple[float, float, float, float]]:
    """Round -> (tokens, wall seconds, decode tokens, decode seconds)."""
    spans: dict[Any, dict[str, tuple[float, float]]] = defaultdict(dict)
    out: dict[Any, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    for r in records:
        key = _round(r)
        acc = out[key]
        acc[0] += r.tokens
        wave, t0, t1 = r.extra.get("wave"), r.extra.get("wave_t0"), r.extra.get("t1")
        if wave is None or t0 is None or t1 is None:
            acc[1] += r.wall_s
        else:
            lo, hi = spans[key].get(wave, (float(t0), float(t1)))
            spans[key][wave] = (min(lo, float(t0)), max(hi, float(t1)))
        for t in r.timings:
            if t.tokens > 1:
                acc[2] += t.tokens - 1
                acc[3] += t.e2e_s - t.ttft_s
    for key, waves in spans.items():
        out[key][1] += sum(hi - lo for lo, hi in waves.values())
    return {k: (v[0], v[1], v[2], v[3]) for k, v in out.items()}


def _ratio(ours: np.ndarray, theirs: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """(Σ w·tokens / Σ w·seconds) ours over theirs, per row of ``weights``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        a = (weights @ ours[:, 0]) / (weights @ ours[:, 1])
        b = (weights @ theirs[:, 0]) / (weights @ theirs[:, 1])
        return a / b


def paired_gain(records: Sequence[Record], plain: Sequence[Record], seed: int = 0) -> dict[str, Any]:
    """``gain_vs_plain`` / ``decode_gain_vs_plain`` with intervals over the rounds both ran."""
    mine, base = per_round(records), per_round(plain)
    shared = sorted((k for k in mine if k in base), key=str)
    if not shared:
        return {}
    ours = np.array([mine[k] for k in shared], dtype=float)
    theirs = np.array([base[k] for k in shared], dtype=float)
    one = np.ones((1, len(shared)))
    boot = (np.random.default_rng(seed).multinomial(len(shared), np.full(len(shared), 1.0 / len(shared)),
                                                     size=DRAWS).astype(float)
            if len(shared) >= MIN_ROUNDS else None)
    out: dict[str, Any] = {"rounds": len(shared)}
    for name, cols in (("gain_vs_plain", [0, 1]), ("decode_gain_vs_plain", [2, 3])):
        a, b = ours[:, cols], theirs[:, cols]
        if not (a[:, 1] > 0).any() or not (b[:, 1] > 0).any() or not a[:, 0].sum() or not b[:, 0].sum():
            continue
        out[name] = round(float(_ratio(a, b, one)[0]), 4)
        ci = None
        if boot is not None:
            draws = _ratio(a, b, boot)
            draws = draws[np.isfinite(draws)]
            if len(draws):
                ci = [round(float(x), 4) for x in np.percentile(draws, [2.5, 97.5])]
        out[name.replace("_vs_plain", "_ci")] = ci
    return out


def relative_half_width(ci: Sequence[float] | None, point: float | None) -> float:
    """Half the interval's width over the point estimate (1.0 without an interval)."""
    if not ci or not point:
        return 1.0
    return (ci[1] - ci[0]) / 2 / point

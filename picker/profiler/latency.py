"""Time per token: each request's clock, and TTFT / ITL / TPOT / e2e percentiles with intervals.

Definitions (the ones vLLM's and SGLang's serving load clients print; written into
``summary.json``'s conventions):

- **TTFT**: from sending the request (the reference loop: admitting it) to its first token;
  queueing inside the engine included, a client-side wait for a free slot (``--max-in-flight``)
  not (that is ``queued_s``).
- **ITL**: the gap between consecutive streamed chunks. A chunk that carries k tokens (a
  speculative step's accepted tokens, emitted together) is ONE gap, not k.
- **TPOT**: (e2e − TTFT) / (tokens − 1) per request (requests of one token have none).
- **e2e**: from sending to the last token.

Percentiles are inverted-CDF (the smallest value with at least that share at or below it), so a
bootstrap draw and the point estimate use one rule. Intervals: percentile bootstrap over
*requests* (a request's gaps move together: resampling gaps alone would be too narrow).

    >>> t = Timing(ttft_s=0.1, e2e_s=0.4, chunks=(1, 3, 1), gaps_s=(0.2, 0.1))
    >>> t.tokens, round(t.tpot_s, 3)
    (5, 0.075)
    >>> s = latency_stats([t], seed_key="x")
    >>> s["itl_ms_p50"], s["ttft_ms_mean"], s["requests"]
    (100.0, 100.0, 1)
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

METRICS = ("ttft", "itl", "tpot", "e2e")
STATS = ("mean", "p50", "p90", "p99")
# Figures whose ratio to plain decoding is reported (each with its interval).
RATIOS = (("ttft", "mean"), ("ttft", "p99"), ("itl", "mean"), ("itl", "p50"), ("itl", "p99"),
          ("tpot", "mean"), ("tpot", "p50"), ("tpot", "p99"), ("e2e", "mean"))
DRAWS = 1000
MIN_REQUESTS = 5  # fewer: no interval (a bootstrap over a handful of requests is not one)


@dataclass(frozen=True)
class Timing:
    """One request's clock in seconds: first token, last token, and what came in between."""

    ttft_s: float
    e2e_s: float
    chunks: tuple[int, ...]  # tokens each chunk carried, the first chunk included
    gaps_s: tuple[float, ...]  # len(chunks) - 1 gaps, chunk k-1 -> chunk k
    queued_s: float = 0.0  # open loop: its arrival -> its sending (a client-side cap in flight)
    sent_s: float = 0.0  # when it was sent, seconds after its wave began
    engine: dict[str, float] = field(default_factory=dict)  # the engine's own clock for it, where reported

    @property
    def tokens(self) -> int:
        return sum(self.chunks)

    @property
    def tpot_s(self) -> float | None:
        return (self.e2e_s - self.ttft_s) / (self.tokens - 1) if self.tokens > 1 else None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ttft_s": round(self.ttft_s, 6), "e2e_s": round(self.e2e_s, 6),
                               "chunks": list(self.chunks), "gaps_s": [round(g, 6) for g in self.gaps_s]}
        if self.queued_s:
            out["queued_s"] = round(self.queued_s, 6)
        if self.sent_s:
            out["sent_s"] = round(self.sent_s, 6)
        if self.engine:
            out["engine"] = dict(self.engine)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Timing:
        return cls(float(data["ttft_s"]), float(data["e2e_s"]), tuple(int(c) for c in data["chunks"]),
                   tuple(float(g) for g in data["gaps_s"]), float(data.get("queued_s", 0.0)),
                   float(data.get("sent_s", 0.0)), dict(data.get("engine", {})))


def from_emissions(start: float, emissions: Iterable[tuple[float, int]], *, queued_s: float = 0.0,
                   sent_s: float = 0.0, engine: dict[str, float] | None = None) -> Timing | None:
    """A request's timing from its start and (time, tokens) per chunk (chunks of 0 tokens dropped).

        >>> from_emissions(1.0, [(1.5, 1), (1.7, 0), (2.0, 2)]).gaps_s
        (0.5,)
    """
    chunks = [(t, n) for t, n in emissions if n > 0]
    if not chunks:
        return None
    times = [t for t, _ in chunks]
    # Microseconds, as the record file keeps them: a summary from memory equals one from the file.
    return Timing(round(times[0] - start, 6), round(times[-1] - start, 6), tuple(n for _, n in chunks),
                  tuple(round(b - a, 6) for a, b in zip(times, times[1:])), round(queued_s, 6), round(sent_s, 6),
                  engine or {})


def _weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> np.ndarray:
    """Inverted-CDF quantile of ``values`` per row of ``weights`` (rows: bootstrap draws)."""
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weights[:, order], axis=1)
    idx = (cum >= q * cum[:, -1:] - 1e-12).argmax(axis=1)
    return values[order][idx]


def _figures(values: np.ndarray, weights: np.ndarray) -> dict[str, np.ndarray]:
    """Mean, p50, p90, p99 per row of ``weights``."""
    total = weights.sum(axis=1)
    out = {"mean": (weights @ values) / np.where(total > 0, total, 1.0)}
    for stat, q in (("p50", 0.50), ("p90", 0.90), ("p99", 0.99)):
        out[stat] = _weighted_quantile(values, weights, q)
    return out


def _samples(timings: Sequence[Timing], metric: str) -> tuple[np.ndarray, np.ndarray]:
    """(values in ms, the request each value belongs to) for one metric."""
    vals: list[float] = []
    owner: list[int] = []
    for i, t in enumerate(timings):
        if metric == "itl":
            vals += t.gaps_s
            owner += [i] * len(t.gaps_s)
            continue
        v = {"ttft": t.ttft_s, "e2e": t.e2e_s, "tpot": t.tpot_s}[metric]
        if v is not None:
            vals.append(v)
            owner.append(i)
    return np.asarray(vals, dtype=float) * 1e3, np.asarray(owner, dtype=int)


def _draws(n: int, seed: int, draws: int) -> np.ndarray:
    """Multinomial request weights per bootstrap draw (how often each request is picked)."""
    rng = np.random.default_rng(seed)
    return rng.multinomial(n, np.full(n, 1.0 / n), size=draws).astype(float)


def metric_draws(timings: Sequence[Timing], seed: int, draws: int = DRAWS
                 ) -> dict[tuple[str, str], tuple[float, np.ndarray | None]]:
    """(point estimate, bootstrap draws or None) of every (metric, stat), in milliseconds."""
    n = len(timings)
    boot = _draws(n, seed, draws) if n >= MIN_REQUESTS else None
    out: dict[tuple[str, str], tuple[float, np.ndarray | None]] = {}
    for metric in METRICS:
        values, owner = _samples(timings, metric)
        if not len(values):
            continue
        point = _figures(values, np.ones((1, len(values))))
        spread = _figures(values, boot[:, owner]) if boot is not None else None
        for stat in STATS:
            out[(metric, stat)] = (float(point[stat][0]), None if spread is None else spread[stat])
    return out


def _ci(x: np.ndarray | None) -> list[float] | None:
    if x is None:
        return None
    ok = x[np.isfinite(x)]
    if not len(ok):
        return None
    lo, hi = np.percentile(ok, [2.5, 97.5])
    return [round(float(lo), 4), round(float(hi), 4)]


def latency_stats(timings: Sequence[Timing], seed_key: str = "", plain: Sequence[Timing] = ()) -> dict[str, Any]:
    """``{metric}_ms_{stat}`` and ``..._ci`` for every metric and stat; with ``plain``, the ratios
    ``{metric}_ms_{stat}_vs_plain`` (and their intervals: both sides resampled, independently)."""
    if not timings:
        return {}
    seed = zlib.crc32(seed_key.encode())
    ours = metric_draws(timings, seed)
    out: dict[str, Any] = {"requests": len(timings)}
    for (metric, stat), (point, spread) in ours.items():
        out[f"{metric}_ms_{stat}"] = round(point, 4)
        out[f"{metric}_ms_{stat}_ci"] = _ci(spread)
    if plain:
        theirs = metric_draws(plain, seed + 1)
        for metric, stat in RATIOS:
            a, b = ours.get((metric, stat)), theirs.get((metric, stat))
            if a is None or b is None or b[0] <= 0:
                continue
            out[f"{metric}_ms_{stat}_vs_plain"] = round(a[0] / b[0], 4)
            both = a[1] is not None and b[1] is not None
            out[f"{metric}_ms_{stat}_vs_plain_ci"] = _ci(a[1] / np.where(b[1] > 0, b[1], np.nan)) if both else None
    return out


def meets(t: Timing, slo: Mapping[str, float]) -> bool:
    """Whether one request met every latency SLO given (milliseconds): ``ttft_ms``, ``tpot_ms``, and
    ``itl_p50_ms`` / ``itl_p99_ms`` against the request's own gaps."""
    if "ttft_ms" in slo and t.ttft_s * 1e3 > slo["ttft_ms"]:
        return False
    if "tpot_ms" in slo and t.tpot_s is not None and t.tpot_s * 1e3 > slo["tpot_ms"]:
        return False
    gaps = np.asarray(t.gaps_s, dtype=float) * 1e3
    for key, q in (("itl_p50_ms", 0.50), ("itl_p99_ms", 0.99)):
        if key in slo and len(gaps) and float(_weighted_quantile(gaps, np.ones((1, len(gaps))), q)[0]) > slo[key]:
            return False
    return True


def goodput(timings: Sequence[Timing], slo: Mapping[str, float], seconds: float) -> dict[str, Any]:
    """DistServe's goodput: requests per second that met every SLO, over ``seconds`` of serving;
    and the share of requests that met them (SLO attainment)."""
    if not slo or not timings:
        return {}
    met = sum(meets(t, slo) for t in timings)
    return {"slo_attainment": round(met / len(timings), 4),
            "goodput_requests_per_second": round(met / seconds, 4) if seconds > 0 else None}


def clock_check(timings: Sequence[Timing]) -> dict[str, Any] | None:
    """The client's clock against the engine's own, request by request, where the engine reports one
    (llama.cpp's ``timings``): TTFT against ``prompt_ms`` (prompt processing to the first token; the
    client's adds the HTTP round trip and tokenizing), e2e − TTFT against ``predicted_ms`` (first
    token to last on both). Means in ms and the largest difference in each."""
    both = [t for t in timings if "prompt_ms" in t.engine and "predicted_ms" in t.engine]
    if not both:
        return None
    ttft = np.array([[t.ttft_s * 1e3, t.engine["prompt_ms"]] for t in both])
    decode = np.array([[(t.e2e_s - t.ttft_s) * 1e3, t.engine["predicted_ms"]] for t in both])
    return {"requests": len(both),
            "ttft_ms_client_mean": round(float(ttft[:, 0].mean()), 3),
            "prompt_ms_engine_mean": round(float(ttft[:, 1].mean()), 3),
            "ttft_ms_client_minus_engine_max": round(float((ttft[:, 0] - ttft[:, 1]).max()), 3),
            "decode_ms_client_mean": round(float(decode[:, 0].mean()), 3),
            "predicted_ms_engine_mean": round(float(decode[:, 1].mean()), 3),
            "decode_ms_client_minus_engine_max_abs": round(float(np.abs(decode[:, 0] - decode[:, 1]).max()), 3)}

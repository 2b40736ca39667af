"""The load curve's device constants, fitted to forward times measured under CUDA graphs.

:mod:`policies.loadcurve` prices a forward from its bytes, its FLOPs and a few constants. Four of
them describe the GPU and its kernels rather than an engine's host loop, and a forward replayed from
a CUDA graph (no scheduler, no sampler, no launch exposed) measures them:

- ``gemm_efficiency`` and ``knee_p``: where and how sharply GEMM time leaves weight streaming;
- ``layer_latency_s``: what each decoder layer adds to its bytes (its kernels' own latency);
- ``verify_layer_s``: what a layer adds once its sequences carry more than one new token each.

:func:`fit_device_constants` fits them to the log of the measured times, every point weighted alike,
with ``bw_efficiency`` held at the curve's value (a free fit of it on both shipped shapes lands within
1% of the shipped 0.8, so the data's low apparent bandwidth is per-layer latency, not slow streaming).
:func:`leave_one_shape_out` fits on every shape but one and predicts the verify ratios
t(B, k) / t(B, 1) of the shape left out. The shipped timings (``policies/data/h200_forward/``, cited
as "H200 forward timings, specpicker calibration data (2026-12-04)") are Llama-3-8B- and
Llama-3.2-1B-shaped decoders on one H200.

    >>> timings = shipped_timings()
    >>> [(t.name, t.shape.num_layers, len(t.points)) for t in timings]
    [('llama-3-8b', 32, 63), ('llama-3.2-1b', 16, 27)]
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from picker.errors import UserError
from policies.loadcurve import EngineCurve, forward
from policies.roofline import REFERENCE_SHAPES, HardwareLike, ModelShape

DATA_DIR = Path(__file__).parent / "data" / "h200_forward"
CITATION = "H200 forward timings, specpicker calibration data (2026-12-04)"
DEVICE_CONSTANTS = ("gemm_efficiency", "knee_p", "layer_latency_s", "verify_layer_s")
# Where the search starts and the range it keeps to (a latency of 0 is reachable as its lower end).
START = {"gemm_efficiency": 0.7, "knee_p": 3.0, "layer_latency_s": 3e-5, "verify_layer_s": 3e-6}
BOUNDS = {"gemm_efficiency": (0.05, 1.0), "knee_p": (0.8, 20.0), "layer_latency_s": (1e-8, 1e-3),
          "verify_layer_s": (1e-9, 1e-3)}
SIMPLEX_STEP = 0.3  # the first simplex's size in log space
RESTARTS, ITERATIONS, TOLERANCE = 3, 2000, 1e-9  # Nelder-Mead rounds, each restarted at the last best


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TimingsMeta(_Strict):
    """The first line of a timings file: what was timed, on what."""

    meta: Literal[True]
    shape: str
    layers_timed: int = Field(ge=1)
    head: bool
    params_timed: int = Field(ge=1)
    attention: str
    torch: str
    device: str


class TimingRow(_Strict):
    """One (batch, new tokens per sequence) point: medians and spread over the timed replays."""

    batch: int = Field(ge=1)
    k: int = Field(ge=1)
    context: int = Field(ge=0)
    ms_median: float = Field(gt=0)
    ms_min: float = Field(gt=0)
    ms_p90: float = Field(gt=0)
    graph: bool
    eager_ms_median: float | None = Field(default=None, gt=0)


@dataclass(frozen=True)
class ShapeTimings:
    """One model shape's graph-replayed forwards: ``points`` are (batch, k, context, seconds)."""

    name: str
    shape: ModelShape
    device: str
    points: tuple[tuple[int, int, int, float], ...]

    def seconds(self, batch: int, k: int, context: int) -> float | None:
        return next((s for b, kk, c, s in self.points if (b, kk, c) == (batch, k, context)), None)


def read_timings(path: str | os.PathLike[str]) -> ShapeTimings:
    """A timings file (JSON lines: the metadata, then one :class:`TimingRow` per line) as the
    shape that was timed (the published shape, with the parameter count actually timed) and its
    CUDA-graph points; a bad file is one :class:`UserError` naming it, the line and the field."""
    name = os.fspath(path)
    try:
        lines = [ln for ln in Path(name).read_text(encoding="utf-8").splitlines() if ln.strip()]
        meta = TimingsMeta.model_validate(json.loads(lines[0]))
        rows = []
        for i, ln in enumerate(lines[1:], start=2):
            try:
                rows.append(TimingRow.model_validate(json.loads(ln)))
            except (ValidationError, json.JSONDecodeError) as err:
                raise UserError(f"line {i}: {_first(err)}", file=name) from None
    except (OSError, IndexError) as err:
        raise UserError(f"cannot read timings: {err or 'empty file'}", file=name) from None
    except (ValidationError, json.JSONDecodeError) as err:
        raise UserError(f"line 1: {_first(err)}", file=name) from None
    ref = next((s for s in REFERENCE_SHAPES if s.name == meta.shape), None)
    if ref is None or ref.num_layers != meta.layers_timed:
        raise UserError(f"shape {meta.shape!r} with {meta.layers_timed} layers is not a known published shape",
                        file=name, field="shape")
    shape = dataclasses.replace(ref, params=float(meta.params_timed))
    points = tuple((r.batch, r.k, r.context, r.ms_median * 1e-3) for r in rows if r.graph)
    return ShapeTimings(meta.shape, shape, meta.device, points)


def _first(err: ValidationError | json.JSONDecodeError) -> str:
    if isinstance(err, json.JSONDecodeError):
        return f"not JSON: {err.msg}"
    e = err.errors()[0]
    return f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"


def shipped_timings(folder: Path = DATA_DIR) -> list[ShapeTimings]:
    """Every timings file in ``folder`` (the shipped H200 data by default), by shape name."""
    return sorted((read_timings(p) for p in folder.glob("*.jsonl")), key=lambda t: t.name)


def graph_replay(curve: EngineCurve) -> EngineCurve:
    """``curve`` as a forward replayed from a graph captured for its exact shape: no padding, no
    exposed launches, no host work (the timings measure the GPU alone)."""
    return dataclasses.replace(curve, name=f"{curve.name} (graph replay)", capture=(), launch_s_per_layer=0.0,
                               fixed_s=0.0, draft_fixed_s=0.0)


def predict(t: ShapeTimings, curve: EngineCurve, hw: HardwareLike, batch: int, k: int, context: int) -> float:
    """Seconds the curve gives one forward of ``batch`` sequences × ``k`` new tokens of shape ``t``."""
    return forward(t.shape, hw, batch * k, batch, context, graph_replay(curve)).seconds


def log_errors(timings: Sequence[ShapeTimings], curve: EngineCurve, hw: HardwareLike) -> list[float]:
    """log(predicted / measured) of every point of every shape."""
    return [math.log(predict(t, curve, hw, b, k, c) / s) for t in timings for b, k, c, s in t.points]


def fit_device_constants(
    timings: Sequence[ShapeTimings], hw: HardwareLike, base: EngineCurve,
    keys: Sequence[str] = DEVICE_CONSTANTS,
) -> dict[str, float]:
    """``keys`` of ``base`` that minimise the mean |log error| of every point's time.

    Nelder-Mead in log space from :data:`START`, clipped to :data:`BOUNDS`, restarted at its best
    point (the constants trade off along narrow valleys: the knee against the GEMM asymptote):
    deterministic, no starting guess from the caller, each evaluation a few hundred ``forward`` calls.
    """
    if not timings or not any(t.points for t in timings):
        raise ValueError("no timing points to fit")

    def loss(x: Mapping[str, float]) -> float:
        curve = dataclasses.replace(base, **x)
        return statistics.fmean(abs(e) for e in log_errors(timings, curve, hw))

    names = list(keys)
    lo = [math.log(BOUNDS[k][0]) for k in names]
    hi = [math.log(BOUNDS[k][1]) for k in names]

    def at(v: Sequence[float]) -> dict[str, float]:
        return {k: math.exp(min(h, max(low, x))) for k, x, low, h in zip(names, v, lo, hi)}

    best = [math.log(START[k]) for k in names]
    for _ in range(RESTARTS):
        best = _nelder_mead(lambda v: loss(at(v)), best)
    return at(best)


def _nelder_mead(f: Callable[[Sequence[float]], float], x0: Sequence[float]) -> list[float]:
    """The textbook simplex search (reflect 1, expand 2, contract 1/2, shrink 1/2) from ``x0``."""
    n = len(x0)
    simplex = [list(x0)] + [[x + (SIMPLEX_STEP if i == j else 0.0) for j, x in enumerate(x0)] for i in range(n)]
    values = [f(v) for v in simplex]
    for _ in range(ITERATIONS):
        order = sorted(range(n + 1), key=values.__getitem__)
        simplex, values = [simplex[i] for i in order], [values[i] for i in order]
        if values[-1] - values[0] < TOLERANCE:
            break
        centre = [sum(v[j] for v in simplex[:-1]) / n for j in range(n)]

        def toward(t: float) -> list[float]:  # called within this iteration only
            return [c + t * (w - c) for c, w in zip(centre, simplex[-1])]  # noqa: B023
        reflected = toward(-1.0)
        fr = f(reflected)
        if fr < values[0]:
            expanded = toward(-2.0)
            fe = f(expanded)
            simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflected, fr
        else:
            contracted = toward(0.5)
            fc = f(contracted)
            if fc < values[-1]:
                simplex[-1], values[-1] = contracted, fc
            else:
                simplex = [simplex[0]] + [[a + 0.5 * (b - a) for a, b in zip(simplex[0], v)] for v in simplex[1:]]
                values = [values[0]] + [f(v) for v in simplex[1:]]
    return simplex[min(range(n + 1), key=values.__getitem__)]


@dataclass(frozen=True)
class RatioError:
    """A verify ratio t(B, k) / t(B, 1): measured against predicted."""

    shape: str
    batch: int
    k: int
    measured: float
    predicted: float

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1.0


def verify_ratios(t: ShapeTimings, curve: EngineCurve, hw: HardwareLike) -> list[RatioError]:
    """Every k > 1 point of ``t`` as a ratio to the same batch's k = 1 point at the same context."""
    out = []
    for b, k, c, s in t.points:
        plain = t.seconds(b, 1, c)
        if k == 1 or plain is None:
            continue
        predicted = predict(t, curve, hw, b, k, c) / predict(t, curve, hw, b, 1, c)
        out.append(RatioError(t.name, b, k, s / plain, predicted))
    return out


def leave_one_shape_out(
    timings: Sequence[ShapeTimings], hw: HardwareLike, base: EngineCurve,
) -> dict[str, tuple[dict[str, float], list[RatioError]]]:
    """For each shape: the constants fitted on the other shapes, and its verify ratios under them."""
    out = {}
    for held in timings:
        rest = [t for t in timings if t is not held]
        fitted = fit_device_constants(rest, hw, base)
        out[held.name] = (fitted, verify_ratios(held, dataclasses.replace(base, **fitted), hw))
    return out


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values`` by linear interpolation (numpy's default rule)."""
    v = sorted(values)
    pos = q * (len(v) - 1)
    lo = math.floor(pos)
    return v[lo] + (v[min(lo + 1, len(v) - 1)] - v[lo]) * (pos - lo)

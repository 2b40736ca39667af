"""Calibrating the roofline's engine constants from measured forward times.

The roofline (:mod:`policies.roofline`) prices one forward as
``max(bytes / (BW · bw_efficiency), FLOPs / (P · flops_efficiency)) + fixed_s``, with efficiencies
that are assumptions until measured. ``specpick calibrate`` times forwards on a GPU at many
(batch, tokens per sequence, context length) points, :func:`fit_engine_constants` fits the
constants to them, and :func:`load_calibration` turns the file it writes into the ``calibration``
overrides that :func:`policies.roofline.resolve_engine` accepts. Nothing needs a calibration file:
without one the roofline keeps its assumed constants.

    >>> from types import SimpleNamespace
    >>> from policies.roofline import ModelShape, forward_time
    >>> hw = SimpleNamespace(memory_bandwidth_gbps=3350.0, bf16_tflops=989.0)
    >>> shape = ModelShape.from_params(8e9)
    >>> truth = {"bw_efficiency": 0.6, "flops_efficiency": 0.4, "fixed_s": 2e-4, "launch_s_per_layer": 0.0}
    >>> pts = [TimingPoint(batch=b, tokens_per_seq=k, context_len=1024,
    ...                    seconds=forward_time(shape, hw, b, k, 1024, "hf", calibration=truth).seconds)
    ...        for b in (1, 8, 64, 256) for k in (1, 4, 16)]
    >>> fit = fit_engine_constants(pts, shape, hw)
    >>> round(fit.constants["bw_efficiency"], 2), round(fit.constants["flops_efficiency"], 2)
    (0.6, 0.4)

Model fitted: the roofline's own formula with the launch term folded into ``fixed_s`` (launches
overlap the GPU, so on their own they are not separable from a fixed cost); the written constants
therefore set ``launch_s_per_layer`` to 0 so that the roofline reproduces the fitted curve (and,
applied to the load curve of the engine it was measured on, :func:`calibration_for` sets the curve's
per-layer latencies to 0: the fitted fixed time holds them for the model timed). An efficiency is
only written when enough points have their time set by its term, more than half of each (otherwise
the data say nothing about it, and the engine's assumed value stays). Eager PyTorch on a GPU is the
case in point: every forward of an 8B model takes ~16 ms of kernel launches whatever it computes, and
an efficiency fitted to the little that varies (0.059 of peak FLOP/s on an H200) means nothing; the
fit leaves it out and says why (``FitQuality.notes``).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from picker.errors import UserError
from policies.roofline import ENGINES, HardwareLike, ModelShape, forward_time

SCHEMA_VERSION = 1
# Efficiencies searched on a log grid: eager PyTorch on a small model can reach ~1% of peak.
EFFICIENCY_RANGE = (1e-3, 1.5)
GRID = 121  # points per axis per round
ROUNDS = 3  # each round zooms to 4 steps of the last grid: final step ~1e-4 in log efficiency
MIN_POINTS_PER_TERM = 2  # points a term must set before its efficiency counts as measured
DOMINANT = 0.5  # a term sets a point's time when it is more than this share of it


class _Strict(BaseModel):
    """Unknown fields are errors: a typo in a hand-edited file must not be ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class TimingPoint(_Strict):
    """One measured forward: ``batch`` sequences × ``tokens_per_seq`` new tokens at ``context_len``."""

    batch: int = Field(ge=1)
    tokens_per_seq: int = Field(ge=1)
    context_len: int = Field(ge=0)
    seconds: float = Field(gt=0.0)


class ShapeRecord(_Strict):
    """The :class:`ModelShape` the timings were taken on (needed to recompute bytes and FLOPs)."""

    params: float = Field(gt=0)
    num_layers: int = Field(ge=0)
    hidden_size: int = Field(ge=0)
    num_kv_heads: int = Field(ge=0)
    head_dim: int = Field(ge=0)
    vocab_size: int = Field(ge=0)
    bytes_per_param: float = Field(gt=0)
    kv_bytes_per_elem: float = Field(ge=0)
    name: str = "custom"

    def to_shape(self) -> ModelShape:
        return ModelShape(**self.model_dump())


class HardwareRecord(_Strict):
    """Peak numbers the efficiencies are relative to (a ``picker.inputs.hardware`` catalog entry)."""

    name: str
    memory_bandwidth_gbps: float = Field(gt=0)
    bf16_tflops: float = Field(gt=0)


class Constants(_Strict):
    """Fitted overrides; an efficiency is None when the data did not constrain it."""

    bw_efficiency: float | None = Field(default=None, gt=0, le=EFFICIENCY_RANGE[1])
    flops_efficiency: float | None = Field(default=None, gt=0, le=EFFICIENCY_RANGE[1])
    fixed_s: float = Field(ge=0)
    launch_s_per_layer: float = Field(default=0.0, ge=0)
    # The reference loop's own costs (``specpick calibrate --forward reference``), None when not measured.
    draft_fixed_s: float | None = Field(default=None, ge=0)
    lookup_s_per_seq: float | None = Field(default=None, ge=0)
    host_s_per_seq: float | None = Field(default=None, ge=0)
    spec_host_s_per_seq: float | None = Field(default=None, ge=0)
    draft_host_s_per_seq: float | None = Field(default=None, ge=0)
    layer_host_s_per_seq: float | None = Field(default=None, ge=0)
    heads_host_s_per_seq: float | None = Field(default=None, ge=0)
    sampling_host_s_per_seq: float | None = Field(default=None, ge=0)
    sampling_spec_host_s_per_seq: float | None = Field(default=None, ge=0)
    sampling_draft_host_s_per_seq: float | None = Field(default=None, ge=0)
    sampling_layer_host_s_per_seq: float | None = Field(default=None, ge=0)
    sampling_heads_host_s_per_seq: float | None = Field(default=None, ge=0)


class FitQuality(_Strict):
    """How well the fitted roofline matches the points, and how many points each term sets (more
    than half of the point's time; ``overhead_bound_points``: the fixed time does)."""

    points: int = Field(ge=1)
    median_rel_error: float = Field(ge=0)
    max_rel_error: float = Field(ge=0)
    memory_bound_points: int = Field(ge=0)
    compute_bound_points: int = Field(ge=0)
    overhead_bound_points: int = Field(default=0, ge=0)
    notes: list[str] = Field(default_factory=list)  # why an efficiency was not written


class CalibrationFile(_Strict):
    """What ``specpick calibrate`` writes: the constants plus everything needed to refit them."""

    schema_version: Literal[1] = SCHEMA_VERSION
    engine: str  # the roofline engine profile these override ("hf" for the torch backend)
    device: str  # what the timings ran on, e.g. "NVIDIA H200"
    method: str  # how they were taken
    created: str
    hardware: HardwareRecord
    model: ShapeRecord
    constants: Constants
    fit: FitQuality
    measurements: list[TimingPoint] = Field(min_length=1)

    def overrides(self) -> dict[str, float]:
        """The ``calibration`` mapping for :func:`policies.roofline.resolve_engine`."""
        return {k: float(v) for k, v in self.constants.model_dump().items() if v is not None}


@dataclass(frozen=True)
class Fit:
    """Result of :func:`fit_engine_constants`: constants (measured ones only) and fit quality."""

    constants: dict[str, float]
    quality: FitQuality


def _terms(points: Sequence[TimingPoint], shape: ModelShape, hw: HardwareLike) -> np.ndarray:
    """Rows (memory time at 100% bandwidth, compute time at 100% FLOPs, measured time) per point."""
    unit = {"bw_efficiency": 1.0, "flops_efficiency": 1.0, "fixed_s": 0.0, "launch_s_per_layer": 0.0}
    rows = []
    for p in points:
        cost = forward_time(shape, hw, p.batch, p.tokens_per_seq, p.context_len, "hf", calibration=unit)
        rows.append((cost.memory_seconds, cost.compute_seconds, p.seconds))
    return np.asarray(rows, dtype=float)


def _search(terms: np.ndarray, log_a: np.ndarray, log_b: np.ndarray) -> tuple[float, float, float, float]:
    """Best (error, a, b, fixed) over a grid of inverse efficiencies a = 1/bw_eff, b = 1/flops_eff.

    For each (a, b) the fixed time minimizing Σ((roof + fixed − t)/t)² has a closed form (a weighted
    mean of t − roof, clipped at 0), so only the two efficiencies are searched.
    """
    mem, comp, meas = terms[:, 0], terms[:, 1], terms[:, 2]
    a = np.exp(log_a)[:, None, None]
    b = np.exp(log_b)[None, :, None]
    roof = np.maximum(a * mem, b * comp)  # (A, B, points)
    w = 1.0 / meas**2
    fixed = np.clip(((meas - roof) * w).sum(-1) / w.sum(), 0.0, None)
    err = (((roof + fixed[..., None] - meas) / meas) ** 2).sum(-1)
    i, j = np.unravel_index(int(np.argmin(err)), err.shape)
    return float(err[i, j]), float(a[i, 0, 0]), float(b[0, j, 0]), float(fixed[i, j])


def _at_edge(efficiency: float) -> bool:
    lo, hi = EFFICIENCY_RANGE
    return efficiency <= lo * 1.01 or efficiency >= hi / 1.01


def fit_engine_constants(points: Sequence[TimingPoint], shape: ModelShape, hw: HardwareLike) -> Fit:
    """Fit bandwidth efficiency, FLOP efficiency and fixed per-forward time to measured forwards.

    Minimizes the summed squared *relative* error (a 50 µs miss matters at batch 1, not at 512)
    by a coarse-to-fine log grid over both efficiencies: the objective has flat directions (a term
    that bounds no point), which a grid handles without a starting guess, where a local optimizer
    would wander. Efficiencies whose term bounds fewer than ``MIN_POINTS_PER_TERM`` points are
    reported as unmeasured (left out of ``constants``).
    """
    if len(points) < 3:
        raise ValueError("need at least 3 timing points to fit 3 constants")
    terms = _terms(points, shape, hw)
    lo, hi = math.log(1.0 / EFFICIENCY_RANGE[1]), math.log(1.0 / EFFICIENCY_RANGE[0])
    grid_a = grid_b = np.linspace(lo, hi, GRID)
    for _ in range(ROUNDS):
        _, a, b, fixed = _search(terms, grid_a, grid_b)
        # Next round: two steps of this grid either side of the best point, inside the range.
        half = 2.0 * (grid_a[1] - grid_a[0])
        grid_a = np.linspace(max(lo, math.log(a) - half), min(hi, math.log(a) + half), GRID)
        half = 2.0 * (grid_b[1] - grid_b[0])
        grid_b = np.linspace(max(lo, math.log(b) - half), min(hi, math.log(b) + half), GRID)
    mem, comp, meas = terms[:, 0], terms[:, 1], terms[:, 2]
    # A term is measured by the points whose time it sets: the larger of the two, and more than half
    # of the point (where the fixed time is most of every point, an efficiency fits noise).
    larger = {"bw_efficiency": a * mem >= b * comp, "flops_efficiency": b * comp > a * mem}
    mem_bound = int(np.sum(larger["bw_efficiency"] & (a * mem > DOMINANT * meas)))
    comp_bound = int(np.sum(larger["flops_efficiency"] & (b * comp > DOMINANT * meas)))
    overhead = int(np.sum(fixed > DOMINANT * meas))
    rel = np.abs(np.maximum(a * mem, b * comp) + fixed - meas) / meas
    constants = {"fixed_s": fixed, "launch_s_per_layer": 0.0}
    notes = []
    # An efficiency is measured when its term sets enough points and the fit did not stop at the
    # edge of the searched range (then the data lie outside what the roofline can express).
    for name, bound, inverse in (("bw_efficiency", mem_bound, a), ("flops_efficiency", comp_bound, b)):
        if bound >= MIN_POINTS_PER_TERM and not _at_edge(1.0 / inverse):
            constants[name] = 1.0 / inverse
        elif int(np.sum(larger[name])) >= MIN_POINTS_PER_TERM and overhead > len(points) // 2:
            notes.append(f"{name} not fitted: {overhead} of {len(points)} points are mostly fixed time "
                         f"({fixed * 1e3:.3g} ms per forward: eager kernel launches, not bytes or FLOPs); "
                         "the fixed time describes this engine, and a CUDA-graph forward would measure the GPU")
    quality = FitQuality(points=len(points), median_rel_error=float(np.median(rel)),
                         max_rel_error=float(rel.max()), memory_bound_points=mem_bound,
                         compute_bound_points=comp_bound, overhead_bound_points=overhead, notes=notes)
    return Fit(constants=constants, quality=quality)


def read_calibration(path: str | os.PathLike[str]) -> CalibrationFile:
    """Parse and validate a calibration file; any problem is a :class:`UserError` naming the file."""
    name = os.fspath(path)
    try:
        with open(name, encoding="utf-8") as fh:
            raw = json.load(fh)
    except FileNotFoundError:
        raise UserError("calibration file not found", file=name) from None
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"cannot read calibration file: {err}", file=name) from None
    except json.JSONDecodeError as err:
        raise UserError(f"not valid JSON: {err.msg} (line {err.lineno})", file=name) from None
    if not isinstance(raw, dict):
        raise UserError("a calibration file is a JSON object", file=name)
    try:
        cal = CalibrationFile.model_validate(raw)
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or None
        raise UserError(first["msg"], file=name, field=field) from None
    if cal.engine not in ENGINES:
        raise UserError(f"unknown engine {cal.engine!r}; known: {', '.join(sorted(ENGINES))}",
                        file=name, field="engine")
    return cal


def load_calibration(path: str | os.PathLike[str], engine: str | None = None) -> dict[str, float]:
    """The ``calibration`` overrides in ``path``, for ``resolve_engine(engine, calibration)``.

    When ``engine`` is given it must be the engine the file was measured on: constants of the
    torch backend say nothing about a CUDA-graph engine.
    """
    cal = read_calibration(path)
    if engine is not None and engine != cal.engine:
        raise UserError(f"measured on engine {cal.engine!r}, not {engine!r}", file=os.fspath(path),
                        field="engine")
    return cal.overrides()


# Properties of the accelerator (how close its memory system and tensor cores get to their peaks),
# which a GPU run of eager PyTorch measures for any engine on that GPU; the fixed per-forward and
# launch times are the engine's own (CUDA graphs, scheduler, sampler), so they transfer only from
# a run of the same engine.
HARDWARE_CONSTANTS = ("bw_efficiency", "flops_efficiency")
# The load curve's per-layer latencies, which the roofline fit has no term for: its fixed time holds
# them for the model it timed, so on that engine they are 0 (the curve then reproduces the fit).
SAME_ENGINE_ZEROS = {"layer_latency_s": 0.0, "verify_layer_s": 0.0}


@dataclass(frozen=True)
class Calibration:
    """A calibration file as it applies to one engine on one accelerator (:func:`calibration_for`)."""

    path: str
    measured_engine: str
    device: str
    hardware: str
    overrides: dict[str, float]  # the constants that apply (roofline names; engine_curve maps them)
    label: str  # the provenance every overridden constant carries

    @property
    def note(self) -> str:
        """One sentence for a plan or an estimate: which constants came from the file, and why not the rest."""
        from policies.loadcurve import CALIBRATION_NAMES

        names = ", ".join(sorted(CALIBRATION_NAMES.get(k, k) for k in self.overrides)) or "nothing"
        return f"load curve calibrated from {self.path}: {names} ({self.label})"


def calibration_for(path: str | os.PathLike[str], engine: str, hardware: str | None = None) -> Calibration:
    """The part of the calibration file at ``path`` that applies to ``engine`` on ``hardware``.

    Measured on the same engine, every fitted constant applies. Measured on another engine (every
    file ``specpick calibrate`` writes is eager PyTorch, ``hf``), only the accelerator's
    efficiencies (:data:`HARDWARE_CONSTANTS`) do, and the label says so: the engine keeps its own
    fixed and launch costs. Another accelerator is refused (one ``UserError`` naming the file and
    field): an efficiency is a fraction of one GPU's peaks, and no rule moves it to another.
    """
    name = os.fspath(path)
    cal = read_calibration(name)
    if hardware is not None:
        from picker.inputs.hardware import resolve_hardware_name  # lazy: the policy imports stay light

        measured = resolve_hardware_name(cal.hardware.name) or cal.hardware.name
        wanted = resolve_hardware_name(hardware) or hardware
        if measured != wanted:
            raise UserError(f"calibrated on {measured} ({cal.device}), but the deployment runs {wanted}; "
                            "calibrate on the deployment's hardware", file=name, field="hardware.name")
    where = f"{cal.device}, {cal.created[:10]}"
    overrides = cal.overrides()
    if cal.engine == engine:
        label = f"calibrated: {name} (measured on {engine}, {where})"
        overrides.update(SAME_ENGINE_ZEROS)
    else:
        overrides = {k: v for k, v in overrides.items() if k in HARDWARE_CONSTANTS}
        label = (f"calibrated: {name} (measured on {cal.engine}, {where}; hardware efficiencies only, "
                 f"{engine}'s fixed and launch costs kept)")
    return Calibration(name, cal.engine, cal.device, cal.hardware.name, overrides, label)

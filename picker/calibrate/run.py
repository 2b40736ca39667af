"""One calibration run: time the grid, fit the engine constants, build the calibration file.

    >>> CalibrateOptions(batches=(1, 2), contexts=(64,)).grid
    [(1, 64), (2, 64)]
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import torch

from picker.calibrate.loop import LOOP_CHAIN, SAMPLED_T, reference_loop_constants
from picker.calibrate.options import CalibrateOptions
from picker.calibrate.timing import guess_hardware, load_model, measured_shape, time_hf, time_reference
from picker.engine.backend import resolve_device, resolve_dtype
from picker.errors import UserError
from picker.inputs.hardware import get_hardware
from policies.calibration import (
    CalibrationFile,
    Constants,
    HardwareRecord,
    ShapeRecord,
    TimingPoint,
    fit_engine_constants,
)

Say = Callable[[str], None]


def _quiet(line: str) -> None:
    """The default reporter: says nothing."""


def calibrate(opts: CalibrateOptions, say: Say = _quiet, advance: Callable[[], None] = lambda: None) -> CalibrationFile:
    """Time every grid point (``advance`` after each), fit, and, with ``forward="reference"``, time
    the loop's own costs; ``say`` gets one line per point and per loop measurement."""
    device = resolve_device(opts.device)
    if opts.forward != "reference" and (opts.draft or opts.eagle3 or opts.medusa):
        raise UserError("--draft, --eagle3 and --medusa time the reference loop: add --forward reference",
                        field="--forward")
    torch.set_num_threads(opts.threads)
    dtype = resolve_dtype(opts.dtype or ("bfloat16" if device.type == "cuda" else "float32"))
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    hw_name = opts.hardware or guess_hardware(device_name)
    if hw_name is None:
        raise UserError(f"cannot tell the catalog entry for {device_name!r}; pass --hardware", field="--hardware")
    hw = get_hardware(hw_name)
    model = load_model(opts.model, opts.shape, opts.device, dtype, opts.seed)
    shape = measured_shape(model, dtype, str(opts.model or opts.shape))
    timer = time_reference if opts.forward == "reference" else time_hf
    points: list[TimingPoint] = []
    for batch, context in opts.grid:
        try:
            got = timer(model, batch, context, opts.tokens, seed=opts.seed, warmup=opts.warmup, repeats=opts.repeats)
        except torch.OutOfMemoryError:
            say(f"skip batch {batch} at context {context}: out of memory")
            torch.cuda.empty_cache()
            got = []
        points += got
        say(" ".join(f"B={p.batch} L={p.context_len} k={p.tokens_per_seq}: {p.seconds * 1e3:.3f} ms" for p in got))
        advance()
    if len(points) < 3:
        raise UserError(f"{len(points)} timing point(s): the fit needs at least 3", field="--batches")
    fit = fit_engine_constants(points, shape, hw)
    for note in fit.quality.notes:
        say(f"note: {note}")
    loop_note = ""
    if opts.forward == "reference":  # the reference loop's own costs beside its forward
        fit.constants.update(reference_loop_constants(model, opts, fit.constants, hw, dtype, say))
        loop_note = _loop_note(opts)
    return CalibrationFile(
        engine="hf", device=device_name,
        method=(("reference engine (TorchBackend.run, batched verify forward)" if opts.forward == "reference"
                 else "HF forward + DynamicCache") + f", {dtype}, on {device}, median of {opts.repeats} after "
                f"{opts.warmup} warm-up" + loop_note),
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        hardware=HardwareRecord(name=hw.name, memory_bandwidth_gbps=hw.memory_bandwidth_gbps,
                                bf16_tflops=hw.bf16_tflops),
        model=ShapeRecord(**{f: getattr(shape, f) for f in ShapeRecord.model_fields}),
        constants=Constants(**fit.constants), fit=fit.quality, measurements=points)


def _loop_note(opts: CalibrateOptions) -> str:
    """What the loop's constants were timed with, for the file's ``method``."""
    return (f"; host_s_per_seq and spec_host_s_per_seq from serve(), plain and with a {LOOP_CHAIN}-token fixed "
            f"chain, at T=0 and (the sampling_* terms) T={SAMPLED_T:g}; lookup_s_per_seq from the ngram drafter"
            + (", draft_fixed_s from the draft's 1-token forwards, draft_host_s_per_seq from serve() with the vanilla "
               "drafter (its draft phase less its draft forwards)" if opts.draft else "")
            + (", layer_host_s_per_seq from serve() with the EAGLE-3 drafter (less its head's steps, fusion "
               "and logits)" if opts.eagle3 else "")
            + (", heads_host_s_per_seq from serve() with the Medusa drafter (less its heads' pass)"
               if opts.medusa else ""))

#!/usr/bin/env python
"""Measure verify-forward time on a GPU and fit the roofline's engine constants to it.

    python scripts/gpu_calibrate.py --out calibration.json                 # CUDA, llama-3.2-1b shape
    python scripts/gpu_calibrate.py --model /path/to/hf-model --hardware h100-sxm --out cal.json
    python scripts/gpu_calibrate.py --device cpu --shape llama-68m --batches 1,2 --tokens 1,4 \\
        --contexts 64 --repeats 1 --hardware cpu --out /tmp/cal.json   # a dry run

For every (batch B, tokens per sequence k, context length L) it prefills B random sequences of L
tokens, then times one forward of B × k new tokens against that KV cache (what verifying k - 1
drafts plus the pending token costs), rewinding the cache after each. The median of ``--repeats``
timed forwards (after ``--warmup``) is one point. :func:`policies.calibration.fit_engine_constants`
then fits bandwidth efficiency, FLOP efficiency and the fixed per-forward time, and the JSON written
to ``--out`` is read by :func:`policies.calibration.load_calibration` into the ``calibration``
overrides of :func:`policies.roofline.resolve_engine` for engine ``hf`` (eager PyTorch, what the
torch backend runs). Nothing requires this file; without it the roofline keeps its assumptions.

Timing uses plain Hugging Face forwards with a ``DynamicCache`` by default; ``--forward reference``
times the reference engine's own batched verify forward instead (``picker.engine.backend.TorchBackend.run``:
its slab cache, per-row plans and masks), the curve to calibrate when predicting the reference engine. With ``--shape`` the model is a Llama of that published shape with random
weights (timing does not depend on weight values), so no checkpoint is needed.
"""

from __future__ import annotations

import argparse
import inspect
import json
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, DynamicCache, LlamaConfig, LlamaForCausalLM, PreTrainedModel

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without install

from picker.inputs.hardware import get_hardware, resolve_hardware_name  # noqa: E402
from policies.calibration import (  # noqa: E402
    CalibrationFile,
    Constants,
    HardwareRecord,
    ShapeRecord,
    TimingPoint,
    fit_engine_constants,
)
from policies.roofline import REFERENCE_SHAPES, ModelShape  # noqa: E402

DTYPE_BYTES = {torch.float32: 4.0, torch.bfloat16: 2.0, torch.float16: 2.0}


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = p.add_mutually_exclusive_group()
    src.add_argument("--model", type=Path, help="local Hugging Face causal-LM folder")
    src.add_argument("--shape", default="llama-3.2-1b",
                     help=f"random-weight Llama of a published shape: {', '.join(s.name for s in REFERENCE_SHAPES)}")
    p.add_argument("--device", default="cuda", help="cuda (the point of this script) or cpu (a dry run)")
    p.add_argument("--dtype", default=None, help="bfloat16 (default on cuda) or float32 (default on cpu)")
    p.add_argument("--hardware", default=None, help="picker.inputs.hardware catalog name; guessed from the GPU name")
    p.add_argument("--batches", type=_ints, default=_ints("1,2,4,8,16,32,64,128"))
    p.add_argument("--tokens", type=_ints, default=_ints("1,2,4,8,16"), help="new tokens per sequence")
    p.add_argument("--contexts", type=_ints, default=_ints("512,2048"), help="KV cache lengths")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1,
                   help="CPU threads for torch (a dry run on a busy 2-core machine is fastest with 1)")
    p.add_argument("--forward", choices=("hf", "reference"), default="hf",
                   help="time plain HF forwards with a DynamicCache, or the reference engine's own batched "
                        "verify forward (picker.engine.backend.TorchBackend.run over B rows of k tokens)")
    p.add_argument("--out", type=Path, required=True)
    return p.parse_args(argv)


def llama_of_shape(shape: ModelShape) -> LlamaConfig:
    """A LlamaConfig with the shape's layers, width, GQA and vocabulary; the MLP width is solved so
    that the parameter count matches (attention: q, o = h² each, k, v = h·kv·hd each; MLP: 3·h·I)."""
    h, kv, hd = shape.hidden_size, shape.num_kv_heads, shape.head_dim
    attention = 2 * h * h + 2 * h * kv * hd
    intermediate = max(hd, round((shape.params_per_layer - attention) / (3 * h)))
    return LlamaConfig(vocab_size=shape.vocab_size, hidden_size=h, intermediate_size=intermediate,
                       num_hidden_layers=shape.num_layers, num_attention_heads=h // hd,
                       num_key_value_heads=kv, head_dim=hd, max_position_embeddings=131072,
                       tie_word_embeddings=False)


def load_model(args: argparse.Namespace, dtype: torch.dtype) -> PreTrainedModel:
    if args.model is not None:
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype)
    else:
        shapes = {s.name: s for s in REFERENCE_SHAPES}
        if args.shape not in shapes:
            raise SystemExit(f"unknown --shape {args.shape!r}; choose one of {', '.join(shapes)}")
        torch.manual_seed(args.seed)
        model = LlamaForCausalLM(llama_of_shape(shapes[args.shape])).to(dtype)
    return model.to(args.device).eval()


def measured_shape(model: PreTrainedModel, dtype: torch.dtype, name: str) -> ModelShape:
    """The roofline shape of the model actually timed (counted, not looked up)."""
    cfg = model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return ModelShape(params=float(sum(p.numel() for p in model.parameters())), num_layers=cfg.num_hidden_layers,
                      hidden_size=cfg.hidden_size, num_kv_heads=cfg.num_key_value_heads, head_dim=head_dim,
                      vocab_size=cfg.vocab_size, bytes_per_param=DTYPE_BYTES[dtype],
                      kv_bytes_per_elem=DTYPE_BYTES[dtype], name=name)


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _rewind(cache: Any, length: int, removed: int) -> None:
    """Drop the last ``removed`` cache slots. transformers 5.x ``crop`` takes a negative count,
    4.x an absolute length: try the first, check, fall back to the second, check again."""
    cache.crop(-removed)
    if cache.get_seq_length() != length:
        cache.crop(length)
    if cache.get_seq_length() != length:
        raise RuntimeError(f"could not rewind the KV cache to {length} tokens")


@torch.no_grad()
def time_point(model: PreTrainedModel, args: argparse.Namespace, batch: int, context: int,
               tokens: list[int]) -> list[TimingPoint]:
    """Prefill ``batch`` × ``context`` once, then time each k in ``tokens`` against that cache."""
    vocab, dev = model.config.vocab_size, args.device
    gen = torch.Generator().manual_seed(args.seed + batch * 7919 + context)
    prefill = torch.randint(vocab, (batch, context), generator=gen).to(dev)
    cache = DynamicCache(config=model.config)
    # transformers 5.x renamed the forward's cache argument (past_key_values -> cache).
    key = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    model(input_ids=prefill, use_cache=True, **{key: cache})
    points = []
    for k in tokens:
        new = torch.randint(vocab, (batch, k), generator=gen).to(dev)
        times = []
        for i in range(args.warmup + args.repeats):
            _sync(dev)
            start = time.perf_counter()
            model(input_ids=new, use_cache=True, **{key: cache})
            _sync(dev)
            if i >= args.warmup:
                times.append(time.perf_counter() - start)
            _rewind(cache, context, k)
        points.append(TimingPoint(batch=batch, tokens_per_seq=k, context_len=context,
                                  seconds=statistics.median(times)))
    del cache
    if dev.startswith("cuda"):
        torch.cuda.empty_cache()
    return points


@torch.no_grad()
def time_point_reference(model: PreTrainedModel, args: argparse.Namespace, batch: int, context: int,
                         tokens: list[int]) -> list[TimingPoint]:
    """The reference engine's verify forward: ``batch`` rows of ``context`` cached tokens, each fed
    one pending token plus a chain of k - 1 drafts, as the decode loop plans it (the slab cache is
    written at the same slots again every repetition, so nothing needs rewinding)."""
    from picker.engine.backend import TorchBackend
    from picker.engine.rollback import BatchForward, plan_forward
    from picker.engine.tree import TokenTree

    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(args.seed + batch * 7919 + context)
    backend = TorchBackend(model, rows=batch)
    rows = tuple(range(batch))

    def plans(start: int, width: int) -> BatchForward:
        ids = torch.randint(vocab, (batch, width), generator=gen).tolist()
        return BatchForward(rows, tuple(plan_forward(start, r[:1] if start else r, TokenTree.from_chain(
            r[1:] if start else ())) for r in ids))

    backend.run(plans(0, context))  # the prefill
    points = []
    for k in tokens:
        batch_forward, times = plans(context, k), []
        for i in range(args.warmup + args.repeats):
            _sync(args.device)
            start = time.perf_counter()
            backend.run(batch_forward)
            _sync(args.device)
            if i >= args.warmup:
                times.append(time.perf_counter() - start)
        points.append(TimingPoint(batch=batch, tokens_per_seq=k, context_len=context,
                                  seconds=statistics.median(times)))
    return points


def guess_hardware(device_name: str) -> str | None:
    """Catalog key for a CUDA device name ("NVIDIA H100 80GB HBM3" -> h100-sxm): drop the vendor
    words, then try ever shorter prefixes of what is left against the catalog and its aliases."""
    words = device_name.lower().replace("_", " ").split()
    words = [w for w in words if w not in ("nvidia", "geforce", "tesla")]
    for end in range(len(words), 0, -1):
        key = resolve_hardware_name("-".join(words[:end]))
        if key is not None:
            return key
    return None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("no CUDA device here; use --device cpu for a dry run")
    torch.set_num_threads(args.threads)
    dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[
        args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32")]
    device_name = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "cpu"
    hw_name = args.hardware or guess_hardware(device_name)
    if hw_name is None:
        raise SystemExit(f"cannot tell the catalog entry for {device_name!r}; pass --hardware")
    hw = get_hardware(hw_name)
    model = load_model(args, dtype)
    shape = measured_shape(model, dtype, str(args.model or args.shape))
    points: list[TimingPoint] = []
    for context in args.contexts:
        for batch in args.batches:
            try:
                timer = time_point_reference if args.forward == "reference" else time_point
                points += timer(model, args, batch, context, args.tokens)
            except torch.OutOfMemoryError:
                print(f"skip batch {batch} at context {context}: out of memory", file=sys.stderr)
                torch.cuda.empty_cache()
                continue
            last = points[-1]
            print(f"B={batch:4d} L={context:6d} k={last.tokens_per_seq:3d}: {last.seconds * 1e3:8.3f} ms",
                  file=sys.stderr)
    fit = fit_engine_constants(points, shape, hw)
    cal = CalibrationFile(
        engine="hf", device=device_name,
        method=(("reference engine (TorchBackend.run, batched verify forward)" if args.forward == "reference"
                 else "HF forward + DynamicCache") + f", {dtype}, median of {args.repeats} after {args.warmup} warm-up"),
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        hardware=HardwareRecord(name=hw.name, memory_bandwidth_gbps=hw.memory_bandwidth_gbps,
                                bf16_tflops=hw.bf16_tflops),
        model=ShapeRecord(**{f: getattr(shape, f) for f in ShapeRecord.model_fields}),
        constants=Constants(**fit.constants), fit=fit.quality, measurements=points)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(cal.model_dump(), indent=2) + "\n")
    print(json.dumps({"constants": fit.constants, "fit": fit.quality.model_dump()}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Timing one forward of B sequences × k new tokens against a cache of L tokens, on CPU or CUDA.

Two forwards are timed: transformers' own (a ``DynamicCache``, rewound after each timing) and the
reference engine's batched verify forward (``picker.engine.backend.TorchBackend.run``: its slab
cache, per-row plans and masks). On CUDA each timing is fenced by ``torch.cuda.synchronize``: the
kernels run asynchronously, and a timer around their launch measures the host alone.

    >>> llama_of_shape(next(s for s in REFERENCE_SHAPES if s.name == "llama-68m")).num_hidden_layers
    2
"""

from __future__ import annotations

import functools
import inspect
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, DynamicCache, LlamaConfig, LlamaForCausalLM, PreTrainedModel

from picker.engine.backend import TorchBackend, resolve_device
from picker.errors import UserError
from picker.inputs.hardware import resolve_hardware_name
from policies.calibration import TimingPoint
from policies.roofline import REFERENCE_SHAPES, ModelShape

DTYPE_BYTES = {torch.float32: 4.0, torch.bfloat16: 2.0, torch.float16: 2.0}


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


def load_model(model: Path | None, shape: str, device: str, dtype: torch.dtype, seed: int) -> PreTrainedModel:
    """A local Hugging Face folder, or (``model`` None) a random-weight Llama of a published shape
    (timing does not depend on the weights), on ``device``."""
    where = resolve_device(device)
    if model is not None:
        loaded = AutoModelForCausalLM.from_pretrained(model, dtype=dtype, local_files_only=True)
    else:
        shapes = {s.name: s for s in REFERENCE_SHAPES}
        if shape not in shapes:
            raise UserError(f"unknown shape {shape!r}; choose one of {', '.join(shapes)}", field="--shape")
        torch.manual_seed(seed)
        loaded = LlamaForCausalLM(llama_of_shape(shapes[shape])).to(dtype)
    return loaded.to(where).eval()


def measured_shape(model: PreTrainedModel, dtype: torch.dtype, name: str) -> ModelShape:
    """The roofline shape of the model actually timed (counted, not looked up)."""
    cfg = model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return ModelShape(params=float(sum(p.numel() for p in model.parameters())), num_layers=cfg.num_hidden_layers,
                      hidden_size=cfg.hidden_size, num_kv_heads=cfg.num_key_value_heads, head_dim=head_dim,
                      vocab_size=cfg.vocab_size, bytes_per_param=DTYPE_BYTES[dtype],
                      kv_bytes_per_elem=DTYPE_BYTES[dtype], name=name)


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


def sync(device: torch.device | str) -> None:
    """Wait for the device's queued kernels (CUDA runs them asynchronously; a CPU needs nothing)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def _rewind(cache: Any, length: int, removed: int) -> None:
    """Drop the last ``removed`` cache slots. transformers 5.x ``crop`` takes a negative count,
    4.x an absolute length: try the first, check, fall back to the second, check again."""
    cache.crop(-removed)
    if cache.get_seq_length() != length:
        cache.crop(length)
    if cache.get_seq_length() != length:
        raise RuntimeError(f"could not rewind the KV cache to {length} tokens")


def _median_seconds(run: Any, device: torch.device, warmup: int, repeats: int, after: Any = None) -> float:
    """Median wall time of ``run()`` over ``repeats`` after ``warmup``, each fenced by a device sync."""
    times = []
    for i in range(warmup + repeats):
        sync(device)
        start = time.perf_counter()
        run()
        sync(device)
        if i >= warmup:
            times.append(time.perf_counter() - start)
        if after is not None:
            after()
    return statistics.median(times)


@torch.no_grad()
def time_hf(model: PreTrainedModel, batch: int, context: int, tokens: Sequence[int], *, seed: int,
            warmup: int, repeats: int) -> list[TimingPoint]:
    """transformers' forward: prefill ``batch`` × ``context`` once, then time each k in ``tokens``
    against that cache, rewinding it after every timing."""
    vocab, dev = model.config.vocab_size, model.device
    gen = torch.Generator().manual_seed(seed + batch * 7919 + context)
    cache = DynamicCache(config=model.config)
    # transformers 5.x renamed the forward's cache argument (past_key_values -> cache).
    key = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    model(input_ids=torch.randint(vocab, (batch, context), generator=gen).to(dev), use_cache=True, **{key: cache})
    points = []
    for k in tokens:
        new = torch.randint(vocab, (batch, k), generator=gen).to(dev)
        # partial binds this k's tensors now (a closure would read the loop's later values).
        seconds = _median_seconds(functools.partial(model, input_ids=new, use_cache=True, **{key: cache}), dev,
                                  warmup, repeats, after=functools.partial(_rewind, cache, context, k))
        points.append(TimingPoint(batch=batch, tokens_per_seq=k, context_len=context, seconds=seconds))
    del cache
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return points


@torch.no_grad()
def time_reference(model: PreTrainedModel, batch: int, context: int, tokens: Sequence[int], *, seed: int,
                   warmup: int, repeats: int) -> list[TimingPoint]:
    """The reference engine's verify forward: ``batch`` rows of ``context`` cached tokens, each fed
    one pending token plus a chain of k - 1 drafts, as the decode loop plans it (the slab cache is
    written at the same slots again every repetition, so nothing needs rewinding)."""
    from picker.engine.rollback import BatchForward, plan_forward
    from picker.engine.tree import TokenTree

    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(seed + batch * 7919 + context)
    backend = TorchBackend(model, rows=batch)
    rows = tuple(range(batch))

    def plans(start: int, width: int) -> BatchForward:
        ids = torch.randint(vocab, (batch, width), generator=gen).tolist()
        return BatchForward(rows, tuple(plan_forward(start, r[:1] if start else r, TokenTree.from_chain(
            r[1:] if start else ())) for r in ids))

    backend.run(plans(0, context))  # the prefill
    points = []
    for k in tokens:
        planned = plans(context, k)
        seconds = _median_seconds(lambda: backend.run(planned), backend.device, warmup, repeats)  # noqa: B023
        points.append(TimingPoint(batch=batch, tokens_per_seq=k, context_len=context, seconds=seconds))
    return points

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
from collections.abc import Callable
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
from policies.costmodel import CATCH_UP_FORWARDS  # noqa: E402
from policies.roofline import REFERENCE_SHAPES, ModelShape  # noqa: E402

DTYPE_BYTES = {torch.float32: 4.0, torch.bfloat16: 2.0, torch.float16: 2.0}
LOOP_CHAIN = 4  # drafts per step of the fixed chain that times the speculative path's host work (N = 4, typical)
SAMPLED_T = 1.0  # the temperature at which the loop's host terms are timed again (sampling's own cost)


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
    p.add_argument("--draft", type=Path, default=None,
                   help="with --forward reference: a draft model folder whose forwards set draft_fixed_s")
    p.add_argument("--eagle3", type=Path, default=None,
                   help="with --forward reference: an EAGLE-3 head folder whose drafter sets layer_host_s_per_seq")
    p.add_argument("--medusa", type=Path, default=None,
                   help="with --forward reference: a Medusa heads folder whose drafter sets heads_host_s_per_seq")
    p.add_argument("--loop-tokens", type=int, default=16,
                   help="with --forward reference: new tokens per sequence of the serve() runs that time the "
                        "speculative path's host work (spec_host_s_per_seq)")
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


class FixedChainDrafter:
    """Proposes ``k`` copies of one token at every step: the speculative path at its full width
    (verification of k nodes, rollback of the rejected ones) with no drafting cost of its own."""

    def __init__(self, k: int, token: int = 0) -> None:
        self.k, self.token = k, token

    def fork(self) -> FixedChainDrafter:
        return FixedChainDrafter(self.k, self.token)

    def propose(self, ctx: Any) -> Any:
        from picker.engine.drafting import Draft
        from picker.engine.tree import TokenTree

        return Draft(TokenTree.from_chain([self.token] * min(self.k, ctx.max_draft)), p=None)


@torch.no_grad()
def host_seconds(model: PreTrainedModel, args: argparse.Namespace, batch: int, context: int,
                 k: int, temperature: float = 0.0) -> tuple[float, float]:
    """(plain, extra) host seconds per step of the reference loop: ``serve()`` itself, plain and
    with a k-token fixed chain, each step's wall time less the target's forward time
    (``TorchBackend.forward_seconds``); ``extra`` is what the speculative step spends beyond the
    plain one (medians of ``--repeats`` runs of ``--loop-tokens`` steps each), at ``temperature``."""
    from picker.engine.backend import TorchBackend
    from picker.engine.drafting import SamplingParams, bind
    from picker.engine.loop import serve

    gen = torch.Generator().manual_seed(args.seed + batch * 104729 + context)
    prompts = torch.randint(model.config.vocab_size, (batch, context), generator=gen).tolist()
    backend = TorchBackend(model, rows=batch)

    def host_per_step(speculator: Any) -> float:
        runs = []
        for i in range(args.warmup + args.repeats):
            out = serve(backend, prompts, speculator, concurrency=batch, max_new_tokens=args.loop_tokens,
                        max_draft=k, sampling=SamplingParams(temperature=temperature))
            if i >= args.warmup:  # the prefill step is a forward like any other: it cancels in the difference
                runs.append((out.seconds - out.forward_seconds) / out.steps)
        return statistics.median(runs)

    plain = host_per_step(None)
    return plain, max(host_per_step(bind(FixedChainDrafter(k))) - plain, 0.0)


def lookup_seconds(args: argparse.Namespace, context: int, vocab: int, n: int = 4) -> float:
    """Seconds of one prompt-lookup step on one sequence (the ngram plugin's own drafter, built
    from its declared options): index the new token, look the suffix up, build an n-token chain.
    The context repeats a 16-token block, so every lookup finds a match (the full cost)."""
    from picker.engine.drafting import DraftContext, SamplingParams
    from picker.engine.plugins import load_strategies
    from picker.engine.runtime import build_drafter

    plugin = load_strategies()["ngram"]
    options, max_draft = plugin.draft_options.chain(n)
    drafter = build_drafter(plugin, None, {}, options)
    gen = torch.Generator().manual_seed(args.seed + context)
    block = torch.randint(vocab, (16,), generator=gen).tolist()
    seq = (block * (context // 16 + 1))[:context]
    drafter.reset(list(seq))
    steps = 200
    start = time.perf_counter()
    for _ in range(steps):
        seq.append(block[len(seq) % 16])  # the emitted token, then the next lookup
        drafter.propose(DraftContext(seq, context, SamplingParams(), None, max_draft, None))
    return (time.perf_counter() - start) / steps


def draft_fixed_seconds(draft: PreTrainedModel, args: argparse.Namespace, fitted: dict[str, float],
                        hw: Any, dtype: torch.dtype) -> float:
    """The draft model's fixed seconds per forward: its 1-token forwards on the reference backend,
    less what the load curve, with the target's fitted constants, charges for its bytes and FLOPs."""
    from policies.loadcurve import engine_curve, forward

    shape = measured_shape(draft, dtype, str(args.draft))
    curve = engine_curve("hf", {**fitted, "draft_fixed_s": 0.0}, label="fitted here")
    points = [p for context in args.contexts for batch in args.batches
              for p in time_point_reference(draft, args, batch, context, [1])]
    residual = [p.seconds - forward(shape, hw, p.batch, p.batch, p.context_len, curve, role="draft").seconds
                for p in points]
    return max(statistics.median(residual), 0.0)


def _time_calls(obj: Any, attr: str, acc: dict[str, float], rows: Callable[[tuple], int] | None) -> None:
    """Wrap ``obj.attr`` so that its wall time (and, with ``rows``, the rows it carried) add to ``acc``."""
    call = getattr(obj, attr)

    def timed(*a: Any, **kw: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return call(*a, **kw)
        finally:
            acc["seconds"] += time.perf_counter() - t0
            acc["rows"] += rows(a) if rows is not None else 0

    object.__setattr__(obj, attr, timed)  # on the instance, frozen dataclasses included


# What each drafter's forward is (priced by the curve as a forward, so not host work), and the rows
# it counts: a draft model's backend runs, an EAGLE-3 head's steps (its logits and fusion beside),
# Medusa's one pass of heads per step. Rows: sequence-forwards, or sequence-steps for the heads.
Timed = list[tuple[Any, str, Callable[[tuple], int] | None]]
Built = tuple[Any, Any, int, Timed]  # (drafter, its plugin's capabilities or None, max_draft, timed calls)


def drafter_host_seconds(model: PreTrainedModel, build: Callable[[Any], Built], args: argparse.Namespace,
                         batch: int, context: int, temperature: float = 0.0) -> tuple[float, int]:
    """(host seconds, rows) of a drafter's draft phases in ``serve()``: its draft phase less the wall
    time of the calls the curve prices as its forward (``build(target)``: the drafter, its
    capabilities, which declare the hidden states it reads, its max_draft and the calls to time),
    and the rows those calls carried. What is left is the drafter's own work per sequence: choosing
    or drawing each draft token, planning its row, building its tree."""
    from picker.engine.backend import TorchBackend
    from picker.engine.drafting import SamplingParams, bind
    from picker.engine.loop import serve

    gen = torch.Generator().manual_seed(args.seed + batch * 15485863 + context)
    prompts = torch.randint(model.config.vocab_size, (batch, context), generator=gen).tolist()
    target = TorchBackend(model, rows=batch)
    runs = []
    for i in range(args.warmup + args.repeats):
        acc = {"seconds": 0.0, "rows": 0}
        drafter, caps, max_draft, timed = build(target)
        for obj, attr, rows in timed:
            _time_calls(obj, attr, acc, rows)
        out = serve(target, prompts, bind(drafter, caps), concurrency=batch, max_new_tokens=args.loop_tokens,
                    max_draft=max_draft, sampling=SamplingParams(temperature=temperature))
        if i >= args.warmup:
            runs.append((max(out.draft_seconds - acc["seconds"], 0.0), acc["rows"]))
    return statistics.median(h for h, _ in runs), int(statistics.median(r for _, r in runs))


def drafter_builders(args: argparse.Namespace, draft: PreTrainedModel | None, k: int
                     ) -> dict[str, Callable[[Any], Built]]:
    """{host constant: builder} for the drafters given: --draft (vanilla), --eagle3, --medusa."""
    from picker.engine.backend import TorchBackend
    from picker.engine.plugins import load_strategies
    from picker.engine.runtime import build_drafter

    def vanilla(target: Any) -> Built:
        from strategies.vanilla.drafter import make_drafter

        backend = TorchBackend(draft, rows=1)  # the drafter lends itself a row per sequence
        drafter = make_drafter(target_backend=target, draft_backend=backend, num_draft_tokens=k)
        return drafter, None, k, [(backend, "run", lambda a: len(a[0].rows))]

    plugins = load_strategies()  # once: each builder runs for every repeat of every grid point

    def plugin_drafter(name: str, artifact: Path, target: Any) -> tuple[Any, Any, int]:
        plugin = plugins[name]
        options, max_draft = plugin.draft_options.chain(k)  # k deep, as the profiler builds it
        drafter = build_drafter(plugin, target, {plugin.capabilities.artifact: artifact}, options)
        return drafter, plugin.capabilities, max_draft

    def eagle3(target: Any) -> Built:
        d, caps, max_draft = plugin_drafter("eagle3", args.eagle3, target)
        # Its catch-up fuses each sequence's new states once per step; the curve charges the term per
        # sequence-step k + CATCH_UP_FORWARDS times (the forwards it prices), so rows count that.
        per_step = k + CATCH_UP_FORWARDS
        return d, caps, max_draft, [(d.head, "step", None), (d.head, "fuse", lambda a: per_step * int(a[0].shape[0])),
                                    (d.target, "logits", None)]

    def medusa(target: Any) -> Built:
        d, caps, max_draft = plugin_drafter("medusa", args.medusa, target)
        return d, caps, max_draft, [(d.heads, "logits", lambda a: int(a[0].shape[0]))]

    out: dict[str, Callable[[Any], Built]] = {}
    if draft is not None:
        out["draft_host_s_per_seq"] = vanilla
    if args.eagle3 is not None:
        out["layer_host_s_per_seq"] = eagle3
    if args.medusa is not None:
        out["heads_host_s_per_seq"] = medusa
    return out


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


def reference_loop_constants(model: PreTrainedModel, args: argparse.Namespace, fitted: dict[str, float],
                             hw: Any, dtype: torch.dtype) -> dict[str, float]:
    """host_s_per_seq and spec_host_s_per_seq (host seconds over sequences, the whole grid), lookup_s_per_seq (median
    over contexts), with ``--draft`` draft_fixed_s (median over the grid) and draft_host_s_per_seq (host seconds over
    sequence-forwards); each host term again at temperature SAMPLED_T, where it differs by what sampling adds
    (the ``sampling_*`` constants: the warp, rejection test and draws of every sequence)."""
    grid = [(b, c) for c in args.contexts for b in args.batches]
    draft = None
    if args.draft is not None:
        draft = AutoModelForCausalLM.from_pretrained(args.draft, dtype=dtype).to(args.device).eval()
    # Σ host time / Σ sequences: per step it is partly fixed (the forward's fixed_s holds the fixed
    # part of a plain step), and the large batches are where it counts.
    seqs = sum(b for b, _ in grid)
    builders = drafter_builders(args, draft, LOOP_CHAIN)
    terms: dict[float, dict[str, float]] = {}
    for temperature in (0.0, SAMPLED_T):
        host = [host_seconds(model, args, b, c, LOOP_CHAIN, temperature) for b, c in grid]
        terms[temperature] = {"host_s_per_seq": sum(p for p, _ in host) / seqs,
                              "spec_host_s_per_seq": sum(e for _, e in host) / seqs}
        print(f"T={temperature:g} host per step, plain / speculative extra (us): " + ", ".join(
            f"B={b} L={c}: {p * 1e6:.0f} / {e * 1e6:.0f}" for (b, c), (p, e) in zip(grid, host)), file=sys.stderr)
        for name, build in builders.items():
            drafting = [drafter_host_seconds(model, build, args, b, c, temperature) for b, c in grid]
            terms[temperature][name] = sum(h for h, _ in drafting) / max(sum(r for _, r in drafting), 1)
            print(f"T={temperature:g} {name} per row (us): " + ", ".join(
                f"B={b} L={c}: {h / max(r, 1) * 1e6:.0f}" for (b, c), (h, r) in zip(grid, drafting)), file=sys.stderr)
    out = dict(terms[0.0])
    out.update({f"sampling_{k}": max(v - terms[0.0][k], 0.0) for k, v in terms[SAMPLED_T].items()})
    out["lookup_s_per_seq"] = statistics.median(lookup_seconds(args, c, model.config.vocab_size) for c in args.contexts)
    if draft is not None:
        out["draft_fixed_s"] = draft_fixed_seconds(draft, args, fitted, hw, dtype)
    return out


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
    loop_note = ""
    if args.forward == "reference":  # the reference loop's own costs beside its forward
        fit.constants.update(reference_loop_constants(model, args, fit.constants, hw, dtype))
        loop_note = (f"; host_s_per_seq and spec_host_s_per_seq from serve(), plain and with a {LOOP_CHAIN}-token fixed "
                     f"chain, at T=0 and (the sampling_* terms) T={SAMPLED_T:g}; lookup_s_per_seq from the ngram drafter"
                     + (", draft_fixed_s from the draft's 1-token forwards, draft_host_s_per_seq from serve() with the vanilla "
                        "drafter (its draft phase less its draft forwards)" if args.draft else "")
                     + (", layer_host_s_per_seq from serve() with the EAGLE-3 drafter (less its head's steps, fusion "
                        "and logits)" if args.eagle3 else "")
                     + (", heads_host_s_per_seq from serve() with the Medusa drafter (less its heads' pass)"
                        if args.medusa else ""))
    cal = CalibrationFile(
        engine="hf", device=device_name,
        method=(("reference engine (TorchBackend.run, batched verify forward)" if args.forward == "reference"
                 else "HF forward + DynamicCache") + f", {dtype}, median of {args.repeats} after {args.warmup} warm-up"
                + loop_note),
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

"""The reference loop's own costs beside its forward, timed from ``serve()`` itself.

Per sequence: the host work of a plain step and what a speculative step adds (verification,
rollback), each drafter's host work per draft forward (its draft phase less the calls the load
curve prices as its forward), the n-gram lookup, and a draft model's fixed seconds per forward;
each host term again at temperature :data:`SAMPLED_T`, where it differs by what sampling adds
(the ``sampling_*`` constants). ``forward_seconds`` is fenced by a device sync on CUDA
(``TorchBackend.run``), so host time is wall time less GPU time on either device.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, PreTrainedModel

from picker.calibrate.options import CalibrateOptions
from picker.calibrate.timing import measured_shape, time_reference
from picker.engine.backend import TorchBackend
from picker.engine.drafting import Draft, DraftContext, SamplingParams, bind
from picker.engine.loop import serve
from picker.engine.plugins import load_strategies
from picker.engine.runtime import build_drafter
from picker.engine.tree import TokenTree
from policies.costmodel import CATCH_UP_FORWARDS
from policies.loadcurve import engine_curve, forward
from policies.roofline import HardwareLike

LOOP_CHAIN = 4  # drafts per step of the fixed chain that times the speculative path's host work (N = 4, typical)
SAMPLED_T = 1.0  # the temperature at which the loop's host terms are timed again (sampling's own cost)


class FixedChainDrafter:
    """Proposes ``k`` copies of one token at every step: the speculative path at its full width
    (verification of k nodes, rollback of the rejected ones) with no drafting cost of its own."""

    def __init__(self, k: int, token: int = 0) -> None:
        self.k, self.token = k, token

    def fork(self) -> FixedChainDrafter:
        return FixedChainDrafter(self.k, self.token)

    def propose(self, ctx: DraftContext) -> Draft:
        return Draft(TokenTree.from_chain([self.token] * min(self.k, ctx.max_draft)), p=None)


def _prompts(model: PreTrainedModel, seed: int, batch: int, context: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    rows: list[list[int]] = torch.randint(model.config.vocab_size, (batch, context), generator=gen).tolist()
    return rows


def _runs(opts: CalibrateOptions) -> Iterator[bool]:
    """One flag per run: whether it counts (the first ``warmup`` do not)."""
    return (i >= opts.warmup for i in range(opts.warmup + opts.repeats))


@torch.no_grad()
def host_seconds(model: PreTrainedModel, opts: CalibrateOptions, batch: int, context: int, k: int,
                 temperature: float = 0.0) -> tuple[float, float]:
    """(plain, extra) host seconds per step: ``serve()`` plain and with a k-token fixed chain, each
    step's wall time less the target's forward time; ``extra`` is what the speculative step spends
    beyond the plain one (medians of ``repeats`` runs of ``loop_tokens`` steps each), at ``temperature``."""
    prompts = _prompts(model, opts.seed + batch * 104729 + context, batch, context)
    backend = TorchBackend(model, rows=batch)

    def per_step(speculator: Any) -> float:
        runs = []
        for counted in _runs(opts):
            out = serve(backend, prompts, speculator, concurrency=batch, max_new_tokens=opts.loop_tokens,
                        max_draft=k, sampling=SamplingParams(temperature=temperature))
            if counted:  # the prefill step is a forward like any other: it cancels in the difference
                runs.append((out.seconds - out.forward_seconds) / out.steps)
        return statistics.median(runs)

    plain = per_step(None)
    return plain, max(per_step(bind(FixedChainDrafter(k))) - plain, 0.0)


def lookup_seconds(opts: CalibrateOptions, context: int, vocab: int, n: int = 4) -> float:
    """Seconds of one prompt-lookup step on one sequence (the ngram plugin's own drafter, built
    from its declared options): index the new token, look the suffix up, build an n-token chain.
    The context repeats a 16-token block, so every lookup finds a match (the full cost)."""
    plugin = load_strategies()["ngram"]
    options, max_draft = plugin.draft_options.chain(n)
    drafter = build_drafter(plugin, None, {}, options)
    gen = torch.Generator().manual_seed(opts.seed + context)
    block = torch.randint(vocab, (16,), generator=gen).tolist()
    seq = (block * (context // 16 + 1))[:context]
    drafter.reset(list(seq))
    steps = 200
    start = time.perf_counter()
    for _ in range(steps):
        seq.append(block[len(seq) % 16])  # the emitted token, then the next lookup
        drafter.propose(DraftContext(seq, context, SamplingParams(), None, max_draft, None))
    return (time.perf_counter() - start) / steps


def draft_fixed_seconds(draft: PreTrainedModel, opts: CalibrateOptions, fitted: dict[str, float],
                        hw: HardwareLike, dtype: torch.dtype) -> float:
    """The draft model's fixed seconds per forward: its 1-token forwards on the reference backend,
    less what the load curve, with the target's fitted constants, charges for its bytes and FLOPs."""
    shape = measured_shape(draft, dtype, str(opts.draft))
    curve = engine_curve("hf", {**fitted, "draft_fixed_s": 0.0}, label="fitted here")
    points = [p for batch, context in opts.grid
              for p in time_reference(draft, batch, context, [1], seed=opts.seed, warmup=opts.warmup,
                                      repeats=opts.repeats)]
    residual = [p.seconds - forward(shape, hw, p.batch, p.batch, p.context_len, curve, role="draft").seconds
                for p in points]
    return max(statistics.median(residual), 0.0)


def _time_calls(obj: Any, attr: str, acc: dict[str, float], rows: Callable[[tuple[Any, ...]], int] | None) -> None:
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
Timed = list[tuple[Any, str, Callable[[tuple[Any, ...]], int] | None]]
Built = tuple[Any, Any, int, Timed]  # (drafter, its plugin's capabilities or None, max_draft, timed calls)


def drafter_host_seconds(model: PreTrainedModel, build: Callable[[Any], Built], opts: CalibrateOptions,
                         batch: int, context: int, temperature: float = 0.0) -> tuple[float, int]:
    """(host seconds, rows) of a drafter's draft phases in ``serve()``: its draft phase less the wall
    time of the calls the curve prices as its forward (``build(target)``: the drafter, its
    capabilities, which declare the hidden states it reads, its max_draft and the calls to time),
    and the rows those calls carried. What is left is the drafter's own work per sequence: choosing
    or drawing each draft token, planning its row, building its tree."""
    prompts = _prompts(model, opts.seed + batch * 15485863 + context, batch, context)
    target = TorchBackend(model, rows=batch)
    runs = []
    for counted in _runs(opts):
        acc = {"seconds": 0.0, "rows": 0}
        drafter, caps, max_draft, timed = build(target)
        for obj, attr, rows in timed:
            _time_calls(obj, attr, acc, rows)
        out = serve(target, prompts, bind(drafter, caps), concurrency=batch, max_new_tokens=opts.loop_tokens,
                    max_draft=max_draft, sampling=SamplingParams(temperature=temperature))
        if counted:
            runs.append((max(out.draft_seconds - acc["seconds"], 0.0), acc["rows"]))
    return statistics.median(h for h, _ in runs), int(statistics.median(r for _, r in runs))


def drafter_builders(opts: CalibrateOptions, draft: PreTrainedModel | None, k: int
                     ) -> dict[str, Callable[[Any], Built]]:
    """{host constant: builder} for the drafters given: a draft model (vanilla), EAGLE-3, Medusa."""
    plugins = load_strategies()  # once: each builder runs for every repeat of every grid point

    def plugin_drafter(name: str, artifact: Path, target: Any, **extra: Any) -> tuple[Any, Any, int]:
        plugin = plugins[name]
        options, max_draft = plugin.draft_options.chain(k)  # k deep, as the profiler builds it
        drafter = build_drafter(plugin, target, {plugin.capabilities.artifact: artifact}, {**options, **extra})
        return drafter, plugin.capabilities, max_draft

    def vanilla(target: Any) -> Built:
        backend = TorchBackend(draft, rows=1)  # type: ignore[arg-type]  # the drafter lends itself a row per sequence
        d, caps, max_draft = plugin_drafter(
            "vanilla", opts.draft, target, draft_backend=backend)  # type: ignore[arg-type]
        return d, caps, max_draft, [(backend, "run", lambda a: len(a[0].rows))]

    def eagle3(target: Any) -> Built:
        d, caps, max_draft = plugin_drafter("eagle3", opts.eagle3, target)  # type: ignore[arg-type]
        # Its catch-up fuses each sequence's new states once per step; the curve charges the term per
        # sequence-step k + CATCH_UP_FORWARDS times (the forwards it prices), so rows count that.
        per_step = k + CATCH_UP_FORWARDS
        return d, caps, max_draft, [(d.head, "step", None), (d.head, "fuse", lambda a: per_step * int(a[0].shape[0])),
                                    (d.target, "logits", None)]

    def medusa(target: Any) -> Built:
        d, caps, max_draft = plugin_drafter("medusa", opts.medusa, target)  # type: ignore[arg-type]
        return d, caps, max_draft, [(d.heads, "logits", lambda a: int(a[0].shape[0]))]

    out: dict[str, Callable[[Any], Built]] = {}
    if draft is not None:
        out["draft_host_s_per_seq"] = vanilla
    if opts.eagle3 is not None:
        out["layer_host_s_per_seq"] = eagle3
    if opts.medusa is not None:
        out["heads_host_s_per_seq"] = medusa
    return out


def reference_loop_constants(model: PreTrainedModel, opts: CalibrateOptions, fitted: dict[str, float],
                             hw: HardwareLike, dtype: torch.dtype,
                             say: Callable[[str], None] = lambda line: None) -> dict[str, float]:
    """host_s_per_seq and spec_host_s_per_seq (host seconds over sequences, the whole grid), lookup_s_per_seq
    (median over contexts), with a draft model draft_fixed_s (median over the grid) and draft_host_s_per_seq
    (host seconds over sequence-forwards); each host term again at temperature SAMPLED_T, where it differs by
    what sampling adds (the ``sampling_*`` constants: the warp, rejection test and draws of every sequence)."""
    draft = None
    if opts.draft is not None:
        draft = AutoModelForCausalLM.from_pretrained(opts.draft, dtype=dtype, local_files_only=True)
        draft = draft.to(model.device).eval()
    # Σ host time / Σ sequences: per step it is partly fixed (the forward's fixed_s holds the fixed
    # part of a plain step), and the large batches are where it counts.
    seqs = sum(b for b, _ in opts.grid)
    builders = drafter_builders(opts, draft, LOOP_CHAIN)
    terms: dict[float, dict[str, float]] = {}
    for temperature in (0.0, SAMPLED_T):
        host = [host_seconds(model, opts, b, c, LOOP_CHAIN, temperature) for b, c in opts.grid]
        terms[temperature] = {"host_s_per_seq": sum(p for p, _ in host) / seqs,
                              "spec_host_s_per_seq": sum(e for _, e in host) / seqs}
        say(f"T={temperature:g} host per step, plain / speculative extra (us): " + ", ".join(
            f"B={b} L={c}: {p * 1e6:.0f} / {e * 1e6:.0f}" for (b, c), (p, e) in zip(opts.grid, host)))
        for name, build in builders.items():
            drafting = [drafter_host_seconds(model, build, opts, b, c, temperature) for b, c in opts.grid]
            terms[temperature][name] = sum(h for h, _ in drafting) / max(sum(r for _, r in drafting), 1)
            say(f"T={temperature:g} {name} per row (us): " + ", ".join(
                f"B={b} L={c}: {h / max(r, 1) * 1e6:.0f}" for (b, c), (h, r) in zip(opts.grid, drafting)))
    out = dict(terms[0.0])
    out.update({f"sampling_{k}": max(v - terms[0.0][k], 0.0) for k, v in terms[SAMPLED_T].items()})
    out["lookup_s_per_seq"] = statistics.median(lookup_seconds(opts, c, model.config.vocab_size) for c in opts.contexts)
    if draft is not None:
        out["draft_fixed_s"] = draft_fixed_seconds(draft, opts, fitted, hw, dtype)
    return out

"""Batched decoding on the zoo target: plain throughput by batch, each strategy's gain by concurrency.

    $ python bench/bench_batched.py                       # everything, 3 interleaved repetitions
    $ python bench/bench_batched.py --reps 5 --strategies ngram,vanilla --concurrency 1,4,16

Three tables, every ratio against a baseline measured in the same run, pair by pair (interleaved:
each repetition runs every configuration once, in order, so slow phases of a shared machine hit
all of them alike), medians over repetitions, one torch thread:

1. plain decoding (``picker.engine.loop.serve`` without a drafter) at batch 1, 2, 4, 8 on the same
   prompts cut to one length: tokens/s, the ratio to batch 1, and the ratio to Hugging Face
   ``generate`` on the same padded batch (goals: batch 8 >= 4x batch 1, >= 1.0x HF);
2. every registered strategy's gain over plain decoding at the same concurrency (1, 2, 4, 8, 16),
   at T = 0 and T = 1, on a queue of 2C built-in prompts of mixed lengths (continuous batching);
3. loop overhead at batch 8: the share of wall time outside target forwards and drafting (goal <= 10%).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from picker.engine import runtime  # noqa: E402
from picker.engine.backend import TorchBackend  # noqa: E402
from picker.engine.drafting import MissingArtifact, SamplingParams, Speculator  # noqa: E402
from picker.engine.loop import Served, serve  # noqa: E402
from picker.engine.plugins import load_strategies  # noqa: E402


def prompts(tokenizer: Any, n: int, length: int | None, seed: int = 0) -> list[list[int]]:
    """``n`` built-in prompts over every task type; cut to ``length`` tokens, or to mixed lengths."""
    from picker.tasks import builtin_prompts, builtin_tasks, render_turn

    items = builtin_prompts(list(builtin_tasks()), limit=max(4, -(-4 * n // len(builtin_tasks()))), seed=seed)
    ids = [i for i in (runtime.encode(tokenizer, render_turn(p, 0, [])) for p in items) if len(i) >= (length or 4)]
    return [i[-length:] if length else i[-(16 + 8 * (k % 4)):] for k, i in enumerate(ids[:n])]


def plain_table(target: TorchBackend, ids: list[list[int]], new: int, reps: int) -> dict[str, list[float]]:
    """Tokens/s of plain batched decoding at batch 1, 2, 4, 8 and of HF generate on the padded batch 8."""
    wide = target.with_rows(8)
    runs: dict[str, list[float]] = defaultdict(list)
    model = target.model
    batch = torch.tensor(ids[:8])  # one length: the padded batch needs no padding
    for _ in range(reps):
        for b in (1, 2, 4, 8):
            run = serve(wide, ids[:b], concurrency=b, max_new_tokens=new)
            runs[f"batch {b}"].append(run.tokens_per_second)
        with torch.inference_mode():
            t0 = time.perf_counter()
            out = model.generate(batch, attention_mask=torch.ones_like(batch), max_new_tokens=new, min_new_tokens=new,
                                 do_sample=False, pad_token_id=2)
            runs["hf batch 8"].append((out.shape[1] - batch.shape[1]) * 8 / (time.perf_counter() - t0))
    return runs


def gain_table(target: TorchBackend, specs: dict[str, Callable[[], Speculator]],
               ids_of: Callable[[int], list[list[int]]], concurrencies: list[int], new: int,
               reps: int) -> dict[tuple[str, float, int], list[float]]:
    """Per (strategy, T, C): speculative tokens/s over plain tokens/s on the same queue, pair by pair."""
    wide = target.with_rows(max(concurrencies))
    gains: dict[tuple[str, float, int], list[float]] = defaultdict(list)
    for rep in range(reps):
        for temperature in (0.0, 1.0):
            for c in concurrencies:
                queue = ids_of(c)
                opts = {"concurrency": c, "max_new_tokens": new, "sampling": SamplingParams(temperature)}
                for name, make in specs.items():
                    base = serve(wide, queue, rng=np.random.default_rng(rep), **opts)
                    spec = serve(wide, queue, make(), rng=np.random.default_rng(rep), **opts)
                    gains[(name, temperature, c)].append(spec.tokens_per_second / base.tokens_per_second)
    return gains


def overhead(run: Served) -> float:
    """Share of the run's wall time outside target forwards and drafting (draft models, heads, lookups)."""
    return max(0.0, 1.0 - (run.forward_seconds + run.draft_seconds) / run.seconds)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--new", type=int, default=32, help="new tokens per request")
    ap.add_argument("--strategies", default="", help="comma list (default: every registered one)")
    ap.add_argument("--concurrency", default="1,2,4,8,16")
    args = ap.parse_args()
    torch.set_num_threads(1)
    from picker.zoo.resolve import zoo_artifacts, zoo_paths

    zoo = zoo_paths(progress=False)
    target = TorchBackend.from_pretrained(zoo.target)
    tokenizer = runtime.load_tokenizer(Path(zoo.target))
    plugins = load_strategies()
    names = [s for s in args.strategies.split(",") if s] or sorted(plugins)
    concurrencies = [int(c) for c in args.concurrency.split(",")]

    print(f"zoo target {zoo.target}; one torch thread; {args.reps} interleaved repetitions, medians")
    plain = plain_table(target, prompts(tokenizer, 8, 32), args.new, args.reps)
    med = {k: statistics.median(v) for k, v in plain.items()}
    print("\n| plain decoding | tokens/s | vs batch 1 | vs HF generate (batch 8) |\n|---|---|---|---|")
    for k, v in med.items():
        print(f"| {k} | {v:.0f} | {v / med['batch 1']:.2f}x | {v / med['hf batch 8']:.2f}x |")

    specs: dict[str, Callable[[], Speculator]] = {}
    for name in names:
        plugin = plugins[name]

        def make(plugin: Any = plugin) -> Speculator:
            art = zoo_artifacts(zoo)
            drafter = runtime.build_drafter(plugin, target, art)
            return Speculator(drafter, plugin.capabilities, lambda: runtime.build_drafter(plugin, target, art))
        try:
            make()
        except MissingArtifact as exc:
            print(f"skip {name}: {exc}")
            continue
        specs[name] = make
    queues = {c: prompts(tokenizer, 2 * c, None, seed=1) for c in concurrencies}
    gains = gain_table(target, specs, queues.__getitem__, concurrencies, args.new, args.reps)
    print("\n| strategy | T | " + " | ".join(f"C={c}" for c in concurrencies) + " |")
    print("|---|---|" + "---|" * len(concurrencies))
    for name in specs:
        for t in (0.0, 1.0):
            cells = " | ".join(f"{statistics.median(gains[(name, t, c)]):.2f}x" for c in concurrencies)
            print(f"| {name} | {t:g} | {cells} |")

    wide = target.with_rows(8)
    print("\n| batch 8, T = 0 | loop overhead (share of wall) |\n|---|---|")
    for name, make in [("plain", lambda: None), *specs.items()]:
        shares = [overhead(serve(wide, queues.get(8, prompts(tokenizer, 16, None, 1)), make(), concurrency=8,
                                 max_new_tokens=args.new)) for _ in range(args.reps)]
        print(f"| {name} | {statistics.median(shares):.1%} |")


if __name__ == "__main__":
    main()

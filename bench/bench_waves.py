"""Static waves against refilled ones: what the drain at a wave's end does to a measured gain under load.

    $ python bench/bench_waves.py                                    # chat, code, math; C = 4, 16; 3 reps
    $ python bench/bench_waves.py --tasks all --strategies ngram,medusa,eagle3,vanilla,lookahead --reps 3

``specpick profile --concurrency C`` serves its prompts in waves of C x ``--wave-rounds`` (default 1).
One round is a static wave: C prompts start together and the wave ends with the slowest, its last
steps run by fewer and fewer rows. Plain decoding with forced lengths has no drain (every request
takes the same steps); speculation's steps differ by request, so the drain falls on it alone. With
R rounds a freed row takes the next prompt at once (continuous batching, as a loaded server keeps
it; the joining prompt prefilled in a forward of its own) and only the last round drains.

Per task, strategy and C, every repetition times plain and the strategy both ways on the same
C x R prompts of the task (``--ignore-eos`` lengths: ``--max-new-tokens`` each), interleaved, one
torch thread: *static* serves them C at a time (R calls), *refilled* in one call. Printed: the
median over repetitions of each gain over plain (the same mode's plain), and static / refilled.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from picker.engine.drafting import bind  # noqa: E402
from picker.engine.loop import serve  # noqa: E402
from picker.profiler.records import CellKey  # noqa: E402


def timed(target: Any, ids: list[list[int]], speculator: Any, c: int, per_call: int, new: int,
          max_draft: int) -> tuple[float, int]:
    """(seconds, tokens) of serving ``ids`` at concurrency ``c``, ``per_call`` prompts per serve call."""
    seconds, tokens = 0.0, 0
    for start in range(0, len(ids), per_call):
        t0 = time.perf_counter()
        run = serve(target, ids[start:start + per_call], speculator, concurrency=c, max_new_tokens=new,
                    max_draft=max_draft)
        seconds += time.perf_counter() - t0
        tokens += sum(len(g.tokens) for g in run.generations)
    return seconds, tokens


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", default="chat,code,math", help="comma list, or all")
    ap.add_argument("--strategies", default="ngram,medusa,eagle3")
    ap.add_argument("--concurrency", default="4,16")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    from picker.profiler.options import prompts_by_task, resolve_model
    from picker.profiler.torch_source import TorchSource
    from picker.tasks import builtin_tasks

    source = TorchSource(*resolve_model("zoo", {}))
    tasks = list(builtin_tasks()) if args.tasks == "all" else args.tasks.split(",")
    strategies, levels = args.strategies.split(","), [int(c) for c in args.concurrency.split(",")]
    new, rounds = args.max_new_tokens, args.rounds
    prompts = prompts_by_task("builtin", tasks, max(levels) * rounds, "", 0)
    gains: dict[tuple[str, str, int, str], list[float]] = defaultdict(list)
    for rep in range(args.reps):
        for task in tasks:
            for c in levels:
                ids = [source._encode(p, 0, [], new, 4) for p in prompts[task][:c * rounds]]
                target = source._rows(c)
                rate: dict[tuple[str, str], float] = {}
                for strategy in ("plain", *strategies):
                    cell = CellKey(task, strategy, 0.0, 0 if strategy == "plain" else 4, concurrency=c)
                    drafter, caps, max_draft = source._drafter(cell)
                    for mode, per_call in (("static", c), ("refilled", c * rounds)):
                        seconds, tokens = timed(target, ids, bind(drafter, caps), c, per_call, new, max_draft)
                        rate[(strategy, mode)] = tokens / seconds
                for strategy in strategies:
                    for mode in ("static", "refilled"):
                        gains[(task, strategy, c, mode)].append(rate[(strategy, mode)] / rate[("plain", mode)])
        print(f"repetition {rep + 1}/{args.reps} done", file=sys.stderr)
    print(f"gain over plain (median of {args.reps}), {rounds} rounds of C prompts, {new} tokens each\n")
    print("| task | strategy | C | static | refilled | static / refilled |")
    print("|---|---|---|---|---|---|")
    ratios: dict[int, list[float]] = defaultdict(list)
    for task in tasks:
        for strategy in strategies:
            for c in levels:
                s = statistics.median(gains[(task, strategy, c, "static")])
                r = statistics.median(gains[(task, strategy, c, "refilled")])
                ratios[c].append(s / r)
                print(f"| {task} | {strategy} | {c} | {s:.2f} | {r:.2f} | {s / r:.2f} |")
    print("\n| C | median static / refilled | range |")
    print("|---|---|---|")
    for c in levels:
        print(f"| {c} | {statistics.median(ratios[c]):.3f} | {min(ratios[c]):.2f}-{max(ratios[c]):.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

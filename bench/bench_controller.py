"""Latency of ``Controller.choose`` and ``Controller.observe``: p50 / p99 / p99.9 per call.

Goals (issue 6): choose p99 ≤ 20 µs, observe p99 ≤ 50 µs on a 2-core CPU machine. Each call is
timed alone with ``time.perf_counter_ns`` (the timer's own cost is measured and shown, not
subtracted); inputs are drawn before timing; every scenario is warmed up first. Scenarios:

- ``choose``: varied batch sizes, temperatures and tasks, all buckets on (the lock-free path);
- ``choose, bucket off``: the bucket is switched off, so each call takes the lock (dwell/probes);
- ``observe``: Bernoulli acceptance at α = 0.75, well above break-even (the common case);
- ``observe, α in the band``: α = break-even + 0.08, where the posterior's bounds sit near a cell's
  break-even and the exact incomplete beta runs on ~9% of calls (the worst case found);
- the same ``choose`` / ``observe`` with 2 threads calling concurrently (GIL and lock contention).

Every scenario runs ``--repeat`` times; the table shows the median of each percentile over runs,
next to the machine's load average, because this machine is shared.

    python bench/bench_controller.py                       # 10^5 calls per scenario, 3 runs
    python bench/bench_controller.py --calls 200000 --repeat 5
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path

from picker.sdk.controller import Controller
from policies.online import OnlineParams

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "profiles" / "code-assistant-8b-a100.yaml"
GOALS_US = {"choose": 20.0, "observe": 50.0}
WARMUP = 10_000


def chain(rng: random.Random, n: int, alpha: float) -> int:
    k = 0
    while k < n and rng.random() < alpha:
        k += 1
    return k


def choose_inputs(rng: random.Random, calls: int, task: str | None = None) -> list[tuple[int, float, str | None]]:
    tasks = ("code", "chat", "math", None)
    return [(rng.choice((1, 2, 4, 8, 16, 24, 48, 100, 300)), rng.choice((0.0, 0.0, 0.2, 0.7)),
             task if task is not None else rng.choice(tasks)) for _ in range(calls)]


def observe_inputs(rng: random.Random, calls: int, alpha: float, n: int = 7) -> list[tuple[int, int]]:
    return [(n, chain(rng, n, alpha)) for _ in range(calls)]


def time_choose(ctl: Controller, inputs: list[tuple[int, float, str | None]], out: list[int]) -> None:
    clock, choose = time.perf_counter_ns, ctl.choose
    for b, t, task in inputs:
        t0 = clock()
        choose(b, t, task)
        out.append(clock() - t0)


def time_observe(ctl: Controller, inputs: list[tuple[int, int]], out: list[int], task: str = "code") -> None:
    """As a serving loop calls it: with the step's wall time, so cost calibration runs too."""
    clock, observe = time.perf_counter_ns, ctl.observe
    for drafted, accepted in inputs:
        t0 = clock()
        observe(drafted, accepted, 0.02, task, 0.0, batch_size=8)
        out.append(clock() - t0)


def timer_floor(calls: int) -> list[int]:
    clock, out = time.perf_counter_ns, []
    for _ in range(calls):
        t0 = clock()
        out.append(clock() - t0)
    return out


def percentiles(ns: list[int]) -> tuple[float, float, float, float]:
    s = sorted(ns)
    pick = lambda q: s[min(len(s) - 1, int(q * len(s)))] / 1e3  # noqa: E731 - µs
    return pick(0.50), pick(0.99), pick(0.999), s[-1] / 1e3


def threaded(run: Callable[[list[int]], None], threads: int) -> list[int]:
    """Run ``run`` in ``threads`` threads at once (released together); all latencies pooled."""
    outs: list[list[int]] = [[] for _ in range(threads)]
    gate = threading.Barrier(threads)

    def body(i: int) -> None:
        gate.wait()
        run(outs[i])

    pool = [threading.Thread(target=body, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return [x for o in outs for x in o]


def fresh(alpha_for: str | None = None) -> Controller:
    ctl = Controller.from_profile(PROFILE)
    if alpha_for == "off":  # a dead drafter for 'code': the bucket switches off
        for _ in range(400):
            ctl.observe(7, 0, task="code", temperature=0.0)
    return ctl


def scenarios(calls: int, seed: int) -> dict[str, tuple[str, Callable[[], list[int]]]]:
    """name → (kind, run) where run returns per-call nanoseconds after a warm-up."""
    rng = random.Random(seed)
    ch, ch_off = choose_inputs(rng, calls), choose_inputs(rng, calls, task="code")
    good = observe_inputs(rng, calls, 0.75)
    base = fresh()
    star = base.break_even_alpha(8)
    edge = observe_inputs(rng, calls, star + 0.08)

    def one(kind: str, make: Callable[[], Controller], inputs: list) -> Callable[[], list[int]]:
        def run() -> list[int]:
            ctl, out = make(), []
            timer = time_choose if kind == "choose" else time_observe
            timer(ctl, inputs[:WARMUP], [])
            timer(ctl, inputs, out)
            return out
        return run

    def two(kind: str, inputs: list) -> Callable[[], list[int]]:
        def run() -> list[int]:
            ctl = fresh()
            timer = time_choose if kind == "choose" else time_observe
            timer(ctl, inputs[:WARMUP], [])
            return threaded(lambda out: timer(ctl, inputs, out), 2)
        return run

    return {
        "choose": ("choose", one("choose", fresh, ch)),
        "choose, bucket off (locked path)": ("choose", one("choose", lambda: fresh("off"), ch_off)),
        "observe, alpha 0.75": ("observe", one("observe", fresh, good)),
        f"observe, alpha {star + 0.08:.2f} (band; a* {star:.2f})": ("observe", one("observe", fresh, edge)),
        "choose, 2 threads": ("choose", two("choose", ch)),
        "observe, 2 threads": ("observe", two("observe", good)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description="Controller.choose / observe latency")
    ap.add_argument("--calls", type=int, default=100_000, help="timed calls per scenario and run")
    ap.add_argument("--repeat", type=int, default=3, help="runs per scenario; the table shows medians")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    OnlineParams()  # import cost out of the way
    load_before = os.getloadavg()
    floor = percentiles(timer_floor(args.calls))
    rows = []
    for name, (kind, run) in scenarios(args.calls, args.seed).items():
        runs = [percentiles(run()) for _ in range(args.repeat)]
        med = tuple(statistics.median(r[i] for r in runs) for i in range(4))
        rows.append((name, kind, med, [r[1] for r in runs]))
    load_after = os.getloadavg()
    print(f"{args.calls} timed calls per run, {args.repeat} runs, medians of each percentile (µs); "
          f"timer alone p50 {floor[0]:.2f} p99 {floor[1]:.2f}")
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} on {os.cpu_count()} CPUs")
    head = f"{'scenario':<38} {'p50':>7} {'p99':>7} {'p99.9':>8} {'max':>9}  {'goal p99':>8}  {'p99 per run':<24}"
    print(head)
    print("-" * len(head))
    for name, kind, (p50, p99, p999, mx), per_run in rows:
        goal = GOALS_US[kind]
        verdict = "ok" if p99 <= goal else "MISS"
        runs = " ".join(f"{x:.1f}" for x in per_run)
        print(f"{name:<38} {p50:>7.2f} {p99:>7.2f} {p999:>8.1f} {mx:>9.1f}  {goal:>6.0f} {verdict:<4} {runs:<24}")


if __name__ == "__main__":
    main()

"""What the profiler measures through: the reference loop (torch) or a live engine endpoint.

A :class:`Source` turns (cell, prompts) into :class:`~picker.profiler.records.Record` counters.
The reference loop measures one generation at a time; live endpoints run a wave of prompts
concurrently (``concurrency``) and yield records as they finish — one per request where the
engine reports acceptance per request (SGLang), one per wave where only server counters exist
(vLLM). The runner owns ordering, stopping, records and the summary; a source owns only I/O.

    >>> class Echo:                       # the smallest source: every request accepts nothing
    ...     name, concurrency, plain = "echo", 1, False
    ...     def describe(self): return {"backend": "echo"}
    ...     def configs(self, strategies, ns): return [DraftConfig("ngram", 1)]
    ...     def measure(self, cell, prompts, params): return iter(())
    ...     def close(self): pass
    >>> isinstance(Echo(), Source)
    True
"""

from __future__ import annotations

import time
import zlib
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar, runtime_checkable

from picker.errors import UserError
from picker.profiler.records import CellKey, Record
from picker.tasks import Prompt

T = TypeVar("T")

# What every live source does before timing (its ``describe()["warmup"]``, so the run's metadata says it).
# A fresh server's first requests are slow (allocations, caches, the first prefill of a long batch),
# and measured on the real llama.cpp pair a short warm-up (a 9-token prompt, 8 tokens) did not cover
# the first full-size prefill. So the warm-up has the timed requests' shape.
WARMUP = ("one untimed request per server (the configuration's and plain's) before the run's first timed "
          "wave: that wave's first prompt (first turn), its max_new_tokens and ignore_eos, T = 0, streamed like "
          "the timed requests; in no figure, and before the counters the run differences are read")


@dataclass(frozen=True)
class GenParams:
    """Generation settings shared by every cell of a run."""

    max_new_tokens: int
    seed: int = 0
    # Generate exactly max_new_tokens: engines get their ignore_eos, the torch loop stops at no EOS.
    # Lengths then do not depend on the model's taste (a zoo that answers EOS at once).
    ignore_eos: bool = False
    # Open loop: the shape of gamma-distributed gaps between arrivals (1: Poisson; below 1 burstier),
    # as vLLM's ``--burstiness``.
    burstiness: float = 1.0


@dataclass(frozen=True)
class DraftConfig:
    """A draft shape a source can measure: a strategy with a chain of N, or a tree label."""

    strategy: str
    num_draft_tokens: int
    tree: str | None = None


@runtime_checkable
class Source(Protocol):
    """Measures generations; ``plain`` says whether it can run the no-speculation baseline."""

    name: str
    concurrency: int
    plain: bool

    def describe(self) -> dict[str, Any]: ...

    def configs(self, strategies: Sequence[str], num_draft_tokens: Sequence[int]) -> list[DraftConfig]: ...

    def measure(self, cell: CellKey, prompts: Sequence[Prompt], params: GenParams) -> Iterator[Record]: ...

    def close(self) -> None: ...


def single_strategy(strategies: Sequence[str], backend: str, detected: str | None) -> str:
    """A live server runs one strategy: the user's label, else the one its config names."""
    if len(strategies) > 1:
        raise UserError(f"a {backend} server runs one speculative strategy; got {', '.join(strategies)}",
                        field="--strategies")
    if strategies:
        return strategies[0]
    if detected is None:
        raise UserError(f"cannot tell which strategy the {backend} server runs; name it, e.g. --strategies ngram",
                        field="--strategies")
    return detected


def bounded(items: Sequence[T], work: Callable[[T], Record], concurrency: int) -> Iterator[Record]:
    """Run ``work`` over ``items`` with at most ``concurrency`` in flight; yield as each finishes.

    On the first failure no new item starts; requests already in flight are awaited so their
    records are still yielded (kept), then the failure is raised.
    """
    if concurrency <= 1:
        for item in items:
            yield work(item)
        return
    pending = list(items)
    failure: BaseException | None = None
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        running: set[Future[Record]] = set()
        while pending or running:
            while pending and failure is None and len(running) < concurrency:
                running.add(pool.submit(work, pending.pop(0)))
            if not running:
                break
            done, running = wait(running, return_when=FIRST_COMPLETED)
            for fut in done:
                exc = fut.exception()
                if exc is None:
                    yield fut.result()
                elif failure is None:
                    failure = exc
    if failure is not None:
        raise failure


def arrival_times(cell: CellKey, prompts: Sequence[Prompt], params: GenParams) -> list[float] | None:
    """Seconds after the wave starts at which each prompt arrives (open loop), None for closed loop.

    Gaps are gamma(shape = burstiness, mean = 1 / rate): Poisson arrivals at burstiness 1, vLLM's
    ``--burstiness`` otherwise; the first arrives at 0. Seeded by the run seed, the group (task,
    temperature, rate) and the prompts, never by the strategy: plain decoding and every
    configuration meet the same schedule.

        >>> from picker.tasks import Prompt
        >>> ps = [Prompt(f"p{i}", "code", ("x",)) for i in range(4)]
        >>> cell = CellKey("code", "ngram", 0.0, 4, request_rate=2.0)
        >>> t = arrival_times(cell, ps, GenParams(8))
        >>> t[0], len(t), t == arrival_times(CellKey("code", "plain", 0.0, 0, request_rate=2.0), ps, GenParams(8))
        (0.0, 4, True)
    """
    if cell.request_rate is None:
        return None
    import numpy as np

    rng = np.random.default_rng([params.seed, zlib.crc32(f"{cell.task}|{cell.temperature:g}|{cell.request_rate:g}".encode()),
                                 *(zlib.crc32(p.id.encode()) for p in prompts)])
    shape = params.burstiness
    gaps = rng.gamma(shape, 1.0 / (cell.request_rate * shape), size=len(prompts))
    return [0.0, *(float(x) for x in np.cumsum(gaps[:-1]))]


def paced(items: Sequence[T], work: Callable[[T], Record], arrivals: Sequence[float], cap: int) -> Iterator[Record]:
    """Open loop: start ``work(item)`` at its arrival (seconds after now), with at most ``cap`` in
    flight (0: no cap), and yield records as they finish. A request held back by the cap waits on
    the client side: its first timing gets that wait as ``queued_s`` (TTFT counts from its sending,
    as vLLM's load client does with its concurrency cap) and its sending time as ``sent_s``.

    Failures as in :func:`bounded`: no new request starts, those in flight are awaited and kept.
    """
    t0 = time.perf_counter()
    pending = deque(zip(items, arrivals))
    failure: BaseException | None = None
    with ThreadPoolExecutor(max_workers=max(1, cap or len(items))) as pool:
        running: dict[Future[Record], tuple[float, float]] = {}
        while (pending and failure is None) or running:
            now = time.perf_counter() - t0
            while pending and failure is None and pending[0][1] <= now and (not cap or len(running) < cap):
                item, due = pending.popleft()
                running[pool.submit(work, item)] = (due, now)
            room = not cap or len(running) < cap
            timeout = max(0.0, pending[0][1] - now) if pending and failure is None and room else None
            if not running:
                time.sleep(timeout or 0.0)
                continue
            done, _ = wait(set(running), timeout=timeout, return_when=FIRST_COMPLETED)
            for fut in done:
                due, sent = running.pop(fut)
                exc = fut.exception()
                if exc is None:
                    yield _stamp_sent(fut.result(), due, sent)
                elif failure is None:
                    failure = exc
    if failure is not None:
        raise failure


def _stamp_sent(record: Record, due: float, sent: float) -> Record:
    if not record.timings:
        return record
    first = replace(record.timings[0], queued_s=round(max(0.0, sent - due), 6), sent_s=round(sent, 6))
    return replace(record, timings=(first, *record.timings[1:]))


def dispatch(cell: CellKey, prompts: Sequence[Prompt], params: GenParams,
             work: Callable[[Prompt], Record]) -> Iterator[Record]:
    """A wave of requests as the cell's load asks: closed loop (``cell.concurrency`` in flight) or
    open loop (arrivals at ``cell.request_rate``, at most ``cell.concurrency`` in flight, 0: no cap)."""
    arrivals = arrival_times(cell, prompts, params)
    if arrivals is None:
        return bounded(prompts, work, cell.concurrency)
    return paced(prompts, work, arrivals, cell.concurrency)

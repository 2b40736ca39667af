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

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

from picker.errors import UserError
from picker.profiler.records import CellKey, Record
from picker.tasks import Prompt

T = TypeVar("T")


@dataclass(frozen=True)
class GenParams:
    """Generation settings shared by every cell of a run."""

    max_new_tokens: int
    seed: int = 0
    # Generate exactly max_new_tokens: engines get their ignore_eos, the torch loop stops at no EOS.
    # Lengths then do not depend on the model's taste (a zoo that answers EOS at once).
    ignore_eos: bool = False


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

"""The profiling run: cells in rounds, records as they complete, stopping, summary and plot.

Cells are grouped by (task, temperature, load). Within a group every active cell measures the same
prompts in the same order — round r measures prompt r (a wave of prompts for concurrent sources)
with each cell in turn, in an order that alternates between rounds (ABBA, or seeded random:
``picker.profiler.ab``), so compared timings interleave pair by pair and nothing always runs
first — and after each round the stopping rule (``picker.profiler.stopping``) ends cells that are
precise enough or cannot change the decision. The plain baseline runs while any strategy cell of
its group is running. Load is closed loop (``concurrency``: C requests in flight) or open loop
(``request_rates``: seeded Poisson or gamma arrivals, at most ``max_in_flight`` in flight).

    >>> cfg = ProfileConfig(out=Path("/tmp/x"), tasks=["code"], temperatures=[0.0],
    ...                     strategies=["ngram"], num_draft_tokens=[4], max_new_tokens=32, limit_per_task=10)
    >>> cfg.rule.ci_target
    0.03

Faults: an :class:`~picker.profiler.http.EndpointError` or Ctrl-C stops the run after writing a
summary of what was measured (every record already on disk stays there), then propagates.
"""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from picker.errors import UserError
from picker.profiler.ab import paired_gain, round_order
from picker.profiler.provenance import collect as collect_provenance
from picker.profiler.records import PLAIN, CellKey, Record, RecordLog, stamp_wave
from picker.profiler.source import GenParams, Source
from picker.profiler.stats import CellStats, cell_stats
from picker.profiler.stopping import BELOW_BREAK_EVEN, DOMINATED, EXHAUSTED, PRECISION, StopRule, decide
from picker.profiler.summary import build_summary, write_json_atomic
from picker.tasks import Prompt

SUMMARY_EVERY_S = 20.0  # rewrite summary.json at least this often, so a kill leaves a recent one
# Settings a resumed run must share with the run it continues: records made under others differ.
RESUME_KEYS = ("backend", "target", "max_new_tokens", "seed", "prompts", "ignore_eos", "prompt_format", "wave_rounds",
               "concurrency", "request_rates", "burstiness", "max_in_flight", "order")
OPEN_WAVE = 8  # open loop without a cap: prompts per wave (times wave_rounds)


@dataclass
class ProfileConfig:
    """Everything the run needs besides the source and the prompts."""

    out: Path
    tasks: list[str]
    temperatures: list[float]
    strategies: list[str]
    num_draft_tokens: list[int]
    max_new_tokens: int
    limit_per_task: int
    rule: StopRule = field(default_factory=StopRule)
    seed: int = 0
    resume: bool = False
    plain: bool = True
    plot: bool = True
    meta: dict[str, Any] = field(default_factory=dict)  # written to run.json / summary "run"
    # Requests in flight, one group of cells per value (None: the source's own concurrency).
    concurrency: list[int] | None = None
    ignore_eos: bool = False  # generate exactly max_new_tokens (GenParams.ignore_eos)
    # Prompts per wave = concurrency x wave_rounds. A wave keeps C requests in flight, a finished
    # one replaced by the wave's next prompt, and ends by draining: its last requests finish one by
    # one with rows left empty, which no steady server does. One round is a static wave (all drain);
    # R rounds leave about 1/R of the wave to the drain.
    wave_rounds: int = 1
    # Open loop, one group of cells per rate (beside the concurrency levels, if any were asked for).
    request_rates: list[float] | None = None
    burstiness: float = 1.0  # gamma shape of the gaps between arrivals (1: Poisson)
    max_in_flight: int = 0  # open loop: cap on requests in flight (0: none)
    order: str = "abba"  # the cells' order within a round: abba or random (picker.profiler.ab)


# Stops that hold across resumes; running out of prompts does not (a resume may raise the limit).
FINAL_STOPS = (PRECISION, BELOW_BREAK_EVEN, DOMINATED)


class Progress:
    """Where the run reports progress; this base reports nothing (``picker.profiler.progress``)."""

    def note(self, message: str) -> None:
        """A one-line remark (a torn record dropped, ...)."""

    def cell(self, cell: CellKey, done: int, total: int) -> None:
        """A cell starts: ``done`` of ``total`` prompts measured already."""

    def advance(self, cell: CellKey, done: int, total: int) -> None:
        """A cell measured more prompts."""

    def stop(self, cell: CellKey, reason: str) -> None:
        """A cell ended."""


class Profiler:
    """One run over a source; :meth:`run` returns the final summary dict."""

    def __init__(self, source: Source, prompts: Mapping[str, Sequence[Prompt]], config: ProfileConfig,
                 progress: Progress | None = None) -> None:
        self.source, self.config, self.progress = source, config, progress or Progress()
        self.prompts = {t: list(ps)[: config.limit_per_task] for t, ps in prompts.items()}
        config.out.mkdir(parents=True, exist_ok=True)
        # The log first: a run refused for lack of --resume must not touch the earlier run's files.
        self.log = RecordLog.open(config.out / "records.jsonl", resume=config.resume)
        try:
            self.run_info = self._check_run_file()
        except UserError:
            self.log.close()
            raise
        self.by_cell: dict[CellKey, list[Record]] = defaultdict(list)
        for record in self.log.records:
            self.by_cell[record.cell].append(record)
        self.params = GenParams(config.max_new_tokens, config.seed, config.ignore_eos, config.burstiness)
        self.started = time.monotonic()
        self.last_summary = 0.0
        self.status = "running"
        self.server: dict[str, Any] = {}  # what the engine itself reported at the end (cross-check)
        self.interrupted = False  # first Ctrl-C: stop at the next record boundary

    def _check_run_file(self) -> dict[str, Any]:
        """Write run.json; on resume, refuse settings that would mix incomparable records."""
        path = self.config.out / "run.json"
        info = {**self.config.meta, "source": self.source.describe(), "max_new_tokens": self.config.max_new_tokens,
                "seed": self.config.seed, "ci_target": self.config.rule.ci_target,
                "min_samples": self.config.rule.min_samples, "early_stop": self.config.rule.early,
                "gain_ci_target": self.config.rule.gain_ci_target, "wave_rounds": self.config.wave_rounds,
                "order": self.config.order}
        # What was measured, so `recommend` can check it against the deployment (picker.inputs.provenance).
        info["provenance"] = collect_provenance(self.source, self.config.meta, self.prompts)
        if self.config.resume and path.exists():
            import json

            old = json.loads(path.read_text(encoding="utf-8"))
            for key in RESUME_KEYS:
                if key in old and key in info and old[key] != info[key]:
                    raise UserError(f"differs from the run being resumed ({old[key]!r} there, {info[key]!r} now)",
                                    file=str(path), field=key)
        write_json_atomic(path, info)
        return info

    def run(self) -> dict[str, Any]:
        """Measure every group; on any exit write a summary consistent with the records."""
        if self.log.torn:
            self.progress.note(f"{self.log.path}: {self.log.torn}; it is measured again")
        configs = self.source.configs(self.config.strategies, self.config.num_draft_tokens)
        previous = self._trap_sigint()
        try:
            groups = 0  # groups so far: the order alternates across groups too (one round per group is common)
            for task in self.config.tasks:
                for temperature in self.config.temperatures:
                    for c, rate in self._loads():
                        cells = [CellKey(task, d.strategy, temperature, d.num_draft_tokens, d.tree, c, rate)
                                 for d in configs]
                        if self.config.plain and self.source.plain:
                            cells.insert(0, CellKey(task, PLAIN, temperature, 0, concurrency=c, request_rate=rate))
                        self._group(cells, self.prompts.get(task, []), groups)
                        groups += 1
                        self.write_summary()
            self.status = "complete"
        except KeyboardInterrupt:
            self.status = "interrupted"
            raise
        except UserError as exc:
            self.status = f"failed: {exc}"
            raise
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
            self.write_summary()
            self.log.close()
            self.source.close()
        return self.summary()

    def _loads(self) -> list[tuple[int, float | None]]:
        """(concurrency or cap, request rate or None) of every group: closed-loop levels, then rates."""
        rates = self.config.request_rates or []
        levels = self.config.concurrency or ([] if rates else [max(1, self.source.concurrency)])
        return [(c, None) for c in levels] + [(self.config.max_in_flight, r) for r in rates]

    def _trap_sigint(self) -> Any:
        """First Ctrl-C: finish the record being written, then stop; a second one aborts at once."""
        if threading.current_thread() is not threading.main_thread():
            return None

        def handler(signum: int, frame: Any) -> None:
            if self.interrupted:
                raise KeyboardInterrupt
            self.interrupted = True
            self.progress.note("interrupted: stopping after the generation in flight (Ctrl-C again to abort)")

        return signal.signal(signal.SIGINT, handler)

    def _check_interrupt(self) -> None:
        if self.interrupted:
            raise KeyboardInterrupt

    def _stats(self, cell: CellKey) -> CellStats:
        return cell_stats(self.by_cell.get(cell, []), seed_key=cell.id)

    def _group(self, cells: list[CellKey], prompts: list[Prompt], seq: int = 0) -> None:
        """Rounds over ``prompts`` until every strategy cell of the group has stopped; ``seq``: the
        group's place in the run, which offsets the alternation of the cells' order (with one prompt
        per task, a group's only round would otherwise always run plain first)."""
        if not cells:
            return
        done = self.log.done()
        active = {c for c in cells if self.log.stops.get(c.id) not in FINAL_STOPS}
        load = (cells[0].concurrency or OPEN_WAVE) if cells[0].open_loop else cells[0].concurrency
        wave = load * self.config.wave_rounds  # one load per group (see wave_rounds)
        total = len(prompts)
        for cell in cells:
            self.progress.cell(cell, sum((cell.id, p.id) in done for p in prompts), total)
        self._stop(active, cells)  # a resumed run may already have enough
        for start in range(0, total, wave):
            if not any(not c.is_plain for c in active):
                break
            batch = prompts[start:start + wave]
            order = round_order(cells, seq + start // wave, seed=self.config.seed, how=self.config.order)
            for cell in [c for c in order if c in active]:
                self._check_interrupt()
                todo = [p for p in batch if (cell.id, p.id) not in done]
                wave_id, started = f"{cell.id}#{start}#{uuid.uuid4().hex[:8]}", time.time()
                for record in self.source.measure(cell, todo, self.params) if todo else ():
                    record = stamp_wave(record, wave_id, started, start)
                    self.log.append(record)
                    self.by_cell[cell].append(record)
                    self._check_interrupt()  # a safe point: the record is on disk and counted
                self.progress.advance(cell, min(start + wave, total), total)
            self._stop(active, cells)
            if time.monotonic() - self.last_summary > SUMMARY_EVERY_S:
                self.write_summary()
        for cell in sorted(active, key=cells.index):
            self._end(cell, EXHAUSTED, active)

    def _stop(self, active: set[CellKey], cells: list[CellKey]) -> None:
        group = {c: self._stats(c) for c in cells}
        plain = next((group[c] for c in cells if c.is_plain and group[c].samples), None)
        gains = None
        if self.config.rule.gain_ci_target > 0:  # the A/B gain's interval over rounds decides precision too
            base = next((self.by_cell.get(c, []) for c in cells if c.is_plain), [])
            gains = {c: paired_gain(self.by_cell.get(c, []), base) for c in cells if not c.is_plain}
        for cell, reason in decide(group, active, self.config.rule, plain, gains).items():
            self._end(cell, reason, active)
        if not any(not c.is_plain for c in active):
            for cell in [c for c in active if c.is_plain]:
                self._end(cell, "strategies-stopped", active)

    def _end(self, cell: CellKey, reason: str, active: set[CellKey]) -> None:
        active.discard(cell)
        self.log.append_stop(cell, reason)
        self.progress.stop(cell, reason)

    def summary(self) -> dict[str, Any]:
        run = {**self.run_info, "status": self.status, "elapsed_s": round(time.monotonic() - self.started, 3),
               "server_report": self.server or None}
        return build_summary(self.log.records, self.log.stops, run)

    def write_summary(self) -> None:
        """summary.json (atomic) and, when asked, the α plot beside it."""
        if self.status == "complete" and not self.server:
            self.server = self._server_report()
        summary = self.summary()
        write_json_atomic(self.config.out / "summary.json", summary)
        self.last_summary = time.monotonic()
        if self.config.plot and self.status != "running":
            from picker.profiler.latency_plot import plot_latency
            from picker.profiler.load import plot_gain
            from picker.profiler.plot import plot_alpha

            plot_alpha(summary, self.config.out / "alpha.png")
            plot_gain(summary, self.config.out / "gain_vs_concurrency.png")
            plot_latency(summary, self.config.out / "latency.png")


    def _server_report(self) -> dict[str, Any]:
        """The source's own end-of-run numbers, if it has any; a failing server reports nothing."""
        report = getattr(self.source, "report", None)
        if report is None:
            return {}
        try:
            return dict(report())
        except UserError:
            return {}


def records_of(out: Path) -> list[Record]:
    """The records of a run folder (for tools and tests)."""
    from picker.profiler.records import read_records

    return read_records(out / "records.jsonl")[0]

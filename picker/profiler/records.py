"""Append-only measurement records: one JSON line per generation, fsync'd as it completes.

A :class:`Record` holds raw counters that add up across records (the vLLM habit): tokens
emitted, target forwards, verify steps, draft tokens proposed and accepted, per-position counts
and times. Rates are derived in one place (``picker.profiler.stats``), never stored.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> log = RecordLog.open(d / "records.jsonl", resume=False)
    >>> key = CellKey("code", "ngram", 0.0, 4)
    >>> log.append(Record(cell=key, prompt_ids=("code-0",), tokens=9, forwards=4, steps=3,
    ...                   drafted=12, accepted=6))
    >>> RecordLog.open(d / "records.jsonl", resume=True).done() == {(key.id, "code-0")}
    True

A run killed mid-write leaves at most one torn last line: :meth:`RecordLog.open` reports it
(``RecordLog.torn``), cuts it off on resume, and the generation is measured again.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from picker.errors import UserError
from picker.profiler.latency import Timing

RECORD_VERSION = 1
PLAIN = "plain"  # the pseudo-strategy of the no-speculation baseline (a reserved plugin name)


@dataclass(frozen=True, order=True)
class CellKey:
    """One summary cell: task type × strategy × temperature × draft length (or tree) × concurrency."""

    task: str
    strategy: str
    temperature: float
    num_draft_tokens: int  # draft nodes verified per step; 0 for the plain baseline
    tree: str | None = None  # e.g. "depth=4,topk=2,tokens=16" when the draft is a tree
    # Requests in flight while the cell was measured (closed loop: a finished one is replaced).
    # Records written before the axis existed read as 1, and so do their ids.
    # Open loop (``request_rate`` set): the cap on requests in flight, 0 for none.
    concurrency: int = 1
    # Open loop: requests per second offered (seeded Poisson or gamma arrivals); None: closed loop.
    request_rate: float | None = None

    @property
    def id(self) -> str:
        base = f"{self.task}|{self.strategy}|T={self.temperature:g}|N={self.num_draft_tokens}"
        base += f"|tree={self.tree}" if self.tree else ""
        if self.request_rate is not None:
            return base + f"|rate={self.request_rate:g}" + (f"|cap={self.concurrency}" if self.concurrency else "")
        return base + (f"|C={self.concurrency}" if self.concurrency != 1 else "")

    @property
    def group(self) -> tuple[str, float, int, float | None]:
        """Cells compared against each other for early stopping (and against one plain baseline):
        same task, temperature and load (concurrency, or request rate and cap)."""
        return (self.task, self.temperature, self.concurrency, self.request_rate)

    @property
    def open_loop(self) -> bool:
        return self.request_rate is not None

    @property
    def is_plain(self) -> bool:
        return self.strategy == PLAIN


@dataclass(frozen=True)
class Record:
    """Counters of one generation (all turns of one prompt), or of one wave of prompts.

    ``forwards`` counts every target forward, prefill included; ``steps`` the decode forwards
    after the prefill; ``draft_steps`` those that carried at least one draft token (None: all of
    them, for sources that cannot tell). ``pos_reached[k]`` counts steps in which draft
    position ``k`` (0-based) was examined by the verifier (all earlier positions accepted),
    ``pos_accepted[k]`` those in which it was accepted. ``accept_hist[k]`` counts steps that
    accepted exactly ``k`` drafts. Per-position lists are empty when the source cannot tell.
    ``timings``: one :class:`~picker.profiler.latency.Timing` per request (turn) it covers, where the
    source timed tokens (streaming, or the loop's emission times); empty in older records.
    """

    cell: CellKey
    prompt_ids: tuple[str, ...]
    tokens: int
    forwards: int
    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    draft_steps: int | None = None
    pos_reached: tuple[int, ...] = ()
    pos_accepted: tuple[int, ...] = ()
    accept_hist: tuple[int, ...] = ()
    # Expected counts of sibling ranks 2.. reached / accepted at sampled rejections (picker.engine.siblings);
    # empty where not probed (greedy, deterministic drafts, engines).
    sib_reached: tuple[float, ...] = ()
    sib_accepted: tuple[float, ...] = ()
    draft_s: float = 0.0
    verify_s: float = 0.0
    wall_s: float = 0.0
    source: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    timings: tuple[Timing, ...] = ()

    def to_json(self) -> str:
        data = asdict(self)
        data["cell"] = asdict(self.cell)
        data["timings"] = [t.to_dict() for t in self.timings]
        return json.dumps({"v": RECORD_VERSION, **data}, separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Record:
        data = dict(data)
        data.pop("v", None)
        cell = CellKey(**data.pop("cell"))
        for name in ("prompt_ids", "pos_reached", "pos_accepted", "accept_hist", "sib_reached", "sib_accepted"):
            data[name] = tuple(data.get(name, ()))
        data["timings"] = tuple(Timing.from_dict(t) for t in data.get("timings", ()))
        return cls(cell=cell, **data)


def stamp_wave(record: Record, wave: str, started: float, round_: int | None = None) -> Record:
    """``record`` with the wave it ran in and its wall-clock span (epoch seconds) in ``extra``.

    Concurrent requests overlap, so per-request seconds do not add up to the time a wave took;
    throughput is tokens over the waves' spans (``picker.profiler.stats.wave_seconds``). A source
    that knows better when its requests started and ended (after a quiet gap, before reading
    counters) sets ``wave_t0`` and ``t1`` itself, and those stand.
    """
    extra = {"wave": wave, "wave_t0": started, "t1": time.time(), **record.extra}
    if round_ is not None:  # the block of prompts every cell of the group ran: the A/B pairing unit
        extra["round"] = round_
    return replace(record, extra=extra)


def chain_positions(drafted: int, accepted: int) -> tuple[list[int], list[int]]:
    """Per-position (reached, accepted) indicators of one chain verify step.

        >>> chain_positions(4, 2)     # positions 0, 1 accepted, 2 examined and rejected, 3 never seen
        ([1, 1, 1, 0], [1, 1, 0, 0])
    """
    reached = [1 if k <= accepted else 0 for k in range(drafted)]
    acc = [1 if k < accepted else 0 for k in range(drafted)]
    return reached, acc


def positions_from_histogram(hist: list[int] | tuple[int, ...]) -> tuple[list[int], list[int]]:
    """Per-position counts from a histogram of drafts accepted per step (``hist[k]``: k accepted).

    Position ``k`` is examined in every step that accepted at least ``k`` drafts and accepted in
    those that accepted more than ``k``. Assumes every step drafted the full chain (as engines that
    report such a histogram do).

        >>> positions_from_histogram([5, 3, 2])     # 10 steps of 2 drafts
        ([10, 5], [5, 2])
    """
    depth = len(hist) - 1
    reached = [sum(hist[k:]) for k in range(depth)]
    acc = [sum(hist[k + 1:]) for k in range(depth)]
    return reached, acc


class RecordLog:
    """The append-only JSONL file of a run; every append is flushed and fsync'd before it returns."""

    def __init__(self, path: Path, records: list[Record], stops: dict[str, str], torn: str | None) -> None:
        self.path = path
        self.records = records
        self.stops = stops  # cell id -> why sequential stopping ended it (kept across resumes)
        self.torn = torn  # one line describing a torn last record that was cut off, if any
        self._fh = path.open("a", encoding="utf-8")

    @classmethod
    def open(cls, path: Path, *, resume: bool) -> RecordLog:
        """Open for appending; with ``resume`` read what is there, else refuse to mix runs."""
        if path.exists() and path.stat().st_size > 0 and not resume:
            raise UserError("holds records of an earlier run; pass --resume or choose another --out",
                            file=str(path))
        records, stops, torn, good_bytes = read_records(path) if path.exists() else ([], {}, None, 0)
        if torn is not None:
            # Cut the torn tail so the next append starts on a fresh line of its own.
            with path.open("r+b") as fh:
                fh.truncate(good_bytes)
                fh.flush()
                os.fsync(fh.fileno())
        return cls(path, records, stops, torn)

    def append(self, record: Record) -> None:
        self._write(record.to_json())
        self.records.append(record)

    def append_stop(self, cell: CellKey, reason: str) -> None:
        """Note that sequential stopping ended ``cell``, so a resumed run does not reopen it."""
        self._write(json.dumps({"v": RECORD_VERSION, "event": "stop", "cell": asdict(cell), "reason": reason},
                               separators=(",", ":"), sort_keys=True))
        self.stops[cell.id] = reason

    def _write(self, line: str) -> None:
        self._fh.write(line + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())  # a SIGKILL right after this loses nothing

    def done(self) -> set[tuple[str, str]]:
        """(cell id, prompt id) pairs already measured."""
        return {(r.cell.id, pid) for r in self.records for pid in r.prompt_ids}

    def close(self) -> None:
        self._fh.close()


def read_records(path: Path) -> tuple[list[Record], dict[str, str], str | None, int]:
    """(records, stop reasons by cell id, torn-line note or None, byte length of the intact prefix).

    Only the last line may be torn (a write cut short by a kill); a bad line anywhere else means
    the file was edited or is not ours, and is an error naming the line.
    """
    lines = path.read_bytes().split(b"\n")
    records: list[Record] = []
    stops: dict[str, str] = {}
    offset = 0
    last = len(lines) - 1 if lines[-1] == b"" else len(lines)  # 1-based number of the last line
    for lineno, line in enumerate(lines[:last], start=1):
        try:
            if lineno == len(lines):
                raise ValueError("no newline at end")  # the writer never finished this line
            data = json.loads(line)
            if data.get("event") == "stop":
                stops[CellKey(**data["cell"]).id] = str(data["reason"])
            else:
                records.append(Record.from_dict(data))
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            if lineno == last:
                return records, stops, f"line {lineno}: torn last record ({len(line)} bytes) dropped", offset
            raise UserError(f"corrupt record ({exc.__class__.__name__}); not a file this tool wrote?",
                            file=str(path), field=f"line {lineno}") from None
        offset += len(line) + 1
    return records, stops, None, offset

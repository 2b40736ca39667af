"""Rich progress for a profiling run: one bar per cell with its ETA, on stderr.

    >>> from picker.profiler.records import CellKey
    >>> bars = RichProgress(mode="quiet")          # --quiet: notes only
    >>> bars.cell(CellKey("code", "ngram", 0.0, 4), 0, 10)

A cell's bar counts prompts measured out of the task's limit; when sequential stopping ends a
cell early its bar is completed and labelled with the reason, so the ETA never waits for prompts
that will not be measured.
"""

from __future__ import annotations

from typing import Literal

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeRemainingColumn

from picker.profiler.records import CellKey
from picker.profiler.run import Progress as ProgressSink


def _label(cell: CellKey) -> str:
    shape = f"tree {cell.tree}" if cell.tree else f"N={cell.num_draft_tokens}"
    return f"{cell.task:<13} {cell.strategy:<9} T={cell.temperature:<4g} {shape}"


Mode = Literal["bars", "lines", "quiet"]


class RichProgress(ProgressSink):
    """``bars`` on a terminal; ``lines`` (one per finished cell) in logs; ``quiet``: notes only."""

    def __init__(self, mode: Mode | None = None) -> None:
        self.console = Console(stderr=True)
        self.mode: Mode = mode or ("bars" if self.console.is_terminal else "lines")
        self.enabled = self.mode == "bars"
        self.bars = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TextColumn("ETA"), TimeRemainingColumn(), console=self.console,
                             disable=not self.enabled)
        self.tasks: dict[CellKey, TaskID] = {}

    def __enter__(self) -> RichProgress:
        self.bars.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bars.stop()

    def note(self, message: str) -> None:
        self.console.print(f"note: {message}", markup=False, highlight=False)

    def cell(self, cell: CellKey, done: int, total: int) -> None:
        if cell not in self.tasks:
            self.tasks[cell] = self.bars.add_task(_label(cell), total=total, completed=done)

    def advance(self, cell: CellKey, done: int, total: int) -> None:
        if cell in self.tasks:
            self.bars.update(self.tasks[cell], completed=done)

    def stop(self, cell: CellKey, reason: str) -> None:
        task = self.tasks.get(cell)
        if task is not None:
            total = self.bars.tasks[self.tasks[cell]].total
            self.bars.update(task, completed=total, description=f"{_label(cell)} [{reason}]")
        if self.mode == "lines":
            self.console.print(f"{_label(cell)}: stopped ({reason})", markup=False, highlight=False)

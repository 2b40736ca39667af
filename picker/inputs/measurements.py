"""Measured acceptance cells (the profiler's ``summary.json``), read at the edge into pydantic.

    {"cells": [{"task": "code", "strategy": "ngram", "temperature": 0.0, "alpha": 0.62,
                "alpha_ci": [0.58, 0.66], "samples": 1200, "num_draft_tokens": 4}]}

``alpha`` is per-token acceptance: accepted drafts / proposed drafts (the bonus token excluded).
``specpick profile`` (``picker.profiler.summary``) writes this file with more per cell: ``alpha_iid``
(accepted / examined draft positions, the α of the i.i.d. model E[L] = (1-α^(N+1))/(1-α), which
does not fall with N the way ``alpha`` does), per-position acceptance, τ, costs and speed; its
``conventions`` object states each one.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from picker.errors import UserError

TEMPERATURE_MATCH = 0.15  # a measured cell stands for temperatures within this distance


# The profiler's label of a tree cell (``CellKey.tree``); read here, where cells are read.
def tree_label(depth: int, topk: int, tokens: int) -> str:
    """The profiler's tree label for a cell (``CellKey.tree``)."""
    return f"depth={depth},topk={topk},tokens={tokens}"


def parse_tree_label(label: str) -> tuple[int, int, int]:
    """``depth=4,topk=2,tokens=8`` → (4, 2, 8)."""
    try:
        parts = dict(item.split("=") for item in label.split(","))
        return int(parts["depth"]), int(parts["topk"]), int(parts["tokens"])
    except (KeyError, ValueError):
        raise ValueError(f"not a tree label: {label!r}") from None


class Cell(BaseModel):
    model_config = ConfigDict(extra="allow")  # the profiler adds fields (cost, per-position, ...)

    task: str
    strategy: str
    temperature: float = Field(ge=0, le=2)
    alpha: float = Field(ge=0, le=1)
    alpha_ci: tuple[float, float]
    samples: int = Field(ge=0)
    num_draft_tokens: int | None = None
    per_position: list[float] | None = None
    cost_ratio: float | None = None
    # Written by the profiler (all optional, so hand-written files stay valid):
    tree: str | None = None
    alpha_ci_method: str | None = None
    alpha_iid: float | None = Field(None, ge=0, le=1)
    alpha_iid_ci: tuple[float, float] | None = None
    tau: float | None = Field(None, ge=1)
    sibling_accept: list[float] | None = None  # tree siblings, ranks 2.. (picker.engine.siblings)
    sibling_reached: list[float] | None = None  # the rejections behind each
    tokens_per_second: float | None = Field(None, ge=0)
    speedup_vs_plain: float | None = Field(None, ge=0)
    target_forwards: int | None = Field(None, ge=0)
    seconds: float | None = Field(None, ge=0)
    # Requests in flight when measured; files written before the axis existed are batch-1 runs.
    concurrency: int = Field(1, ge=1)
    throughput_tokens_per_second: float | None = Field(None, ge=0)
    throughput_gain_vs_plain: float | None = Field(None, ge=0)

    @property
    def chain_alpha(self) -> float:
        """The α to put into the i.i.d. chain model: ``alpha_iid`` where measured, else ``alpha``.

        For N > 1 ``alpha`` (accepted / proposed) counts drafts after a rejection as rejected, so it
        understates the per-token α of E[L] = (1-α^(N+1))/(1-α): 0.59 for α = 0.8 at N = 4.
        """
        return self.alpha_iid if self.alpha_iid is not None else self.alpha


class Measurements(BaseModel):
    model_config = ConfigDict(extra="allow")

    cells: list[Cell]
    source: str = ""

    def lookup(self, strategy: str, task: str, temperature: float) -> Cell | None:
        """The measured cell nearest in temperature (within ``TEMPERATURE_MATCH``), the lowest
        concurrency and most samples first (acceptance does not depend on the batch; costs do)."""
        near = [c for c in self.cells if c.strategy == strategy and c.task == task
                and abs(c.temperature - temperature) <= TEMPERATURE_MATCH]
        if not near:
            return None
        return min(near, key=lambda c: (abs(c.temperature - temperature), c.concurrency, -c.samples))


def load_measurements(path: str | Path) -> Measurements:
    """Read a profiler summary; any problem is one :class:`UserError` naming the file and field."""
    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError("file not found", file=name) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read: {exc.__class__.__name__}", file=name) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"malformed JSON at line {exc.lineno} column {exc.colno}", file=name) from None
    try:
        out = Measurements.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        raise UserError(err["msg"], file=name, field=field) from None
    return out.model_copy(update={"source": name})

"""The learned correction's numeric rows: one candidate as named features.

Every column is a (name, function) pair in :data:`ENCODING`, so a column's name and the value
written under it are defined on one line: :data:`FEATURES` and :func:`feature_row` are both read off
that one tuple and cannot drift apart by position. Column 0 is the log of the analytic speedup
(``SpeedupEstimator.base_column``); NaN marks what a row does not know. A fitted artifact stores
the names it was trained on (``policies.artifacts``), so reordering or renaming a pair makes old
artifacts fail to load instead of reading the wrong columns.

    >>> from picker.engine.plugins import Capabilities
    >>> from policies.evidence import Candidate, CostEvidence, Evidence
    >>> ev = Evidence(0.8, 0.7, 0.9, cost=CostEvidence(draft_unit=0.1, verify=((1, 1.0), (8, 1.2))))
    >>> row = feature_row(Candidate(Capabilities(needs_draft_model=True), depth=4, evidence=ev))
    >>> FEATURES[0], round(math.exp(row[0]), 3), len(row) == len(FEATURES)
    ('log_base_speedup', 2.167, True)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from picker.inputs.workload import TASK_TYPES
from policies.evidence import DRAFT_COST_KINDS, Candidate
from policies.speedup_model import base_speedup, expected_length, step_ratio

NAN = float("nan")


@dataclass(frozen=True)
class Row:
    """One candidate with what several columns share, computed once: its step ratio (the roofline
    is the slow part, so a caller that has it cached passes it), E[L] and the analytic speedup."""

    c: Candidate
    ratio: float
    length: float
    speedup: float

    @classmethod
    def of(cls, c: Candidate, ratio: float | None = None) -> Row:
        r = step_ratio(c) if ratio is None else ratio
        return cls(c, r, expected_length(c), base_speedup(c, r))


def _trend(r: Row) -> float:
    """Acceptance rising or falling along the chain (last measured position minus the first)."""
    pp = r.c.evidence.per_position
    return (pp[-1] - pp[0]) if len(pp) >= 2 else NAN


def _fixed_share(r: Row) -> float:
    """F / (F + T): how much of a generation's time the prefill takes, in plain steps."""
    cost = r.c.evidence.cost
    if cost is None or cost.output_tokens <= 0:
        return NAN
    return cost.fixed_steps / (cost.fixed_steps + cost.output_tokens)


def _ctx(get: Callable[[Any], float], default: float = NAN) -> Callable[[Row], float]:
    """A column read off the roofline context, ``default`` without one."""
    return lambda r: get(r.c.ctx) if r.c.ctx is not None else default


def _cost(name: str) -> Callable[[Row], float]:
    """A column read off the measured step costs, NaN without them."""
    return lambda r: float(getattr(r.c.evidence.cost, name)) if r.c.evidence.cost is not None else NAN


ENCODING: tuple[tuple[str, Callable[[Row], float]], ...] = (
    ("log_base_speedup", lambda r: math.log(max(r.speedup, 1e-9))),  # column 0: the estimator's base
    ("log_expected_length", lambda r: math.log(r.length)),
    ("log_step_ratio", lambda r: math.log(r.ratio)),
    ("needs_draft_model", lambda r: float(r.c.caps.needs_draft_model)),
    ("needs_hidden_states", lambda r: float(r.c.caps.needs_hidden_states)),
    ("trainable_heads", lambda r: float(r.c.caps.trainable_heads)),
    ("tree_capable", lambda r: float(r.c.caps.tree)),
    ("deterministic_draft", lambda r: float(r.c.caps.deterministic_draft)),
    *((f"cost_{k}", lambda r, k=k: float(r.c.caps.draft_cost == k)) for k in DRAFT_COST_KINDS),
    ("depth", lambda r: float(r.c.depth)),
    ("topk", lambda r: float(r.c.topk)),
    ("verified_tokens", lambda r: float(r.c.nodes + 1)),
    ("is_tree", lambda r: float(r.c.is_tree)),
    ("temperature", lambda r: float(r.c.temperature)),
    ("log2_batch", lambda r: math.log2(max(r.c.batch, 1))),
    ("log2_context", lambda r: math.log2(max(r.c.context_len, 1))),
    *((f"task_{t}", lambda r, t=t: float(r.c.task == t)) for t in TASK_TYPES),
    ("log_bandwidth", _ctx(lambda ctx: math.log(ctx.hardware.memory_bandwidth_gbps))),
    ("log_tflops", _ctx(lambda ctx: math.log(ctx.hardware.bf16_tflops))),
    ("log_params", _ctx(lambda ctx: math.log(ctx.target.params))),
    ("draft_fraction", _ctx(lambda ctx: ctx.draft.params / ctx.target.params if ctx.draft else 0.0, 0.0)),
    ("alpha", lambda r: r.c.evidence.alpha),
    ("alpha_range", lambda r: r.c.evidence.alpha_high - r.c.evidence.alpha_low),
    ("alpha_measured", lambda r: float(r.c.evidence.source == "measured")),
    ("position_trend", _trend),
    ("draft_unit", _cost("draft_unit")),
    ("draft_share", _cost("draft_share")),
    ("nodes_per_token", _cost("nodes_per_token")),
    ("fixed_share", _fixed_share),
    ("cost_measured", lambda r: float(r.c.evidence.cost is not None)),
)

FEATURES: tuple[str, ...] = tuple(name for name, _ in ENCODING)


def feature_row(c: Candidate, ratio: float | None = None) -> list[float]:
    """The numeric row of one candidate, in :data:`FEATURES` order (NaN where unknown).

    ``ratio`` is :func:`~policies.speedup_model.step_ratio` when the caller has it cached.
    """
    row = Row.of(c, ratio)
    return [column(row) for _, column in ENCODING]


def feature_matrix(candidates: Sequence[Candidate], ratios: Sequence[float | None] | None = None) -> Any:
    """``(len(candidates), len(FEATURES))`` float array (imports numpy: not on the default path)."""
    import numpy as np

    rs = ratios if ratios is not None else [None] * len(candidates)
    return np.asarray([feature_row(c, r) for c, r in zip(candidates, rs)], dtype=float).reshape(-1, len(FEATURES))

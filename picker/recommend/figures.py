"""One rounding rule, and the plan's numbers as every rendering writes them.

A predicted number is computed once, stored in the Recommendation rounded to :data:`DIGITS`
decimals (:func:`rounded`), and written with two decimals from that stored value (:func:`times`,
:func:`fraction`) -- the markdown plan, the report page, ``--explain`` and the rationale's prose
alike, so no rendering can round its way to another number. The headline and the batch schedule's
columns are defined here once (:func:`headline`, :data:`SCHEDULE_COLUMNS`); a new predicted column
(a latency per batch range, say) is one more entry, and every table that shows the schedule shows it.

    >>> rounded(0.0949), times(2.6449), fraction(0.0949)
    (0.095, '2.65x', '0.10')
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from picker.recommend.contract import BatchRange, Recommendation
from picker.recommend.uncertainty import ENABLE_LOW

DIGITS = 3


def rounded(x: float) -> float:
    """The value stored in the Recommendation (and printed by JSON and YAML)."""
    return round(x, DIGITS)


def times(x: float) -> str:
    """A speedup as written in text: two decimals of the stored value, and an x."""
    return f"{rounded(x):.2f}x"


def fraction(x: float) -> str:
    """An acceptance rate or a step ratio as written in text: two decimals of the stored value."""
    return f"{rounded(x):.2f}"


@dataclass(frozen=True)
class Headline:
    """The plan's headline numbers as text: what markdown, the page and ``--explain`` all print."""

    speedup: str
    low: str
    high: str
    break_even_alpha: str
    accept_length: str
    typical_batch: int


def headline(rec: Recommendation) -> Headline:
    ps = rec.predicted_speedup
    return Headline(times(ps.mean), times(ps.low), times(ps.high), fraction(rec.break_even_alpha),
                    fraction(rec.break_even_accept_length), rec.typical_batch)


def _batches(r: BatchRange) -> str:
    return f"{r.min_batch}–{'∞' if r.max_batch is None else r.max_batch}"


def _draft_tokens(r: BatchRange) -> str:
    k = "off" if r.num_speculative_tokens == 0 else str(r.num_speculative_tokens)
    if r.disable_above_temperature is not None:
        k += f" (off above T = {r.disable_above_temperature:g})"
    return k


def _speedup(r: BatchRange) -> str:
    span = times(r.predicted_speedup) if r.predicted_speedup == r.predicted_speedup_at_max_batch else \
        f"{times(r.predicted_speedup)} → {times(r.predicted_speedup_at_max_batch)}"
    return span


def _break_even(r: BatchRange) -> str:
    if r.break_even_alpha is None:
        return "—"
    return f"{fraction(r.break_even_alpha)} (batch {r.break_even_at_batch})"


def _step_cost(r: BatchRange) -> str:
    return "measured under load" if r.step_cost == "measured" else "cost model"


# (header, cell) for every column of the batch schedule, in order. Headers stay short so the table
# fits 80 columns; SCHEDULE_NOTE, printed under it, says what each column holds.
SCHEDULE_COLUMNS: tuple[tuple[str, Callable[[BatchRange], str]], ...] = (
    ("batch size", _batches),
    ("draft tokens", _draft_tokens),
    ("speedup", _speedup),
    ("break-even α", _break_even),
    ("step cost", _step_cost),
)
SCHEDULE_NOTE = ("speedup: the predicted speedup at that batch over the task mix and temperatures, at the "
                 "range's first → last batch on the grid (1, 2, 4, ..., 512); break-even α: at the batch named. "
                 "step cost: where the step's time comes from (the cost model, or measured under load).")


def _uncertain(rec: Recommendation) -> list[BatchRange]:
    return [r for r in rec.decision.batch_schedule if r.uncertain and r.predicted_speedup_range is not None]


def schedule_rows(rec: Recommendation) -> list[list[str]]:
    """The batch schedule as text cells, one list per range, in :data:`SCHEDULE_COLUMNS` order; an
    uncertain range's speedup carries the number of its note (:func:`schedule_notes`)."""
    marks = {id(r): i for i, r in enumerate(_uncertain(rec), 1)}
    rows = []
    for r in rec.decision.batch_schedule:
        cells = [cell(r) for _, cell in SCHEDULE_COLUMNS]
        if id(r) in marks:
            cells[2] += f" ({marks[id(r)]})"
        rows.append(cells)
    return rows


def schedule_footnotes(rec: Recommendation) -> list[str]:
    """What goes under the schedule table: the uncertain ranges' notes, then what the columns hold."""
    return [*schedule_notes(rec), SCHEDULE_NOTE]


def schedule_notes(rec: Recommendation) -> list[str]:
    """One note per uncertain range, numbered as :func:`schedule_rows` marks them, with the
    command that would decide it where the decision names one."""
    out = []
    for i, r in enumerate(_uncertain(rec), 1):
        lo, hi = r.predicted_speedup_range or (0.0, 0.0)
        cmd = r.measure
        what = "so speculation is off there" if not r.num_speculative_tokens else \
            "so this range lies above the concurrency to keep"
        how = f": `{cmd}`" if cmd else " before relying on it"
        out.append(f"({i}) uncertain: the predicted range {times(lo)}–{times(hi)} does not clear "
                   f"{times(ENABLE_LOW)}, {what}; to decide it, measure at batch {r.min_batch}{how}.")
    return out

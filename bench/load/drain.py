"""What a profile's gain at concurrency C measures: a static wave's drain against a server that refills.

    $ python -m bench.load.drain --static RUN1 --refill RUNR

``RUN1`` is a ``specpick profile ... --concurrency ...`` folder measured with one round per wave
(``--wave-rounds 1``: C prompts served together, the wave over when its slowest request is), ``RUNR``
the same command with ``--wave-rounds R`` (C x R prompts per wave, C in flight until the queue is
empty, as a continuous-batching server keeps it). At C > 1 a static wave drains: its requests finish
at different steps (speculation's steps vary by request, plain decoding's with forced lengths do
not) and the rows left running do the last steps alone, which no loaded server does. Per cell at
every C > 1 both runs hold, printed:

- ``span``: ``throughput_gain_vs_plain``, tokens over the waves' wall clock against plain's;
- ``per-request``: ``speedup_vs_plain``, tokens over the sum of request latencies against plain's.
  With C requests always in flight, Little's law makes C x tokens / sum of latencies the
  throughput, so at equal C this ratio is the throughput gain a closed loop would see, without
  the drain's idle rows (its one bias: a request of a static wave that outlives the others runs its
  last steps in a smaller batch, so its latency is a little short).

and for each estimator its median |log ratio| to the refilled run's span gain (the closest of these
to a steady server, the drain weighing about 1/R). The two runs' prompt sets differ unless their
``--limit-per-task`` match (the builtin tasks keep the same first prompts), so the cross-run column
carries prompt-sampling noise as well; the refilled run's own per-request column does not.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from picker.profiler.load_check import wave_rounds

ESTIMATORS = ("throughput_gain_vs_plain", "speedup_vs_plain")


def cells(run: Path) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Speculative cells at C > 1 of a run's summary, by (task, T, strategy, N, tree, C)."""
    summary = json.loads((run / "summary.json").read_text())
    return {(c["task"], c["temperature"], c["strategy"], c["num_draft_tokens"], c["tree"], c["concurrency"]): c
            for c in summary["cells"] if c.get("concurrency", 1) > 1}


def compare(static: dict[tuple[Any, ...], dict[str, Any]], refill: dict[tuple[Any, ...], dict[str, Any]]
            ) -> list[dict[str, Any]]:
    """One row per cell both runs hold: the four gains (None where a run lacks one)."""
    rows = []
    for key in sorted(set(static) & set(refill), key=str):
        s, r = static[key], refill[key]
        rows.append({"key": key, "static_span": s.get(ESTIMATORS[0]), "static_request": s.get(ESTIMATORS[1]),
                     "refill_span": r.get(ESTIMATORS[0]), "refill_request": r.get(ESTIMATORS[1])})
    return rows


def log_error(rows: Sequence[dict[str, Any]], column: str, level: int | None = None) -> tuple[float, float, int]:
    """(median |log(column / refill_span)|, median signed log ratio, points) over rows at ``level``."""
    logs = [math.log(r[column] / r["refill_span"]) for r in rows
            if r[column] and r["refill_span"] and (level is None or r["key"][5] == level)]
    if not logs:
        return math.nan, math.nan, 0
    return statistics.median(abs(x) for x in logs), statistics.median(logs), len(logs)


def crossings(rows: Sequence[dict[str, Any]], column: str) -> int:
    """Cells on the other side of 1 from the refilled span gain (a wrong on/off call at that C)."""
    return sum(1 for r in rows if r[column] and r["refill_span"] and (r[column] > 1) != (r["refill_span"] > 1))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--static", type=Path, required=True, help="profile run with --wave-rounds 1")
    ap.add_argument("--refill", type=Path, required=True, help="the same profile with --wave-rounds R > 1")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    r1, rr = wave_rounds(args.static), wave_rounds(args.refill)
    rows = compare(cells(args.static), cells(args.refill))
    print(f"static: {args.static} ({r1} round per wave); refill: {args.refill} ({rr} rounds per wave)\n")
    print("| cell | C | static span | static per-request | refill span | refill per-request |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        task, temp, strategy, n, tree, c = r["key"]
        vals = " | ".join("-" if r[k] is None else f"{r[k]:.2f}"
                          for k in ("static_span", "static_request", "refill_span", "refill_request"))
        print(f"| {task} T={temp:g} {strategy} N={n}{'' if tree is None else ' ' + tree} | {c} | {vals} |")
    levels = sorted({r["key"][5] for r in rows})
    print("\n| estimator, against the refilled span gain | " + " | ".join(f"C={c}" for c in levels)
          + " | all | on the other side of 1 |")
    print("|---|" + "---|" * (len(levels) + 2))
    for column in ("static_span", "static_request", "refill_request"):
        parts = []
        for level in (*levels, None):
            med, signed, n = log_error(rows, column, level)
            parts.append(f"{math.expm1(med):.1%} (bias {math.expm1(signed):+.1%}, n={n})")
        print(f"| {column.replace('_', ' ')} | " + " | ".join(parts) + f" | {crossings(rows, column)} |")
    if args.json:
        args.json.write_text(json.dumps([{**r, "key": list(r["key"])} for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

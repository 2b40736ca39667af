"""How a profile's draft phase grows with concurrency: per strategy, the draft seconds of one
batched step (each record's ``draft_s`` over its ``steps``, pooled per cell) and its growth per
added sequence between the smallest and largest level. The load curve prices that growth with a
draft forward's FLOPs and bytes plus the host terms; this reads what the loop actually paid.

    python -m bench.load.draft_phase --run RUN [--run RUN ...]
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from picker.profiler.records import read_records


def draft_per_step(run: Path) -> dict[tuple[float, str], dict[int, float]]:
    """{(temperature, strategy): {concurrency: draft seconds per batched step}} from ``records.jsonl``.

    A record's ``draft_s`` and ``steps`` are its wave's (every request in a wave shares its steps),
    so pooling sums over a cell's records gives the wave-weighted mean step."""
    records, _, _, _ = read_records(run / "records.jsonl")
    sums: dict[tuple[float, str], dict[int, list[float]]] = defaultdict(lambda: defaultdict(lambda: [0.0, 0.0]))
    for rec in records:
        if rec.steps:
            acc = sums[(rec.cell.temperature, rec.cell.strategy)][rec.cell.concurrency]
            acc[0] += rec.draft_s
            acc[1] += rec.steps
    return {key: {c: s / n for c, (s, n) in sorted(levels.items())} for key, levels in sums.items()}


def growth_per_sequence(levels: dict[int, float]) -> float | None:
    """Seconds the draft phase of one step adds per sequence, smallest to largest level."""
    if len(levels) < 2:
        return None
    lo, hi = min(levels), max(levels)
    return (levels[hi] - levels[lo]) / (hi - lo)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", action="append", required=True, type=Path, help="profile run folder (repeatable)")
    args = ap.parse_args(argv)
    print("| T | strategy | draft ms per step at each level | growth per added sequence |")
    print("|---|---|---|---|")
    for run in args.run:
        for (temperature, strategy), levels in sorted(draft_per_step(run).items()):
            growth = growth_per_sequence(levels)
            if strategy == "plain" or growth is None:
                continue
            cells = ", ".join(f"C={c}: {1e3 * s:.2f}" for c, s in levels.items())
            print(f"| {temperature:g} | {strategy} | {cells} | {1e6 * growth:.0f} us |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

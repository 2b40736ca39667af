"""The noise floor of the crossover goal: one measured load curve "predicting" a repeat of itself.

    $ python -m bench.load.replicate --run RUN_A --run RUN_B [--raw] [--json out.json]

``RUN_A`` and ``RUN_B`` are two runs of the same ``specpick profile ... --concurrency 1,2,4,8,16``
command (the same prompts, the same machine, one after the other). Each curve of ``RUN_B`` is
scored as a prediction of the same curve in ``RUN_A`` exactly as ``bench.load.measured`` scores the
load curve: anchored at the smallest level (``RUN_B``'s curve scaled so its first point equals
``RUN_A``'s, the one thing the model takes from the measurement), then the median |error| over the
other points, the crossovers within one grid step, and the crossings "predicted" where ``RUN_A``
measured none. Both directions are printed (A from B, B from A). ``--raw`` drops the anchoring.

What it answers: how well can *any* model do on this goal on this machine? A perfect model of the
engine's shape is at best as good as a second measurement of it; where two back-to-back runs of one
command disagree on a crossover, no cost model can be right on both. A model whose scores match
this floor is limited by the measurements, not by its shape.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.load.measured import CurveCheck, curve_label, print_checks
from picker.profiler.load import crossover

Key = tuple[Any, ...]


def curves(run: Path) -> dict[Key, list[tuple[int, float]]]:
    """A profile run's measured load curves (two or more levels), by (task, T, strategy, N, tree)."""
    summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    return {(e["task"], e["temperature"], e["strategy"], e["num_draft_tokens"], e.get("tree")):
            [(int(c), float(g)) for c, g in e["gain"]] for e in summary.get("load", []) if len(e["gain"]) > 1}


def check(key: Key, measured: Sequence[tuple[int, float]], other: Sequence[tuple[int, float]],
          anchor: bool = True) -> CurveCheck | None:
    """``other`` as a prediction of ``measured`` on the levels both hold; None below two levels.

    >>> c = check(("chat", 0.0, "ngram", 4, None), [(1, 1.2), (4, 1.1), (16, 0.9)], [(1, 1.0), (4, 0.9), (16, 0.8)])
    >>> [round(p, 3) for p in c.predicted], c.measured_crossover, c.predicted_crossover
    ([1.2, 1.08, 0.96], 8.0, 10.08)
    """
    theirs = dict(other)
    pts = [(c, g) for c, g in measured if c in theirs]
    if len(pts) < 2:
        return None
    scale = pts[0][1] / theirs[pts[0][0]] if anchor else 1.0
    predicted = [(c, theirs[c] * scale) for c, _ in pts]
    return CurveCheck(curve_label(*key), tuple(c for c, _ in pts), tuple(g for _, g in pts), tuple(p for _, p in predicted),
                      crossover(pts), crossover(predicted))


def compare(a: dict[Key, list[tuple[int, float]]], b: dict[Key, list[tuple[int, float]]],
            anchor: bool = True) -> list[CurveCheck]:
    """Every curve both runs hold, ``b``'s as the prediction of ``a``'s."""
    out = [check(k, a[k], b[k], anchor) for k in sorted(set(a) & set(b), key=str)]
    return [c for c in out if c is not None]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", action="append", type=Path, required=True, help="two runs of one profile command")
    ap.add_argument("--raw", action="store_true", help="no anchoring at the smallest level")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if len(args.run) != 2:
        ap.error("--run takes exactly two runs")
    a, b = (curves(r) for r in args.run)
    out = {}
    for name, (x, y) in {"A from B": (a, b), "B from A": (b, a)}.items():
        print(f"\n## {name} ({'raw' if args.raw else 'anchored at the smallest level'})\n")
        checks = compare(x, y, anchor=not args.raw)
        print_checks(checks)
        out[name] = [c.as_json() for c in checks]
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""How much the regret figures move with the cheap profile's own prompt draw.

A cheap profile measures a few prompts per workload; which prompts it drew (``--seed``) moves its
acceptance estimates, and with them the policy's errors and choices. One regret run reports one
draw. This table sets several regret runs side by side -- the same sweep, profiles of one shape
drawn with different seeds -- and gives each figure's median and range over the draws, per profile
shape, so that two shapes (or two model versions) are compared on more than one draw.

    $ python -m bench.regret.replicates --run "3x48=runs/rep/regret-p3x48-s1" --run "3x48=runs/rep/regret-p3x48-s2" \
          --run "6x24=runs/rep/regret-p6x24-s1" ...

Grid figures only (the sweep's measured speedups, 8 prompts per cell): the policy's choice against
the sweep's best is biased low here by the winner's curse (``confirm.py`` re-measures finalists).
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

FIGURES = (
    ("median_rel_error", "median error", "{:.1%}"),
    ("median_rel_error_analytic", "analytic alone", "{:.1%}"),
    ("coverage", "coverage", "{:.0%}"),
    ("policy_vs_sweep_best_median", "policy / best, median", "{:.2f}"),
    ("policy_vs_sweep_best_min", "policy / best, min", "{:.2f}"),
    ("share_097", "workloads >= 0.97", "{:.0%}"),
    ("cost_forwards_ratio", "cost (forwards)", "{:.3f}"),
)


def figures(regret: dict[str, Any], split: str) -> dict[str, float]:
    """One regret run's summary for ``split`` (loto / temp), plus the share of workloads at >= 0.97."""
    out = {k: float(v) for k, v in regret["summary"][split].items() if isinstance(v, (int, float))}
    ratios = []
    for row in regret["rows"]:
        if not row["split"].startswith(split):
            continue
        pol, best = row["configs"]["policy"]["sweep_speedup"], row["configs"]["sweep best"]["sweep_speedup"]
        if pol and best:
            ratios.append(pol / best)
    out["share_097"] = sum(r >= 0.97 for r in ratios) / len(ratios) if ratios else float("nan")
    return out


def table(runs: list[tuple[str, dict[str, Any]]], split: str) -> str:
    by_shape: dict[str, list[dict[str, float]]] = defaultdict(list)
    for shape, regret in runs:
        by_shape[shape].append(figures(regret, split))
    head = "| profile | draws | " + " | ".join(label for _, label, _ in FIGURES) + " |"
    lines = [head, "|" + "---|" * (len(FIGURES) + 2)]
    for shape, rows in by_shape.items():
        cells = []
        for key, _, fmt in FIGURES:
            values = sorted(r[key] for r in rows if key in r)
            if not values:
                cells.append("-")
                continue
            med = fmt.format(statistics.median(values))
            cells.append(med if len(values) == 1 else f"{med} ({fmt.format(values[0])}-{fmt.format(values[-1])})")
        lines.append(f"| {shape} | {len(rows)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", action="append", required=True,
                    help="SHAPE=FOLDER: a regret.py output folder and the profile shape it used (repeatable)")
    args = ap.parse_args()
    runs = []
    for item in args.run:
        shape, _, folder = item.partition("=")
        if not folder:
            raise SystemExit(f"error: --run {item!r}: expected SHAPE=FOLDER")
        path = Path(folder) / "regret.json"
        if not path.exists():
            raise SystemExit(f"error: --run {item!r}: no {path}")
        runs.append((shape, json.loads(path.read_text())))
    for split, title in (("loto", "leave-one-task-out"), ("temp", "held-out temperature")):
        print(f"\n{title}: median over draws (min-max)\n")
        print(table(runs, split))


if __name__ == "__main__":
    main()

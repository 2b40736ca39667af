"""How much the regret figures move with the cheap profile's own prompt draw.

A cheap profile measures a few prompts per workload; which prompts it drew (``--seed``) moves its
acceptance estimates, and with them the policy's errors and choices. One regret run reports one
draw. This table sets several regret runs side by side -- the same sweep, profiles of one shape
drawn with different seeds -- and gives each figure's median and range over the draws, per profile
shape, so that two shapes (or two model versions) are compared on more than one draw.

    $ python -m bench.regret.replicates --run "3x48=runs/rep/regret-p3x48-s1" --run "3x48=runs/rep/regret-p3x48-s2" \
          --run "adaptive=runs/rep/regret-adapt6x32-s1:runs/rep/confirm-adapt6x32-s1" ...

Grid figures come from the sweep's measured speedups (8 prompts per cell): there the policy's
choice against the sweep's best is biased low by the winner's curse. Where a run names its
confirmation folder (``REGRET:CONFIRM``), the confirmed figures (``report.py``'s goals) are added.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.regret import report

CONFIRMED = (
    ("c_ratio_median", "confirmed policy / best, median", "{:.2f}"),
    ("c_ratio_min", "confirmed min", "{:.2f}"),
    ("c_share_097", "confirmed >= 0.97", "{:.0%}"),
    ("c_error", "error, confirmed finalists", "{:.1%}"),
    ("c_vs_default", "vs best default, median", "{:.2f}"),
)
FIGURES = (
    ("median_rel_error", "median error", "{:.1%}"),
    ("median_rel_error_analytic", "analytic alone", "{:.1%}"),
    ("coverage", "coverage", "{:.0%}"),
    ("policy_vs_sweep_best_median", "policy / best, median", "{:.2f}"),
    ("policy_vs_sweep_best_min", "policy / best, min", "{:.2f}"),
    ("share_097", "workloads >= 0.97", "{:.0%}"),
    ("cost_forwards_ratio", "cost (forwards)", "{:.3f}"),
)


def figures(regret: dict[str, Any], split: str, confirm: dict[str, Any] | None = None) -> dict[str, float]:
    """One regret run's summary for ``split`` (loto / temp), plus the share of workloads at >= 0.97;
    with ``confirm``, the confirmation run's goals too."""
    out = {k: float(v) for k, v in regret["summary"][split].items() if isinstance(v, (int, float))}
    if confirm:
        goals = report.table([r for r in regret["rows"] if r["split"].startswith(split)], confirm)[1]
        ratio, best_default = goals["policy_vs_sweep_best"], goals["policy_vs_best_default"]
        found = {"c_ratio_median": ratio["median"], "c_ratio_min": ratio["min"],
                 "c_share_097": ratio["share_at_least_0.97"],
                 "c_error": goals["prediction_on_confirmed"]["median_rel_error"],
                 "c_vs_default": best_default["median"]}
        out.update({k: float(v) for k, v in found.items() if v is not None})
    ratios = []
    for row in regret["rows"]:
        if not row["split"].startswith(split):
            continue
        pol, best = row["configs"]["policy"]["sweep_speedup"], row["configs"]["sweep best"]["sweep_speedup"]
        if pol and best:
            ratios.append(pol / best)
    out["share_097"] = sum(r >= 0.97 for r in ratios) / len(ratios) if ratios else float("nan")
    return out


Run = tuple[str, dict[str, Any], dict[str, Any] | None]  # shape, regret.json, confirm.json


def table(runs: list[Run], split: str) -> str:
    by_shape: dict[str, list[dict[str, float]]] = defaultdict(list)
    for shape, regret, confirm in runs:
        by_shape[shape].append(figures(regret, split, confirm))
    shown = FIGURES + (CONFIRMED if any(confirm for _, _, confirm in runs) else ())
    head = "| profile | draws | " + " | ".join(label for _, label, _ in shown) + " |"
    lines = [head, "|" + "---|" * (len(shown) + 2)]
    for shape, rows in by_shape.items():
        cells = []
        for key, _, fmt in shown:
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
                    help="SHAPE=FOLDER[:CONFIRM]: a regret.py output folder, the profile shape it used, and "
                         "optionally its confirm.py folder (repeatable)")
    args = ap.parse_args()
    runs: list[Run] = []
    for item in args.run:
        shape, _, folders = item.partition("=")
        folder, _, confirmed = folders.partition(":")
        if not folder:
            raise SystemExit(f"error: --run {item!r}: expected SHAPE=FOLDER[:CONFIRM]")
        paths = [Path(folder) / "regret.json"] + ([Path(confirmed) / "confirm.json"] if confirmed else [])
        missing = [p for p in paths if not p.exists()]
        if missing:
            raise SystemExit(f"error: --run {item!r}: no {missing[0]}")
        loaded = [json.loads(p.read_text()) for p in paths]
        runs.append((shape, loaded[0], loaded[1] if confirmed else None))
    for split, title in (("loto", "leave-one-task-out"), ("temp", "held-out temperature")):
        print(f"\n{title}: median over draws (min-max)\n")
        print(table(runs, split))


if __name__ == "__main__":
    main()

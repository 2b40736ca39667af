"""The regret table: per held-out workload, measured speedups of the policy, the sweep's best, the
best-on-average configuration and the engine defaults, and the goals.

    $ python -m bench.regret.report --regret runs/regret/regret.json --confirm runs/confirm/confirm.json

Two sources of "measured": the sweep itself (every grid point, 8 prompts) and the confirmation run
(finalists re-measured on fresh prompts, interleaved, median over passes). The goals are judged on
the confirmation run where it exists; the sweep's numbers are shown beside them.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

DEFAULTS = ("vllm ngram N=5", "sglang (3,1,4)", "sglang (5,4,8)", "hf constant", "hf heuristic")


def _confirmed(confirm: dict[str, Any], row: dict[str, Any], name: str) -> float | None:
    label = row["configs"][name]["label"]
    entry = confirm.get(row["workload"], {}).get(label if label != "plain" else "plain")
    return entry["speedup"] if entry else (1.0 if label == "plain" else None)


def prediction_on_confirmed(rows: list[dict[str, Any]], confirm: dict[str, Any]) -> dict[str, Any]:
    """Predicted (mean, range) against the confirmation run's re-measurement, for every finalist the
    policy predicted (grid cells: policy, analytic, sweep best, best on average, defaults in the
    grid) and for the policy's own choice. Finalists are not a random sample of the grid: they lean
    to the top of both the predicted and the swept speedups."""
    err, cover, own_err, own_cover = [], [], [], []
    for r in rows:
        cells = {c["config"]: c for c in r["cells"]}
        seen = set()
        for name, cfg in r["configs"].items():
            c, measured = cells.get(cfg["label"]), _confirmed(confirm, r, name)
            if c is None or not measured or cfg["label"] in seen:
                continue
            seen.add(cfg["label"])
            e, inside = abs(c["predicted"] - measured) / measured, c["low"] <= measured <= c["high"]
            err.append(e)
            cover.append(inside)
            if name == "policy":
                own_err.append(e)
                own_cover.append(inside)
    return {"cells": len(err), "median_rel_error": _median(err), "coverage": _share(cover),
            "policy_choice": {"workloads": len(own_err), "median_rel_error": _median(own_err),
                              "coverage": _share(own_cover)}}


def _median(v: list[float]) -> float | None:
    return statistics.median(v) if v else None


def _share(v: list[bool]) -> float | None:
    return sum(v) / len(v) if v else None


def _fmt(v: float | None) -> str:
    return f"{v:.2f}" if v else "n/a"


def table(rows: list[dict[str, Any]], confirm: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    head = ("| split | workload | policy choice | policy | sweep best (config) | sweep best | ratio | "
            "analytic only | best on avg | " + " | ".join(DEFAULTS) + " | policy / best default | profiling cost |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    ratios, vs_default, vs_each, analytic_ratios = [], [], {d: [] for d in DEFAULTS}, []
    for r in rows:
        c = r["configs"]
        pol = _confirmed(confirm, r, "policy")
        best = _confirmed(confirm, r, "sweep best")
        avg = _confirmed(confirm, r, "best on average")
        analytic = _confirmed(confirm, r, "analytic")
        defaults = {d: _confirmed(confirm, r, d) if d in c else None for d in DEFAULTS}
        measured_defaults = [v for v in defaults.values() if v]
        ratio = pol / best if pol and best else None
        if ratio:
            ratios.append(ratio)
        if analytic and best:
            analytic_ratios.append(analytic / best)
        if pol and measured_defaults:
            vs_default.append(pol / max(measured_defaults))
        for d, v in defaults.items():
            if pol and v:
                vs_each[d].append(pol / v)
        cost = r["cost"]["policy"]["forwards"] / r["cost"]["sweep"]["forwards"]
        lines.append(
            f"| {r['split']} | {r['workload']} | {c['policy']['label']} | {_fmt(pol)} "
            f"(sweep {_fmt(c['policy']['sweep_speedup'])}) | {c['sweep best']['label']} | {_fmt(best)} "
            f"(sweep {_fmt(c['sweep best']['sweep_speedup'])}) | {_fmt(ratio)} | {_fmt(analytic)} | {_fmt(avg)} | "
            + " | ".join(_fmt(defaults[d]) for d in DEFAULTS)
            + f" | {_fmt(pol / max(measured_defaults) if pol and measured_defaults else None)} | {cost:.3f} |")
    goals = {
        "prediction_on_confirmed": prediction_on_confirmed(rows, confirm),
        "policy_vs_sweep_best": {"median": statistics.median(ratios) if ratios else None,
                                 "min": min(ratios) if ratios else None,
                                 "share_at_least_0.97": _share([x >= 0.97 for x in ratios])},
        "analytic_only_vs_sweep_best": {"median": statistics.median(analytic_ratios) if analytic_ratios else None,
                                        "min": min(analytic_ratios) if analytic_ratios else None},
        "policy_vs_best_default": {"median": statistics.median(vs_default) if vs_default else None,
                                   "min": min(vs_default) if vs_default else None},
        "policy_vs_each_default_median": {d: statistics.median(v) if v else None for d, v in vs_each.items()},
    }
    return "\n".join(lines), goals


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--regret", type=Path, required=True)
    ap.add_argument("--confirm", type=Path, default=None)
    args = ap.parse_args()
    regret = json.loads(args.regret.read_text())
    confirm = json.loads(args.confirm.read_text()) if args.confirm else {}
    for split in ("loto", "temp"):
        rows = [r for r in regret["rows"] if r["split"].startswith(split)]
        if not rows:
            continue
        text, goals = table(rows, confirm)
        print(f"\n### {split}\n\n{text}\n")
        print("prediction (sweep cells):", json.dumps(regret["summary"][split], indent=1))
        print("goals (confirmation run):", json.dumps(goals, indent=1))


if __name__ == "__main__":
    main()

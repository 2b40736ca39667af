"""Regret of the policy against the exhaustive sweep on held-out zoo workloads.

    $ python -m bench.regret.regret --sweep runs/sweep-a --out runs/regret
    $ python -m bench.regret.confirm --regret runs/regret/regret.json --out runs/confirm
    $ python -m bench.regret.report --regret runs/regret/regret.json --confirm runs/confirm
    $ specpick policy fit --sweep runs/sweep-a --held-out runs/regret/regret.json --out policy.json

Splits: leave-one-task-out (fit on the other task types, both temperatures; test on the held-out
task at each temperature) and held-out temperature (fit at one temperature, test at the other).
For every test workload: the policy's choice (``recommend`` with the fitted estimator and the
workload's cheap profile) and the analytic model's (no estimator), the sweep's best, the single
configuration best on average over the training workloads and the engine defaults; the measured
speedup of each from the sweep where the sweep measured it; the prediction error and range coverage
over every grid cell; the profiling cost of the policy against the sweep's.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path
from typing import Any

from threadpoolctl import threadpool_limits

from bench.regret.policy import choice_of, predict_grid, read_back, recommended
from picker.recommend.policy_fit import FitInputs, Prepared, draft_kinds, fit, fit_artifact, prepare
from picker.recommend.sweep_data import (
    GridKey,
    SweepData,
    cost_of,
    load_profile_records,
    load_sweeps,
    probe_records,
)

# Engine defaults (research/policies.md §6; FACTS.md). SGLang's (steps, topk, draft tokens) apply to
# its EAGLE family: with no EAGLE head they are mapped onto STANDALONE (the draft model), which
# takes the same flags; (5, 4, 8) needs a tree drafter and is skipped without one.
VLLM_NGRAM = GridKey("ngram", 5)
HF_CONSTANT = GridKey("hf-constant", 20)    # num_assistant_tokens 20, confidence threshold 0.4
HF_HEURISTIC = GridKey("hf-heuristic", 20)  # +2 on full acceptance, -1 otherwise, threshold 0.4


def sglang_defaults(strategies: set[str]) -> dict[str, GridKey]:
    if "eagle3" in strategies:
        return {"sglang (3,1,4)": GridKey("eagle3", 3),
                "sglang (5,4,8)": GridKey("eagle3", 7, "depth=5,topk=4,tokens=8")}
    return {"sglang (3,1,4)": GridKey("vanilla", 3)}


def splits(keys: list[tuple[str, float]]) -> list[tuple[str, list, list]]:
    tasks = sorted({t for t, _ in keys})
    temps = sorted({T for _, T in keys})
    out = [(f"loto:{t}", [k for k in keys if k[0] != t], [k for k in keys if k[0] == t]) for t in tasks]
    if len(temps) > 1:
        out += [(f"temp:{T:g}", [k for k in keys if k[1] != T], [k for k in keys if k[1] == T]) for T in temps]
    return out


def best_on_average(train: list[Prepared]) -> GridKey:
    """The grid configuration with the best geometric-mean measured speedup over training workloads."""
    common = set.intersection(*(set(p.workload.truth) for p in train))
    return max(common, key=lambda g: sum(math.log(p.workload.truth[g]) for p in train))


def evaluate(p: Prepared, data: SweepData, est: Any, train: list[Prepared]) -> dict[str, Any]:
    """Choices, predictions and costs for one held-out workload.

    The verify-time curve is measured once per model and machine and serves every workload of the
    deployment: both the policy and the sweep are charged its cost divided by the workloads.
    """
    w = p.workload
    truth = {**w.truth, GridKey("plain", 0): 1.0}
    result, analytic = recommended(p, data, est), recommended(p, data, None)
    (choice, predicted), (a_choice, a_pred) = choice_of(p, result), choice_of(p, analytic)
    rec = result.recommendation
    best = max(truth, key=lambda g: truth[g])
    strategies = {g.strategy for g in w.truth}
    configs = {"policy": choice, "analytic": a_choice, "sweep best": best, "best on average": best_on_average(train),
               "vllm ngram N=5": VLLM_NGRAM, **sglang_defaults(strategies),
               "hf constant": HF_CONSTANT, "hf heuristic": HF_HEURISTIC}
    preds = predict_grid(p, result)
    base = predict_grid(p, analytic)
    cells = [{"config": g.label, "measured": w.truth[g], "predicted": m, "low": lo, "high": hi,
              "analytic": base[g][0]} for g, (m, lo, hi) in preds.items()]
    sweep_recs = w.records
    # Deployment-level measurements (the verify curve; the policy's drafter probe) are shared by the
    # workloads: each is charged its share.
    curve_share = {k: v / len(data.workloads) for k, v in data.curve_cost.items()}
    probe_share = {k: v / len(data.workloads) for k, v in cost_of(p.probe_records).items()}
    return {
        "workload": w.name, "task": w.task, "temperature": w.temperature,
        "configs": {name: {"strategy": g.strategy, "n": g.n, "tree": g.tree, "label": g.label,
                           "sweep_speedup": truth.get(g)} for name, g in configs.items()},
        "policy_predicted": predicted, "analytic_predicted": a_pred,
        "policy_evidence": rec.evidence.source,
        "cells": cells, "evidence_read_back": read_back(p, data),
        "cost": {"policy": _plus(_plus(cost_of(p.profile_records), curve_share), probe_share),
                 "sweep": _plus(cost_of(sweep_recs), curve_share)},
    }


def _plus(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    return {k: a[k] + b[k] for k in a}


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Goal metrics over held-out workloads, from the sweep's measurements."""
    ratio = [r["configs"]["policy"]["sweep_speedup"] / r["configs"]["sweep best"]["sweep_speedup"]
             for r in rows if r["configs"]["policy"]["sweep_speedup"]]
    cells = [c for r in rows for c in r["cells"]]
    err = [abs(c["predicted"] - c["measured"]) / c["measured"] for c in cells]
    base_err = [abs(c["analytic"] - c["measured"]) / c["measured"] for c in cells]
    cover = [c["low"] <= c["measured"] <= c["high"] for c in cells]
    width = [(c["high"] - c["low"]) / c["predicted"] for c in cells]
    read_back = [abs(c["analytic"] / c["profiled"] - 1.0) for r in rows for c in r["evidence_read_back"]]
    steps_back = [abs(c["analytic_steps"] / c["profiled_steps"] - 1.0) for r in rows for c in r["evidence_read_back"]]
    cost = [r["cost"]["policy"]["forwards"] / r["cost"]["sweep"]["forwards"] for r in rows]
    secs = [r["cost"]["policy"]["seconds"] / r["cost"]["sweep"]["seconds"] for r in rows]
    return {"workloads": len(rows), "policy_vs_sweep_best_median": statistics.median(ratio) if ratio else None,
            "policy_vs_sweep_best_min": min(ratio) if ratio else None,
            "policy_in_sweep_grid": len(ratio),
            "median_rel_error": statistics.median(err), "median_rel_error_analytic": statistics.median(base_err),
            "coverage": sum(cover) / len(cover), "median_range_width": statistics.median(width),
            "cells": len(cells), "evidence_read_back_error": statistics.median(read_back) if read_back else None,
            "evidence_read_back_steps_error": max(steps_back) if steps_back else None,
            "cost_forwards_ratio": statistics.median(cost),
            "cost_seconds_ratio": statistics.median(secs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sweep", type=Path, action="append", required=True, help="sweep folder (repeatable)")
    ap.add_argument("--replicate", type=Path, action="append", default=[],
                    help="a further sweep of the grid on other prompts (--seed): sharpens the labels only "
                         "(geometric mean over runs); never the policy's evidence or the sweep's cost")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--profile", type=Path, action="append", default=None,
                    help="the policy's own `specpick profile` run (repeatable; default: cut from the sweep)")
    ap.add_argument("--profile-prompts", type=int, default=3, help="without --profile: prompts cut from the sweep")
    ap.add_argument("--prompt-tokens", type=float, default=200.0)
    ap.add_argument("--artifact", type=Path, default=None, help="also fit on every workload and save the policy here")
    ap.add_argument("--probe", action=argparse.BooleanOptionalAction, default=True,
                    help="give the policy the drafter probe (one N=1 chain per draft model / EAGLE layer, "
                         "one prompt, shared by all workloads; its cost is charged like the verify curve)")
    args = ap.parse_args()
    data = load_sweeps(args.sweep, args.replicate)
    keys = sorted(data.workloads)
    profiled = load_profile_records(args.profile) if args.profile else {}
    probe = probe_records(data, draft_kinds()) if args.probe else []
    prepared = {k: prepare(data, data.workloads[k], args.profile_prompts, args.prompt_tokens,
                           profiled.get(k) if args.profile else None, probe) for k in keys}
    rows = []
    with threadpool_limits(limits=1):
        for name, train_keys, test_keys in splits(keys):
            train = [prepared[k] for k in train_keys]
            est = fit(train, data)
            for k in test_keys:
                row = evaluate(prepared[k], data, est, train)
                rows.append({"split": name, **row, "cv_error": est.cv_error_})
                c = row["configs"]
                print(f"{name:14s} {row['workload']:22s} policy {c['policy']['label']:24s} "
                      f"{c['policy']['sweep_speedup'] or float('nan'):.3f}  best {c['sweep best']['label']:24s} "
                      f"{c['sweep best']['sweep_speedup']:.3f}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    # A sweep at one temperature has no held-out-temperature split.
    by_split = {s: summarize(mine) for s in ("loto", "temp") if (mine := [r for r in rows if r["split"].startswith(s)])}
    result = {"sweeps": [str(s) for s in args.sweep], "replicates": [str(s) for s in args.replicate],
              "profile": [str(p) for p in args.profile or []],
              "profile_prompts": args.profile_prompts, "probe": args.probe,
              "curve": data.curve, "summary": by_split, "rows": rows}
    (args.out / "regret.json").write_text(json.dumps(result, indent=2, default=str))
    print(json.dumps(by_split, indent=2))
    if args.artifact is not None:
        with threadpool_limits(limits=1):
            save_artifact(args.artifact, [prepared[k] for k in keys], data, by_split, args)


def save_artifact(path: Path, every: list[Prepared], data: SweepData, held_out: dict[str, Any],
                  args: argparse.Namespace) -> None:
    """Fit on every workload and write the policy artifact (what ``specpick policy fit`` writes),
    with this run's held-out figures in its model card."""
    inputs = FitInputs(tuple(str(s) for s in args.sweep), tuple(str(s) for s in args.replicate),
                       tuple(str(p) for p in args.profile or ()), args.profile_prompts, args.probe)
    fit_artifact(path, every, data, inputs, held_out)
    print(f"policy artifact written to {path}")


if __name__ == "__main__":
    main()

"""Regret under load: the policy's choice at each concurrency against a sweep measured there.

A *workload* is one task type x temperature x concurrency C. The oracle is a ``specpick sweep`` run
with ``--concurrency`` (every grid point at each level, against plain decoding at that level, on
the reference engine). The policy sees what a user would measure cheaply: a ``specpick profile``
run with one draft length per strategy at a few concurrency levels (its cells' gains against
concurrency are the measured load curve, ``picker.recommend.measured_load``). For each workload
the bench writes the zoo profile at batch C and reads the recommendation ``specpick recommend PROFILE
--measurements CHEAP --policy policies/data/zoo-ci-policy.json`` makes (measured step costs; the
learned correction where its domain covers the workload, none with ``--analytic``) over exactly
the configurations the sweep measured, and reads what would run at C: the batch schedule's row
covering C (its draft length; "off" is plain decoding) and the temperature switch.

Measured gain of a choice = the sweep's throughput gain over plain for that configuration at that
workload (1.0 for plain). Figures per workload: the choice's gain over the sweep's best (plain
included), and over the best engine default there (SGLang's EAGLE-3 defaults (3,1,4) and (5,4,8),
vLLM's ngram N = 5; plain where none of them pays is *not* a default: a default is what the engine
runs when speculation is turned on).

    $ specpick sweep --model zoo --strategies ngram,vanilla,lookahead,medusa,eagle3 --temperatures 0,1 \\
          --chain-lengths 1-5,8 --trees 3x2x6,5x4x8 --concurrency 1,4,16 --prompts-per-task 16 \\
          --max-new-tokens 32 --no-curve --threads 1 --out runs/sweep-load
    $ specpick profile --model zoo --strategies ngram,vanilla,lookahead,medusa,eagle3 --num-draft-tokens 4 \\
          --temperatures 0,1 --concurrency 1,4,16 --limit-per-task 16 --max-new-tokens 32 --seed 1 \\
          --out runs/prof-load
    $ python -m bench.regret.load --sweep runs/sweep-load --profile runs/prof-load --out runs/regret-load
    $ python -m bench.regret.load ... --calibration tests/data/zoo-ci-cpu-calibration-2026-12-03.json

Without ``--calibration`` the steps the measurements do not cover are priced on the zoo profile's
engine label's curve (``tensorrt_llm``, shipped GPU constants: see ``picker.recommend.sweep_data``). With a
calibration of the reference loop itself (``specpick calibrate --device cpu``, engine ``hf``)
they are priced on that engine's curve with every constant of the file, sampling's host terms at
T > 0 included: the curve ``specpick check-load`` checks against the reference engine's measured
load curves.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import statistics
import sys
from pathlib import Path
from typing import Any

import yaml

from picker.engine.plugins import load_strategies
from picker.inputs.measurements import Measurements, load_measurements, parse_tree_label
from picker.inputs.workload import WorkloadProfile, load_profile
from picker.recommend.costs import cost_context
from picker.recommend.options import options_for
from picker.recommend.pipeline import recommend
from picker.recommend.sweep_data import zoo_profile_data
from picker.recommend.table import Option
from policies import Calibration, Config, calibration_for, chain, load_policy
from policies.calibration import read_calibration

# What the engines run when speculation is switched on without tuning (research/policies.md §6).
DEFAULTS = {"sglang (3,1,4)": ("eagle3", 3, None), "sglang (5,4,8)": ("eagle3", 5, (5, 4, 8)),
            "vllm ngram N=5": ("ngram", 5, None)}
PLAIN = ("plain", 0, None)
Key = tuple[str, int, "tuple[int, int, int] | None"]  # strategy, chain length or tree depth, tree


def cell_key(c: dict[str, Any]) -> Key:
    tree = parse_tree_label(c["tree"]) if c.get("tree") else None
    return (c["strategy"], tree[0] if tree else int(c["num_draft_tokens"]), tree)


def sweep_gains(summary: dict[str, Any]) -> dict[tuple[str, float, int], dict[Key, float]]:
    """Per workload (task, temperature, concurrency): every configuration's measured throughput gain."""
    out: dict[tuple[str, float, int], dict[Key, float]] = {}
    for c in summary["cells"]:
        gain = c.get("throughput_gain_vs_plain") or c.get("speedup_vs_plain")
        if gain is None:
            continue
        w = (c["task"], float(c["temperature"]), int(c.get("concurrency") or 1))
        out.setdefault(w, {PLAIN: 1.0})[cell_key(c)] = float(gain)
    return out


def what_runs(rec: dict[str, Any], batch: int, temperature: float) -> tuple[Key, str]:
    """The configuration the recommendation runs at ``batch`` and ``temperature``, and why."""
    d = rec["decision"]
    if d["strategy"] == "none":
        return PLAIN, "leave it off"
    switch = d["temperature_switch"]
    if switch["action"] == "disable" and switch["above"] is not None and temperature > switch["above"]:
        return PLAIN, f"temperature switch (off above {switch['above']:g})"
    row = next((r for r in d["batch_schedule"] if r["min_batch"] <= batch
                and (r["max_batch"] is None or batch <= r["max_batch"])), None)
    k = d["num_speculative_tokens"] if row is None else row["num_speculative_tokens"]
    above = None if row is None else row.get("disable_above_temperature")
    if above is not None and temperature > above:
        return PLAIN, f"range switch (off above {row['disable_above_temperature']:g})"
    if k == 0:
        return PLAIN, "batch schedule: off"
    tree = d.get("tree")
    if tree and k == tree["depth"]:
        return (d["strategy"], k, (tree["depth"], tree["topk"], tree["num_draft_tokens"])), "tree"
    # A chain, or a tree the schedule shortened (the schedule gives a depth: a chain of that length).
    return (d["strategy"], k, None), "chain" if not tree else f"tree shortened to a chain of {k}"


def choose(prof: WorkloadProfile, measurements: Measurements, est: Any, grid: list[Key],
           calibration: Calibration | None = None) -> dict[str, Any]:
    """``picker.recommend.pipeline.recommend`` over exactly the configurations the sweep measured,
    with the measured step costs (as ``specpick recommend --policy`` scores a policy trained on
    them: the reference loop is no serving engine, so without that the profile's engine label would
    price the steps). A ``calibration`` prices the rest on the curve of the engine it was measured
    on (the reference loop's, ``hf``)."""
    plugins = load_strategies()
    like = {o.plugin.name: o for o in options_for(prof, plugins, cost_context(prof).target) if not o.config.is_tree}
    opts = [Option(plugins[s], Config(*tree) if tree else chain(n), like[s].feasible, like[s].engine_supported,
                   like[s].notes) for s, n, tree in grid if s in like]
    result = recommend(prof, measurements, policy=est, measured_costs=True, calibration=calibration,
                       engine=calibration.measured_engine if calibration is not None else None, options=opts)
    return result.recommendation.model_dump(mode="json")


def label(k: Key) -> str:
    s, n, tree = k
    return "plain" if s == "plain" else f"{s} tree {tree[0]}x{tree[1]}x{tree[2]}" if tree else f"{s} N={n}"


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 4) if values else None


def _share_at_least(values: list[float], bar: float = 1.15) -> float | None:
    return round(sum(v >= bar for v in values) / len(values), 4) if values else None


def stats(rs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median, worst and geometric-mean ratio to the sweep's best; against the best default, the
    choice's ratio and the ceiling (the sweep's best over it), with the share reaching 1.15x."""
    vs_default = [r["ratio_to_best_default"] for r in rs if r["ratio_to_best_default"] is not None]
    ceiling = [r["best_to_best_default"] for r in rs if r["best_to_best_default"] is not None]
    return {"workloads": len(rs), "median_ratio_to_best": _median([r["ratio_to_best"] for r in rs]),
            "worst_ratio_to_best": round(min(r["ratio_to_best"] for r in rs), 4),
            "geomean_ratio_to_best": round(math.exp(statistics.fmean(math.log(r["ratio_to_best"]) for r in rs)), 4),
            "median_ratio_to_best_default": _median(vs_default),
            "share_at_least_1.15x_best_default": _share_at_least(vs_default),
            # What an oracle over the same grid reaches: the sweep's best over the best default.
            "median_best_to_best_default": _median(ceiling),
            "share_best_at_least_1.15x_best_default": _share_at_least(ceiling)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweep", type=Path, required=True)
    ap.add_argument("--profile", type=Path, required=True, help="the cheap profile run (its summary.json)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--prompt-tokens", type=float, default=64.0)
    ap.add_argument("--output-tokens", type=int, default=32)
    ap.add_argument("--policy", type=Path,
                    default=Path(__file__).parents[2] / "policies" / "data" / "zoo-ci-policy.json",
                    help="the learned correction, applied where its domain covers the workload")
    ap.add_argument("--analytic", action="store_true", help="no learned correction: the analytic model alone")
    ap.add_argument("--calibration", type=Path, default=None,
                    help="a calibration of the reference loop (specpick calibrate --device cpu): its engine's curve "
                         "and every constant price what the measurements do not")
    a = ap.parse_args()
    summary = json.loads((a.sweep / "summary.json").read_text(encoding="utf-8"))
    run = json.loads((a.sweep / "run.json").read_text(encoding="utf-8"))
    target, artifacts = Path(run["target_path"]), run.get("source", {}).get("artifacts", {})
    gains = sweep_gains(summary)
    measured_model = json.loads((a.profile / "run.json").read_text(encoding="utf-8"))["provenance"]["model"]["name"]
    measurements = load_measurements(a.profile / "summary.json")
    policy = load_policy(a.policy)
    calibration = None
    if a.calibration is not None:
        calibration = calibration_for(a.calibration, read_calibration(a.calibration).engine, "cpu")
    a.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for (task, temp, batch), grid in sorted(gains.items()):
        doc = zoo_profile_data(task, temp, target, artifacts, a.prompt_tokens, a.output_tokens, batch=batch)
        doc["model"]["name"] = measured_model  # the deployment is the model the profile measured
        path = a.out / f"{doc['name']}.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
        prof = load_profile(path)  # read back as recommend reads it: the schema validates the document
        ok, _ = policy.covers(prof.hardware.gpu, prof.engine.name, prof.model_shape().params)
        est = policy.estimator if ok and not a.analytic else None
        rec = choose(prof, measurements, est, [k for k in grid if k != PLAIN], calibration)
        choice, why = what_runs(rec, batch, temp)
        best = max(grid, key=lambda k: grid[k])
        defaults = {name: grid[k] for name, k in DEFAULTS.items() if k in grid}
        best_default = max(defaults.values()) if defaults else None
        got = grid.get(choice)
        rows.append({"task": task, "temperature": temp, "concurrency": batch, "choice": label(choice), "why": why,
                     "predicted": rec["predicted_speedup"]["mean"], "measured": got, "best": label(best),
                     "best_gain": grid[best], "ratio_to_best": None if got is None else round(got / grid[best], 4),
                     "defaults": defaults,
                     "ratio_to_best_default": None if got is None or not best_default else round(got / best_default, 4),
                     # the ceiling of the goal above: no choice over this grid beats the sweep's best
                     "best_to_best_default": None if not best_default else round(grid[best] / best_default, 4)})
        r = rows[-1]
        print(f"{task:13s} T={temp:g} C={batch:<3d} choice {r['choice']:22s} "
              f"{got if got is None else round(got, 3)!s:>6}  best {r['best']:22s} {grid[best]:.3f}  "
              f"ratio {r['ratio_to_best']}  vs default {r['ratio_to_best_default']}",
              flush=True)
    measured = [r for r in rows if r["ratio_to_best"] is not None]
    by_c: dict[int, list[dict[str, Any]]] = {}
    for r in measured:
        by_c.setdefault(r["concurrency"], []).append(r)

    result = {"sweep": str(a.sweep), "profile": str(a.profile), "correction": None if a.analytic else str(a.policy),
              "calibration": None if calibration is None else calibration.label,
              "all": stats(measured),
              "by_concurrency": {c: stats(rs) for c, rs in sorted(by_c.items())},
              "unmeasured_choices": [r for r in rows if r["measured"] is None], "rows": rows,
              "command": shlex.join(sys.argv)}
    (a.out / "regret-load.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: result[k] for k in ("all", "by_concurrency")}, indent=1))
    print(f"choices the sweep did not measure: {len(result['unmeasured_choices'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

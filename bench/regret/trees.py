"""Tokens per step of trees: the sweep's measurement against the tree model, timing-free.

For every tree cell of a sweep that runs as a tree (greedy top-k trees at T = 0; at T > 0 only
strategies that declare ``Capabilities.sampled_tree``), compare the measured tokens per decode step
with the tree model fed by the policy's cheap profile (the chain cell of that strategy, task and
temperature): once with the textbook sibling model (every rank accepts with α) and once with the
sibling odds the profiler measured on the chain's rejections (``picker.engine.siblings``, shrunk as the
policy shrinks them). Tokens per step carry no timing noise, so this isolates the acceptance model
from the step costs.

    python -m bench.regret.trees --sweep runs/sweep-a --sweep runs/sweep-b \
        --profile runs/profile-s3a-paired --profile runs/profile-s3b-paired
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from picker.engine.plugins import load_strategies
from picker.inputs.measurements import Measurements
from picker.profiler.summary import build_summary
from picker.profiler.sweep import parse_tree_label
from picker.recommend.sweep_data import load_sweeps
from policies.cell_evidence import sibling_rates
from policies.scalar import tree_length


def rows(sweeps: list[Path], profiles: list[Path]) -> list[dict]:
    data = load_sweeps(sweeps)
    plugins = load_strategies()
    cells = []
    for folder in profiles:
        cells += Measurements.model_validate_json((folder / "summary.json").read_text()).cells
    out = []
    for (task, temperature), w in sorted(data.workloads.items()):
        summary = build_summary(w.records, {}, {})
        for c in summary["cells"]:
            plugin = plugins.get(c["strategy"])
            if c["tree"] is None or plugin is None or (temperature > 0 and not plugin.capabilities.sampled_tree):
                continue
            chain = [x for x in cells if x.strategy == c["strategy"] and x.task == task
                     and x.temperature == temperature and x.tree is None]
            if not chain or not c["decode_steps"]:
                continue
            ev = chain[0]
            alpha = ev.chain_alpha
            depth, topk, tokens = parse_tree_label(c["tree"])
            measured = (c["tokens"] - c["samples"]) / c["decode_steps"]  # the prefill emits one token
            textbook = tree_length(alpha, depth, topk, tokens - 1)
            sib = sibling_rates(ev.sibling_accept or (), ev.sibling_reached or (), alpha)
            out.append({"workload": f"{task}@T={temperature:g}", "strategy": c["strategy"],
                        "tree": f"({depth},{topk},{tokens})", "measured": measured, "textbook": textbook,
                        "siblings": tree_length(alpha, depth, topk, tokens - 1, sib) if sib else None,
                        "s2": sib[0] if sib else None})
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweep", type=Path, action="append", required=True)
    ap.add_argument("--profile", type=Path, action="append", required=True)
    args = ap.parse_args(argv)
    table = rows(args.sweep, args.profile)
    print("| workload | strategy | tree | measured tokens/step | textbook | err | measured siblings | err | s2 |")
    print("|---|---|---|---|---|---|---|---|---|")
    errs: dict[str, list[float]] = {"textbook": [], "siblings": []}
    for r in table:
        e_t = r["textbook"] / r["measured"] - 1
        errs["textbook"].append(e_t)
        sib = "-" if r["siblings"] is None else f"{r['siblings']:.2f} | {r['siblings'] / r['measured'] - 1:+.1%}"
        if r["siblings"] is not None:
            errs["siblings"].append(r["siblings"] / r["measured"] - 1)
        s2 = "-" if r["s2"] is None else f"{r['s2']:.2f}"
        print(f"| {r['workload']} | {r['strategy']} | {r['tree']} | {r['measured']:.2f} | {r['textbook']:.2f} | "
              f"{e_t:+.1%} | {sib} | {s2} |")
    for name, e in errs.items():
        if e:
            print(f"{name}: {len(e)} cells, median error {statistics.median(e):+.1%}, "
                  f"median |error| {statistics.median(abs(x) for x in e):.1%}")


if __name__ == "__main__":
    main()

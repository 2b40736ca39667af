"""The policy's cheap profile taken on vLLM itself, and its decision with vLLM's own step costs.

A configuration chosen on the reference engine does not carry to vLLM's CPU build: there a step's
cost, not acceptance, decides (prompt lookup accepting 6 tokens a step ran at 0.65x plain). So the
policy measures on the engine it will deploy to, cheaply: each drafter at two chain lengths (prompt
lookup N = 2 and 8, the draft model N = 1 and 4: one length cannot give the cost line a slope of its
own) and plain decoding -- one group of servers, ``--profile-prompts`` (2) prompts per workload that
the evaluation never uses, one pass. (The first design, prompt lookup at N = 8 only and one prompt,
read R(N) for prompt lookup as a line through (0, 1) and one noisy point, and chose badly: 0.72 of
the grid's best; see bench/regret/README.md.) Acceptance (per position) comes from the servers'
``/metrics`` counters; the speedup against plain at each measured N gives the step ratio R(N)
(``policies.cell_evidence.live_step_ratio``), which the recommendation
(``picker.recommend.evidence_index``) interpolates for every other N. The reference-engine correction
is out of its domain here: the decision is the analytic model with vLLM's measured costs. The rows
become summary cells through the profiler's own conversion (``picker.profiler.vllm.wave_record``,
then ``picker.profiler.summary.build_summary``): one wave record per (configuration, workload, pass).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from picker.profiler.records import PLAIN, CellKey
from picker.profiler.summary import build_summary
from picker.profiler.vllm import PER_POS, Metrics, wave_record
from picker.recommend.sweep_data import GridKey

PROFILE_CONFIGS = "ngram:2,8;vanilla:1,4"  # default --profile-configs


def parse_profile_configs(text: str) -> tuple[GridKey, ...]:
    """'ngram:2,8;vanilla:1,4' -> the chain configurations the profile serves."""
    out = []
    for part in text.split(";"):
        strategy, lengths = part.split(":")
        out += [GridKey(strategy.strip(), int(n)) for n in lengths.split(",")]
    return tuple(out)


def per_pos_key(k: int) -> str:
    return f"{PER_POS}[{k}]"


def parse_label(label: str) -> GridKey:
    """'ngram N=8' -> GridKey('ngram', 8)."""
    strategy, n = label.split(" N=")
    return GridKey(strategy, int(n))


def _delta(counters: dict[str, float]) -> Metrics:
    """bench.regret.vllm's flat counter names back to the profiler's parsed ``/metrics`` keys."""
    out: Metrics = {}
    for name, value in counters.items():
        base, _, pos = name.partition("[")
        out[(base, (("position", pos.rstrip("]")),) if pos else ())] = value
    return out


def cells_from_rows(rows: list[dict[str, Any]], max_new_tokens: int) -> list[dict[str, Any]]:
    """Summary cells (``picker.inputs.measurements.Cell``) from profile rows, by the profiler's own
    conversion: each row (a configuration's prompts of one workload in one pass; EOS ignored, so
    every request is ``max_new_tokens`` long) is one wave record, plain's rows are the baseline."""
    records = []
    for r in rows:
        task, temp = r["workload"].split("@T=")
        g = GridKey(PLAIN, 0) if r["config"] == "plain" else parse_label(r["config"])
        cell = CellKey(task, g.strategy, float(temp), g.n)
        requests = max(round(r["tokens"] / max_new_tokens), 1)
        records.append(wave_record(cell, (f"{r['workload']}#pass{r['pass']}",), int(r["tokens"]), requests,
                                   None if g.strategy == PLAIN else _delta(r["counters"]), float(r["wall_s"])))
    return [c for c in build_summary(records, {}, {})["cells"] if c["speedup_vs_plain"] is not None]


def decide_on_vllm(regret: dict[str, Any], cells: list[dict[str, Any]], workloads: list[tuple[str, float]],
                   served: set[str]) -> dict[str, dict[str, Any]]:
    """Per workload: the analytic policy's choice among the served grid with vLLM's measured
    acceptance and step costs (no learned correction: its domain is the reference engine)."""
    from bench.regret.policy import decide
    from picker.inputs.measurements import Measurements
    from picker.recommend.policy_fit import prepare
    from picker.recommend.sweep_data import load_sweeps

    data = load_sweeps([Path(s) for s in regret["sweeps"]], [Path(s) for s in regret.get("replicates", [])])
    m = Measurements.model_validate({"cells": cells, "source": "vllm profile", "run": {"backend": "vllm"}})
    out = {}
    for k in workloads:
        p = replace(prepare(data, data.workloads[k], regret["profile_prompts"], 200.0), measurements=m)
        g, pred, _ = decide(p, data, None, served)
        out[f"{k[0]}@T={k[1]:g}"] = {"policy": g, "policy_predicted": pred, "analytic": g}
    return out


def run_profile(args: argparse.Namespace, servers_for: Any, measure: Any, workloads: list[tuple[str, float]],
                emitted: Any, draft: str) -> list[dict[str, Any]]:
    """Serve the profile configurations beside plain, measure ``--profile-prompts`` fresh prompts per
    workload once; rows are kept in ``profile.jsonl`` (a rerun reuses them)."""
    path = args.out / "profile.jsonl"
    if path.exists():
        return [json.loads(line) for line in path.read_text().splitlines()]
    configs = {g.label: emitted(g, draft) for g in parse_profile_configs(args.profile_configs)}
    sub = argparse.Namespace(**{**vars(args), "first_prompt": args.profile_first_prompt,
                                "prompts": args.profile_prompts, "passes": 1})
    with servers_for(configs) as servers:
        rows = measure(servers, workloads, sub)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows

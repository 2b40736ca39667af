"""The policy's cheap profile taken on vLLM itself, and its decision with vLLM's own step costs.

A configuration chosen on the reference engine does not carry to vLLM's CPU build: there a step's
cost, not acceptance, decides (prompt lookup accepting 6 tokens a step ran at 0.65x plain). So the
policy measures on the engine it will deploy to, cheaply: each drafter at two chain lengths (prompt
lookup N = 2 and 8, the draft model N = 1 and 4: one length cannot give the cost line a slope of its
own) and plain decoding -- one group of servers, ``--profile-prompts`` (2) prompts per workload that
the evaluation never uses, one pass. (The first design, prompt lookup at N = 8 only and one prompt,
read R(N) for prompt lookup as a line through (0, 1) and one noisy point, and chose badly: 0.72 of
the grid's best; see bench/regret/README.md.) Acceptance (per position) comes from the servers' ``/metrics`` counters; the speedup
against plain at each measured N gives the step ratio R(N) (``policies.cell_evidence.live_step_ratio``),
which the recommendation (``picker.recommend.evidence_index``) interpolates for every other N. The reference-engine correction
is out of its domain here: the decision is the analytic model with vLLM's measured costs.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.regret.data import GridKey
from picker.profiler.vllm import (  # the counters the profiler reads
    ACCEPTED,
    DRAFT_TOKENS,
    DRAFTS,
    PER_POS,
)

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


def cells_from_rows(rows: list[dict[str, Any]], max_new_tokens: int) -> list[dict[str, Any]]:
    """Summary cells (``picker.inputs.measurements.Cell`` fields) from profile rows: Σ over passes per
    configuration and workload, speedup against plain's tokens/s in the same run."""
    tot: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for r in rows:
        t = tot[(r["config"], r["workload"])]
        t["tokens"] += r["tokens"]
        t["wall_s"] += r["wall_s"]
        for name, v in r["counters"].items():
            t[name] += v
    cells = []
    for (label, workload), t in sorted(tot.items()):
        plain = tot.get(("plain", workload))
        if label == "plain" or not plain or not t["wall_s"]:
            continue
        g = parse_label(label)
        task, temp = workload.split("@T=")
        samples = max(round(t["tokens"] / max_new_tokens), 1)  # EOS is ignored: every request is full
        drafts, drafted, accepted = t[DRAFTS], t[DRAFT_TOKENS], t[ACCEPTED]
        alpha = accepted / drafted if drafted else 0.0
        per_position: list[float] = []
        alpha_iid = alpha  # without the per-position counter (older records): accepted / drafted
        if any(per_pos_key(k) in t for k in range(g.n)):
            per_acc = [t.get(per_pos_key(k), 0.0) for k in range(g.n)]
            reached = [drafts, *per_acc[:-1]]
            for a, r in zip(per_acc, reached):
                if r <= 0:
                    break
                per_position.append(a / r)
            alpha_iid = sum(per_acc) / sum(reached) if sum(reached) else alpha
        cells.append({
            "task": task, "strategy": g.strategy, "temperature": float(temp), "num_draft_tokens": g.n,
            "alpha": alpha, "alpha_ci": [alpha, alpha], "alpha_iid": alpha_iid, "per_position": per_position or None,
            "samples": samples, "tokens": t["tokens"], "seconds": t["wall_s"],
            # Prompt lookup drafts only on the steps where it finds a match: without draft_steps the
            # scorer takes every step to draft (phi = 1) and tau, per drafting step, for every step's.
            "decode_steps": t["tokens"] - samples - accepted, "draft_steps": drafts, "draft_tokens": drafted,
            "accepted_tokens": accepted, "tau": 1.0 + accepted / drafts if drafts else 1.0,
            "tokens_per_second": t["tokens"] / t["wall_s"],
            "speedup_vs_plain": (t["tokens"] / t["wall_s"]) / (plain["tokens"] / plain["wall_s"]),
        })
    return cells


def decide_on_vllm(regret: dict[str, Any], cells: list[dict[str, Any]], workloads: list[tuple[str, float]],
                   served: set[str]) -> dict[str, dict[str, Any]]:
    """Per workload: the analytic policy's choice among the served grid with vLLM's measured
    acceptance and step costs (no learned correction: its domain is the reference engine)."""
    from bench.regret.data import load_sweeps
    from bench.regret.policy import decide, prepare
    from picker.inputs.measurements import Measurements

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

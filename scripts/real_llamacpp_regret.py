"""Regret on llama.cpp: the policy's choice vs the best of the measured grid vs llama.cpp's own defaults.

1. ``specpick recommend PROFILE --measurements CHEAP --format json`` (a cheap profile: e.g. one
   draft length per drafter) gives the policy's choice (strategy, N).
2. One ``llama-server`` per configuration, all up at once on the same target (llama.cpp mmaps the
   GGUF files, so the servers share the weights' pages): plain; the grid (``vanilla:N`` = the draft
   model as ``draft-simple``, ``ngram:N`` = ``ngram-simple``, flags from
   ``picker.recommend.engine_configs``); llama.cpp's defaults; the choice where the grid lacks it.
   llama.cpp's defaults (common/common.h, common/arg.cpp of this build): ``-md DRAFT`` alone sets no
   speculative type, so the server loads the draft and decodes plainly (``/slots`` says
   ``speculative: false``; checked at start); ``-md DRAFT --spec-type draft-simple`` with no draft
   flags drafts ``n_max = 3`` tokens with ``p_min = 0``: that is the ``default`` configuration.
3. Rounds: each built-in prompt of the tasks at each temperature is sent to every configuration,
   in an order rotated per round, ``slots`` prompts at once; per configuration the engine's own
   decode rate (``timings.predicted_per_second``, summed over the wave's requests at concurrency 1
   that is the rate of the one request) and the wave's throughput (tokens / wall seconds).
   A configuration's speedup is the median over rounds of its rate over plain's in the same round;
   ``gain`` is the A/B figure the profiler reports (``picker.profiler.ab``): the ratio of summed
   rates over the rounds, Σ decode tokens / Σ decode seconds (the engine's ``predicted_n - 1`` over
   ``predicted_ms``) or Σ tokens / Σ wall seconds (``wall_gain``), with 95% bootstrap intervals over
   rounds, so the two measurements of one deployment can be set side by side.
   With ``--slots S > 1`` every server runs ``-np S``, each wave sends S prompts at once, the
   policy is asked about the profile with its concurrency set to S (written beside ``--out``), and
   the ratio is of wall-clock throughput (``--metric``).

Regret of a choice = best speedup in the grid / the choice's speedup - 1 (0: it picked the best).

    $ flock /work/locks/heavy.lock python scripts/real_llamacpp_regret.py \\
          --profile profiles/code-assistant-qwen-llamacpp.yaml --measurements cheap/summary.json \\
          --out /work/logs/real-alpha/regret-np1.json --server-arg=--no-repack
"""

from __future__ import annotations

import argparse
import json
import shlex
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import yaml

from picker.models import Layout, default_cache, find_pair
from picker.profiler.llamacpp import request_seed
from picker.profiler.llamacpp_server import local_server
from picker.tasks import builtin_prompts, render_turn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from real_llamacpp_grid import DEFAULT_SERVER, METRICS, server_args

GRID = "vanilla:1,vanilla:2,vanilla:4,vanilla:8,ngram:1,ngram:2,ngram:4,ngram:8"


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as resp:
        return json.loads(resp.read())


def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as resp:
        return json.loads(resp.read())


def policy_choice(profile: Path, measurements: Path | None) -> tuple[str, dict[str, Any]]:
    cmd = [sys.executable, "-c", "from picker.cli.main import app; app()", "recommend", str(profile), "--format", "json"]
    if measurements is not None:
        cmd += ["--measurements", str(measurements)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"recommend exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
    rec = json.loads(proc.stdout)
    d = rec["decision"]
    config = "plain" if d["strategy"] == "none" else f"{d['strategy']}:{d['num_speculative_tokens']}"
    return config, {"command": shlex.join(cmd[3:]), "decision": {k: d[k] for k in ("strategy", "num_speculative_tokens")},
                    "predicted_speedup": rec["predicted_speedup"], "evidence": rec["evidence"]["source"],
                    "per_task": [{k: r.get(k) for k in ("task", "strategy", "alpha", "predicted_speedup")}
                                 for r in rec["per_task"]]}


def wave(url: str, prompts: list[Any], temperature: float, tokens: int) -> dict[str, float]:
    """``prompts`` sent at once to one server: tokens, engine decode rate, wall throughput, drafts."""
    def one(p: Any) -> dict[str, Any]:
        body = {"prompt": render_turn(p, 0, []), "n_predict": tokens, "temperature": temperature, "top_k": 0,
                "top_p": 1.0, "min_p": 0.0, "seed": request_seed(0, p.id, 0), "ignore_eos": True,
                "cache_prompt": False}  # every request prefills its prompt, as the profiler's do
        return _post(f"{url}/completion", body)
    start = time.perf_counter()
    pool = ThreadPoolExecutor(len(prompts))
    try:
        out = list(pool.map(one, prompts))
    finally:
        # Not ``with``: its exit joins the workers, and a SIGTERM (SystemExit in the main thread)
        # would then wait on requests still in flight. Unjoined, they end when the servers stop.
        pool.shutdown(wait=False, cancel_futures=True)
    wall = time.perf_counter() - start
    t = [r["timings"] for r in out]
    return {"tokens": sum(r["tokens_predicted"] for r in out), "wall_s": wall,
            "decode_tokens": sum(max(x["predicted_n"] - 1, 0) for x in t),
            "decode_s": sum(x["predicted_ms"] for x in t) / 1e3,
            "engine_tps": sum(x["predicted_per_second"] for x in t),
            "throughput": sum(r["tokens_predicted"] for r in out) / wall,
            "drafted": sum(x.get("draft_n", 0) for x in t), "accepted": sum(x.get("draft_n_accepted", 0) for x in t)}


def round_gain(rounds: list[dict[str, Any]], cfg: str, num: str, den: str, seed: int = 0,
               draws: int = 2000) -> tuple[float, list[float] | None]:
    """(Σ num / Σ den of ``cfg``) over plain's, on every round; 95% bootstrap interval over rounds."""
    import numpy as np

    ours = np.array([[r["waves"][cfg][num], r["waves"][cfg][den]] for r in rounds], dtype=float)
    base = np.array([[r["waves"]["plain"][num], r["waves"]["plain"][den]] for r in rounds], dtype=float)

    def ratio(w: np.ndarray) -> np.ndarray:
        return ((w @ ours[:, 0]) / (w @ ours[:, 1])) / ((w @ base[:, 0]) / (w @ base[:, 1]))

    point = float(ratio(np.ones((1, len(rounds))))[0])
    if len(rounds) < 5:
        return round(point, 4), None
    w = np.random.default_rng(seed).multinomial(len(rounds), np.full(len(rounds), 1 / len(rounds)), size=draws)
    lo, hi = np.percentile(ratio(w.astype(float)), [2.5, 97.5])
    return round(point, 4), [round(float(lo), 4), round(float(hi), 4)]


def summarize(rounds: list[dict[str, Any]], configs: list[str], mix: dict[str, float],
              metric: str = "engine_tps") -> dict[str, Any]:
    """Per configuration, its ratio to plain in the same round by ``metric`` (``engine_tps``: the
    engine's decode rate; ``throughput``: the wave's tokens over its wall time), median per task
    and weighted by the task mix."""
    out: dict[str, Any] = {}
    for cfg in configs:
        ratios = [r["waves"][cfg][metric] / r["waves"]["plain"][metric] for r in rounds]
        tput = [r["waves"][cfg]["throughput"] / r["waves"]["plain"]["throughput"] for r in rounds]
        by_task: dict[str, list[float]] = {}
        for r, x in zip(rounds, ratios):
            by_task.setdefault(r["task"], []).append(x)
        weighted = {t: statistics.median(v) for t, v in by_task.items() if mix.get(t)}
        total = sum(mix[t] for t in weighted)
        drafted = sum(r["waves"][cfg]["drafted"] for r in rounds)
        timed = [r for r in rounds if "decode_s" in r["waves"][cfg] and "decode_s" in r["waves"]["plain"]]
        gain, gain_ci = round_gain(timed, cfg, "decode_tokens", "decode_s") if timed else (None, None)
        wall_gain, wall_ci = round_gain(rounds, cfg, "tokens", "wall_s")
        out[cfg] = {"gain": gain, "gain_ci": gain_ci, "wall_gain": wall_gain, "wall_gain_ci": wall_ci,
                    "rounds": len(rounds),"speedup_median": round(statistics.median(ratios), 4),
                    "speedup_mix": round(sum(mix[t] * v for t, v in weighted.items()) / total, 4) if total else None,
                    "throughput_gain_median": round(statistics.median(tput), 4),
                    "engine_tps_median": round(statistics.median(r["waves"][cfg]["engine_tps"] for r in rounds), 3),
                    "by_task": {t: round(statistics.median(v), 4) for t, v in by_task.items()},
                    "alpha": round(sum(r["waves"][cfg]["accepted"] for r in rounds) / drafted, 4) if drafted else None}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", type=Path, required=True)
    ap.add_argument("--measurements", type=Path, default=None, help="the cheap profile's summary.json")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--grid", default=GRID)
    ap.add_argument("--server", type=Path, default=DEFAULT_SERVER)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--slots", type=int, default=1, help="-np and requests in flight per wave")
    ap.add_argument("--tasks", default="", help="comma list (default: the profile's task mix)")
    ap.add_argument("--per-task", type=int, default=1, help="prompts per task (x slots at concurrency > 1)")
    ap.add_argument("--temperatures", default="0,0.7")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--server-arg", action="append", default=[])
    ap.add_argument("--from-rounds", type=Path, default=None, help="summarize this rounds.jsonl instead of measuring")
    ap.add_argument("--no-defaults", action="store_true",
                    help="serve only plain and --grid (not llama.cpp's default and -md-only configurations)")
    ap.add_argument("--metric", choices=["auto", "engine_tps", "throughput"], default="auto",
                    help="what a speedup is a ratio of (auto: the engine's decode rate at one slot, the "
                         "wave's wall-clock throughput at several: with requests overlapping, the sum of "
                         "per-request rates overstates what the server delivers)")
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    metric = a.metric if a.metric != "auto" else "engine_tps" if a.slots == 1 else "throughput"

    a.out.parent.mkdir(parents=True, exist_ok=True)
    profile = yaml.safe_load(a.profile.read_text(encoding="utf-8"))
    if a.slots > 1 and [c["batch_size"] for c in profile["traffic"]["concurrency"]] != [a.slots]:
        # The same deployment serving ``slots`` requests at once: the policy is asked for that load.
        profile["traffic"]["concurrency"] = [{"batch_size": a.slots, "weight": 1.0}]
        profile["name"] = f"{profile['name']}-np{a.slots}"
        a.profile = a.out.with_name(a.out.stem + ".profile.yaml")
        a.profile.write_text(yaml.safe_dump(profile, sort_keys=False), encoding="utf-8")
    mix = {t: float(w) for t, w in profile["traffic"]["task_mix"].items()}
    tasks = a.tasks.split(",") if a.tasks else [t for t in mix if mix[t] > 0]
    choice, rec = policy_choice(a.profile, a.measurements)
    grid = a.grid.split(",")
    defaults = [] if a.no_defaults else ["default", "md-only"]
    configs = ["plain", *grid, *defaults] + ([choice] if choice not in [*grid, "plain"] and not a.no_defaults else [])
    pair = find_pair("qwen2.5-coder")
    target, draft = (Layout(m, default_cache()).gguf for m in (pair.target, pair.draft))
    logs = a.out.with_suffix("")
    logs.mkdir(exist_ok=True)
    temps = [float(t) for t in a.temperatures.split(",")]
    log = a.out.with_suffix(".rounds.jsonl")
    if a.from_rounds is None:
        log.unlink(missing_ok=True)
    rounds: list[dict[str, Any]] = []
    if a.from_rounds is not None:  # summarize a run cut short (its rounds file), start no server
        rounds = [json.loads(line) for line in a.from_rounds.read_text(encoding="utf-8").splitlines() if line]
        configs = [c for c in configs if all(c in r["waves"] for r in rounds)]
    with ExitStack() as stack:
        urls: dict[str, str] = {}
        for cfg in configs if a.from_rounds is None else []:
            args = [] if cfg == "plain" else ["-md", str(draft)] if cfg == "md-only" else server_args(cfg, draft)[2]
            urls[cfg] = stack.enter_context(local_server(a.server, target, [*METRICS, *args, *a.server_arg],
                                                         logs / f"{cfg.replace(':', '-N')}.log",
                                                         threads=a.threads, slots=a.slots))
        speculates = {cfg: any(s["speculative"] for s in _get(f"{u}/slots")) for cfg, u in urls.items()}
        prompts = builtin_prompts(tasks, a.per_task * a.slots) if a.from_rounds is None else []
        # A fresh server's first completions pay its allocations and first full-size prefill: one untimed
        # wave per server shaped like the timed ones (the first round's prompts, T = 0), as the
        # profiler's warm-up (picker.profiler.source.WARMUP); a short prompt left the first prefill slow.
        first = [p for p in prompts if p.task == tasks[0]][:a.slots]
        for u in urls.values():
            wave(u, first, 0.0, a.max_new_tokens)
        k = 0
        for task in tasks:
            mine = [p for p in prompts if p.task == task]
            for i in range(0, len(mine), a.slots):
                for temp in temps:
                    order = configs[k % len(configs):] + configs[:k % len(configs)]
                    k += 1
                    waves = {cfg: wave(urls[cfg], mine[i:i + a.slots], temp, a.max_new_tokens) for cfg in order}
                    rounds.append({"task": task, "temperature": temp, "prompts": [p.id for p in mine[i:i + a.slots]],
                                   "order": order, "waves": waves})
                    with log.open("a", encoding="utf-8") as sink:  # kept if the run is cut short
                        sink.write(json.dumps(rounds[-1]) + "\n")
                    print(task, temp, {c: round(w[metric], 2) for c, w in waves.items()}, flush=True)
    summary = summarize(rounds, configs, mix, metric)
    spec_grid = {c: summary[c]["speedup_mix"] for c in grid}
    best = max(spec_grid, key=lambda c: spec_grid[c])
    best_of_all = max(["plain", *grid], key=lambda c: summary[c]["speedup_mix"])

    def regret(cfg: str) -> float:
        return round(summary[best_of_all]["speedup_mix"] / summary[cfg]["speedup_mix"] - 1.0, 4)

    result = {"profile": str(a.profile), "measurements": str(a.measurements), "slots": a.slots, "metric": metric,
              "tasks": tasks,
              "temperatures": temps, "max_new_tokens": a.max_new_tokens, "recommend": rec, "choice": choice,
              "speculates": speculates, "best_speculative_in_grid": best, "best_in_grid_or_plain": best_of_all,
              "regret": {c: regret(choice if c == "choice" else c) for c in ("choice", "default", "md-only", "plain")
                         if (choice if c == "choice" else c) in summary},
              "summary": summary, "rounds": rounds, "command": shlex.join(sys.argv)}
    a.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: result[k] for k in ("choice", "best_speculative_in_grid", "best_in_grid_or_plain", "regret",
                                             "speculates")}, indent=1))
    for cfg in configs:
        s = summary[cfg]
        print(f"{cfg:12s} speedup(mix)={s['speedup_mix']} median={s['speedup_median']} "
              f"tput={s['throughput_gain_median']} tps={s['engine_tps_median']} alpha={s['alpha']} "
              f"gain={s['gain']} {s['gain_ci']} wall_gain={s['wall_gain']} {s['wall_gain_ci']} ({s['rounds']} rounds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Speculation under load on vLLM's CPU build: gain over plain decoding against concurrency.

    $ python -m bench.vllm_load --strategies ngram,vanilla --out runs/vllm-load \\
          --concurrency 1,2,4,8,16 --prompts 32 --max-new-tokens 64 --temperatures 0,1

Serves the zoo target on loopback without speculation and once per strategy with the configuration
specpick emits for vLLM (``picker.recommend.engine_configs``: ``ngram``, the zoo draft model as
``draft_model``; a chain of ``--n``), and runs ``specpick profile --backend vllm --plain-url`` on each
speculative server in turn against the plain one
(a subprocess: the command is printed and is the measurement). Every level measures the same
``--prompts`` built-in prompts in waves of C requests, speculative and plain interleaved wave by
wave, EOS ignored so every request is exactly ``--max-new-tokens``; fixed sample (no early stop).
After the profiler's own tables it prints one row per level: throughput of both servers, the gain,
α and τ from the speculative server's counters. Run it alone on the machine (the servers share its
cores with anything else running).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.regret.vllm import emitted, serving
from picker.recommend.sweep_data import GridKey


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--strategies", default="ngram,vanilla", help="of ngram, vanilla (vLLM's draft_model)")
    ap.add_argument("--n", type=int, default=4, help="num_speculative_tokens")
    ap.add_argument("--zoo", default="ci")
    ap.add_argument("--task", default="code")
    ap.add_argument("--temperatures", default="0,1")
    ap.add_argument("--concurrency", default="1,2,4,8,16")
    ap.add_argument("--prompts", type=int, default=32, help="per level (>= 2x the highest level keeps it loaded)")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--python", type=Path,
                    default=Path(__file__).resolve().parents[1] / ".engines/vllm-venv/bin/python",
                    help="the vLLM venv's interpreter (scripts/engines-setup.sh vllm)")
    args = ap.parse_args()

    from picker.zoo import build_zoo

    zoo = build_zoo(args.zoo, progress=False)
    chosen = [x.strip() for x in args.strategies.split(",")]
    specs = {name: emitted(GridKey(name, args.n), str(zoo.draft)) for name in chosen}
    args.out.mkdir(parents=True, exist_ok=True)
    with serving(args.python, zoo.target, specs, args.out / "servers") as servers:
        for name in chosen:  # one strategy at a time: nothing else runs on the machine meanwhile
            print(f"{name}: speculative config {json.dumps(specs[name])}", flush=True)
            out = args.out / f"profile-{name}"
            cmd = [str(Path(sys.executable).with_name("specpick")), "profile", "--backend", "vllm",
                   "--url", servers[name].url, "--plain-url", servers["plain"].url,
                   "--strategies", name, "--tasks", args.task, "--temperatures", args.temperatures,
                   "--limit-per-task", str(args.prompts), "--max-new-tokens", str(args.max_new_tokens),
                   "--ignore-eos", "--concurrency", args.concurrency, "--no-early-stop", "--timeout", "600",
                   "--out", str(out)]
            print("$", " ".join(cmd), flush=True)
            subprocess.run(cmd, check=True)
            print_levels(json.loads((out / "summary.json").read_text()))


def print_levels(summary: dict[str, Any]) -> None:
    """One row per (temperature, level): spec and plain throughput, gain, alpha, tau."""
    bases = {(b["task"], b["temperature"], b["concurrency"]): b for b in summary["baselines"]}
    print(f"{'task':<8} {'strategy':<8} {'T':>3} {'C':>3} {'spec tok/s':>10} {'plain tok/s':>11} {'gain':>6} "
          f"{'alpha':>6} {'tau':>5} {'x plain/req':>11}")
    for c in summary["cells"]:
        b = bases.get((c["task"], c["temperature"], c["concurrency"]), {})
        print(f"{c['task']:<8} {c['strategy']:<8} {c['temperature']:>3g} {c['concurrency']:>3} "
              f"{c['throughput_tokens_per_second'] or 0:>10.1f} {b.get('throughput_tokens_per_second') or 0:>11.1f} "
              f"{c['throughput_gain_vs_plain'] or 0:>6.2f} {c['alpha']:>6.3f} {c['tau'] or 0:>5.2f} "
              f"{c['speedup_vs_plain'] or 0:>11.2f}")
    for cur in summary.get("load", []):
        print(f"crossover {cur['task']} {cur['strategy']} T={cur['temperature']:g}: {cur['crossover_note']}")


if __name__ == "__main__":
    main()

"""Profile the real Qwen2.5-Coder pair on llama.cpp's ``llama-server``: one server per configuration.

For every configuration (``vanilla:N`` = the 0.5B draft model as ``draft-simple`` with N draft
tokens, ``ngram:N`` = ``ngram-simple`` drafting N tokens, ``default`` = ``-md DRAFT --spec-type
draft-simple`` with llama.cpp's own draft settings) this starts a speculative ``llama-server`` with
the arguments ``picker.recommend.engine_configs`` emits, beside one plain server of the same target
kept up for the whole invocation, and runs ``specpick profile --backend llamacpp --plain-url`` on
the built-in prompts, so each run's tokens/s ratios are measured on the same prompts in one run.
The draft length is a server flag (per-request ``speculative.*`` fields are compiled out in this
llama.cpp: ``server-schema.cpp`` under ``#if 0``), hence one server per N.

After each run it checks the profiler's per-response sums against the server's own
``llamacpp:spec_decode_*`` counters (``run.server_report``, differenced over the run) and writes
the verdict to ``RUN/counters.json``; a mismatch exits 1. ``table`` prints α with its interval,
tokens/s and speedup per task x strategy x N x T from the runs under ``--out``.

    $ flock /work/locks/heavy.lock python scripts/real_llamacpp_grid.py run --out /work/logs/real-alpha \\
          --configs vanilla:1,vanilla:2 --server-arg=--no-repack
    $ python scripts/real_llamacpp_grid.py table --out /work/logs/real-alpha
"""

from __future__ import annotations

import argparse
import json
import shlex
import signal
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from picker.engine.plugins import load_strategies
from picker.models import Layout, default_cache, find_pair
from picker.profiler.llamacpp_server import local_server
from picker.recommend.engine_configs import ScheduleEntry, build_engine_configs

DEFAULT_SERVER = Path("/work/engines/llamacpp/bin/llama-server")
LLAMA_DEFAULT_N = 3  # common_params_speculative_draft::n_max in common/common.h of this llama.cpp
METRICS = ["--metrics"]  # the counters every run is checked against


def server_args(config: str, draft: Path) -> tuple[str, int, list[str]]:
    """(strategy, N, llama-server flags) for ``vanilla:N``, ``ngram:N`` or ``default``."""
    if config == "default":  # what llama-server does with a draft model and no draft-length flags
        return "vanilla", LLAMA_DEFAULT_N, ["-md", str(draft), "--spec-type", "draft-simple"]
    strategy, _, n_text = config.partition(":")
    n = int(n_text)
    caps = load_strategies(only_builtin=True)[strategy].capabilities
    cfg = build_engine_configs(strategy=strategy, engines=caps.engines, num_speculative_tokens=n, tree=None,
                               schedule=[ScheduleEntry(1, None, n)], draft_path=str(draft) if caps.artifact else None)
    if not cfg["llama_cpp"]["supported"]:
        raise SystemExit(f"{config}: {cfg['llama_cpp']['reason']}")
    return strategy, n, list(cfg["llama_cpp"]["args"])


def counters_agree(summary: dict[str, Any]) -> dict[str, Any]:
    """The profiler's per-response sums set against the server's counters over the run."""
    cells, report = summary["cells"], summary["run"].get("server_report") or {}
    sums = {"draft_tokens": sum(c["draft_tokens"] for c in cells),
            "accepted_tokens": sum(c["accepted_tokens"] for c in cells),
            "decode_steps": sum(c["decode_steps"] for c in cells),
            "requests": sum(c["samples"] for c in cells)}
    server = {k: report.get(k) for k in ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "accepted_per_pos")}
    ok = (sums["draft_tokens"] == server["num_draft_tokens"]
          and sums["accepted_tokens"] == server["num_accepted_tokens"]
          and server["num_drafts"] is not None and server["num_drafts"] <= sums["decode_steps"])
    return {"agree": ok, "profiler": sums, "server": server,
            "rule": "sum(draft_tokens) == num_draft_tokens, sum(accepted_tokens) == num_accepted_tokens, "
                    "num_drafts <= sum(decode_steps) (the server counts only steps that drafted)"}


def profile_command(url: str, plain_url: str | None, strategy: str, n: int, out: Path,
                    a: argparse.Namespace) -> list[str]:
    return [sys.executable, "-c", "from picker.cli.main import app; app()", "profile", "--backend", "llamacpp",
            "--url", url, *(["--plain-url", plain_url] if plain_url else []), "--strategies", strategy,
            "--num-draft-tokens", str(n),
            "--temperatures", a.temperatures, "--limit-per-task", str(a.limit_per_task),
            "--max-new-tokens", str(a.max_new_tokens), "--ignore-eos", "--no-early-stop",
            "--concurrency", str(a.slots), "--no-plot", "--quiet", "--out", str(out),
            *(["--tasks", a.tasks] if a.tasks else [])]


def run(a: argparse.Namespace) -> int:
    pair = find_pair("qwen2.5-coder")
    cache = default_cache()
    target, draft = Layout(pair.target, cache).gguf, Layout(pair.draft, cache).gguf
    a.out.mkdir(parents=True, exist_ok=True)
    extra = list(a.server_arg)
    failed = 0
    with ExitStack() as stack:
        plain_url = None if a.no_plain else stack.enter_context(
            local_server(a.server, target, [*METRICS, *extra], a.out / f"plain-np{a.slots}.log",
                         threads=a.threads, slots=a.slots))
        for config in a.configs.split(","):
            strategy, n, args = server_args(config, draft)
            name = f"{config.replace(':', '-N')}-np{a.slots}"
            out = a.out / name
            if (out / "counters.json").exists() and not a.redo:
                print(f"{name}: done already ({out}); --redo to measure again", flush=True)
                continue
            if a.redo and out.exists():  # the profiler refuses a folder holding records: keep the old run aside
                kept = a.out / "earlier" / f"{name}-{time.strftime('%Y%m%dT%H%M%S')}"  # out of rows()' glob
                kept.parent.mkdir(exist_ok=True)
                out.rename(kept)
                print(f"{name}: the earlier run moved to {kept}", flush=True)
            with local_server(a.server, target, [*METRICS, *args, *extra], a.out / f"{name}.log",
                              threads=a.threads, slots=a.slots) as url:
                cmd = profile_command(url, plain_url, strategy, n, out, a)
                start = time.monotonic()
                proc = subprocess.run(cmd, check=False)
            if proc.returncode != 0:
                print(f"{name}: specpick profile exited {proc.returncode}", flush=True)
                failed += 1
                continue
            summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
            check = counters_agree(summary)
            check.update(command=shlex.join(cmd[3:]), server_args=args + extra,
                         wall_s=round(time.monotonic() - start, 1))
            (out / "counters.json").write_text(json.dumps(check, indent=1) + "\n", encoding="utf-8")
            print(f"{name}: counters agree={check['agree']} {check['profiler']} vs {check['server']} "
                  f"({check['wall_s']} s)", flush=True)
            failed += not check["agree"]
    return 1 if failed else 0


def rows(out: Path) -> list[dict[str, Any]]:
    """One row per cell of every run under ``out``, with the run's plain baseline beside it."""
    found = []
    for summary_path in sorted(out.glob("*/summary.json")):
        summary = json.loads(summary_path.read_text(encoding="utf-8"))
        plain = {(b["task"], b["temperature"]): b for b in summary["baselines"]}
        counters = summary_path.with_name("counters.json")
        agree = json.loads(counters.read_text())["agree"] if counters.exists() else None
        for c in summary["cells"]:
            b = plain.get((c["task"], c["temperature"]), {})
            found.append({"run": summary_path.parent.name, "task": c["task"], "strategy": c["strategy"],
                          "n": c["num_draft_tokens"], "t": c["temperature"], "alpha": c["alpha"],
                          "alpha_ci": c["alpha_ci"], "tau": c["tau"], "tps": c["tokens_per_second"],
                          "plain_tps": b.get("tokens_per_second"), "speedup": c["speedup_vs_plain"],
                          "samples": c["samples"], "counters_agree": agree})
    return found


def table(a: argparse.Namespace) -> int:
    found = rows(a.out)
    if a.json:
        print(json.dumps(found, indent=1))
        return 0
    print("| run | task | T | alpha [95% CI] | tau | spec tok/s | plain tok/s | speedup | counters |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in sorted(found, key=lambda r: (r["strategy"], r["n"], r["run"], r["t"], r["task"])):
        lo, hi = r["alpha_ci"]
        print(f"| {r['run']} | {r['task']} | {r['t']:g} | {r['alpha']:.3f} [{lo:.3f}, {hi:.3f}] | {r['tau']:.2f} "
              f"| {r['tps']:.2f} | {r['plain_tps'] or float('nan'):.2f} | {r['speedup'] or float('nan'):.3f} "
              f"| {'agree' if r['counters_agree'] else r['counters_agree']} |")
    return 0


def _rebuilt(run: Path) -> dict[str, Any]:
    """A run's summary rebuilt from its records with today's profiler code; records written before
    the llama.cpp source counted drafting steps get them from their drafted tokens, as it now does."""
    from dataclasses import replace

    from picker.profiler.llamacpp import estimated_draft_steps
    from picker.profiler.records import read_records
    from picker.profiler.summary import build_summary

    records, stops, _, _ = read_records(run / "records.jsonl")
    records = [replace(r, draft_steps=estimated_draft_steps(r.steps, r.drafted, r.cell.num_draft_tokens))
               if r.source == "llamacpp-timings" and r.draft_steps is None else r for r in records]
    old = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    return build_summary(records, stops, old["run"])


def merge(a: argparse.Namespace) -> int:
    """One summary.json from several runs of one server build and target (recommend reads one file):
    their cells and baselines side by side, ``run`` from the first, the runs named in ``merged_from``."""
    runs = [_rebuilt(d) if a.rebuild else json.loads((d / "summary.json").read_text(encoding="utf-8"))
            for d in a.runs]
    models = {r["run"]["provenance"]["model"]["name"] for r in runs}
    builds = {r["run"]["provenance"].get("engine_version") for r in runs}
    if len(models) != 1 or len(builds) != 1:
        raise SystemExit(f"runs of different targets or builds: {sorted(models)} {sorted(map(str, builds))}")
    out = dict(runs[0])
    out["cells"] = [c for r in runs for c in r["cells"]]
    out["baselines"] = [b for r in runs for b in r["baselines"]]
    out["run"] = dict(runs[0]["run"], merged_from=[str(d) for d in a.runs])
    out["run"].pop("server_report", None)  # per run; each run's counters.json keeps its check
    a.into.parent.mkdir(parents=True, exist_ok=True)
    a.into.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(f"{a.into}: {len(out['cells'])} cells from {len(runs)} runs")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="start servers and profile each configuration")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--configs", default="vanilla:1,vanilla:2,vanilla:4,vanilla:8,ngram:1,ngram:2,ngram:4,ngram:8")
    r.add_argument("--server", type=Path, default=DEFAULT_SERVER)
    r.add_argument("--threads", type=int, default=2, help="-t (the draft model's -td defaults to it)")
    r.add_argument("--slots", type=int, default=1, help="-np and the profiler's --concurrency")
    r.add_argument("--temperatures", default="0,0.7")
    r.add_argument("--tasks", default="", help="comma list (default: every built-in task type)")
    r.add_argument("--limit-per-task", type=int, default=1)
    r.add_argument("--max-new-tokens", type=int, default=48)
    # alpha only (no tokens/s ratios): half the time; scripts/real_llamacpp_regret.py times the grid interleaved
    r.add_argument("--no-plain", action="store_true", help="no plain server, no --plain-url")
    r.add_argument("--redo", action="store_true", help="measure configurations already measured again")
    # e.g. --server-arg=--no-repack: this build's AMX repacking crashes on these Q4_K_M files (seen here)
    r.add_argument("--server-arg", action="append", default=[], help="extra llama-server flag (both servers)")
    t = sub.add_parser("table", help="print the measured grid")
    t.add_argument("--out", type=Path, required=True)
    t.add_argument("--json", action="store_true")
    m = sub.add_parser("merge", help="merge runs' summaries into one file for recommend")
    m.add_argument("runs", type=Path, nargs="+")
    m.add_argument("--into", type=Path, required=True)
    m.add_argument("--rebuild", action="store_true", help="rebuild each run's summary from its records first")
    a = ap.parse_args()
    # SIGTERM (timeout, flock's holder killed) must still stop the servers: finally blocks run on SystemExit.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    return {"run": run, "table": table, "merge": merge}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())

"""Fit what a speculative step costs beyond a plain one on a live engine, from `specpick profile` runs.

Each ``--fit`` names an engine, a strategy, a concurrency and the run folders (``--out`` of
``specpick profile --plain-url``, interleaved with plain decoding) to read; every speculative record of
that strategy at that concurrency becomes a row against plain's pace in its own round
(``picker.profiler.overhead.observations``), and the rows are fitted (``fit_overhead``). The output
keeps every row beside its fit, so a test refits them (tests/test_overhead.py), and each fit's
source: the run folders' ``specpick profile`` command lines, the machine's load, and a citation.

    $ python scripts/fit_engine_overhead.py --out policies/data/engine_overhead.json \\
          --fit "llama_cpp|ngram|1|/work/logs/latency-real3/grid/ngram-N1-np1,/work/logs/latency-real3/grid/ngram-N4-np1" \\
          --note "real Qwen2.5-Coder pair, -t 1, load average 4-6 on 2 cores"

A source may also be a regret run's rounds, ``RUN.rounds.jsonl@ngram:4`` (``rounds_observations``).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from picker.profiler.overhead import Observation, fit_overhead, observations, pooled
from picker.profiler.records import read_records

ROUND = 6  # decimals kept per row: the shipped fit is the fit of the shipped (rounded) rows


def rounds_observations(path: Path, config: str) -> list[Observation]:
    """Rows from ``scripts/real_llamacpp_regret.py``'s rounds (``*.rounds.jsonl``): each wave of
    ``config`` (``ngram:N``, ...) against plain's wave of the same round, on llama.cpp's own decode clock.
    A wave's decode steps are its decode tokens less its accepted drafts (a step emits one token
    besides what it accepted); llama.cpp reports drafted tokens, not drafting steps, so those are
    ceil(drafted / N), exact where every draft is N long (``ngram-simple`` drafts its size-m)."""
    n = int(config.partition(":")[2])
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        ours, plain = r["waves"][config], r["waves"]["plain"]
        steps = ours["decode_tokens"] - ours["accepted"]
        out.append(Observation(steps=steps, draft_steps=-(-ours["drafted"] // n), drafted=ours["drafted"],
                               seconds=round(ours["decode_s"], ROUND),
                               plain_step_s=round(plain["decode_s"] / plain["decode_tokens"], ROUND),
                               label=f"{config} {r['task']} T={r['temperature']:g} prompts={len(r['prompts'])}"))
    return out


def one_fit(spec: str, note: str) -> dict[str, Any]:
    """``ENGINE|STRATEGY|CONCURRENCY|SOURCE[,SOURCE...]``: a SOURCE is a profile run folder, or
    ``ROUNDS.rounds.jsonl@CONFIG`` (a regret run's rounds, its waves of CONFIG)."""
    engine, strategy, concurrency, sources = spec.split("|")
    rows: list[Observation] = []
    commands: list[Any] = []
    for source in sources.split(","):
        if "@" in source:
            path, _, config = source.partition("@")
            rows += rounds_observations(Path(path), config)
            result = Path(path.removesuffix(".rounds.jsonl") + ".json")
            commands.append(json.loads(result.read_text())["command"] if result.exists() else path)
            continue
        run = Path(source)
        records, _, _, _ = read_records(run / "records.jsonl")
        keep = [r for r in records if r.cell.concurrency == int(concurrency)
                and (r.cell.is_plain or r.cell.strategy == strategy)]
        # A cell's requests summed (pooled): on a loaded machine single requests swing several-fold.
        rows += [replace(o, seconds=round(o.seconds, ROUND), plain_step_s=round(o.plain_step_s, ROUND))
                 for o in pooled(observations(keep))]
        counters = run / "counters.json"  # scripts/real_llamacpp_grid.py keeps the exact command there
        meta = json.loads((run / "run.json").read_text(encoding="utf-8"))
        commands.append(json.loads(counters.read_text())["command"] if counters.exists() else
                        {k: meta.get(k) for k in ("backend", "strategies", "num_draft_tokens", "tasks", "temperatures",
                                                  "limit_per_task", "max_new_tokens", "concurrency", "order")})
    fit = fit_overhead(rows)
    return {"engine": engine, "strategy": strategy, "concurrency": int(concurrency), "fit": fit.as_dict(),
            "source": {"inputs": sources.split(","), "commands": commands, "note": note},
            "rows": [asdict(r) for r in rows]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--fit", action="append", required=True, help="ENGINE|STRATEGY|CONCURRENCY|SOURCE[,SOURCE...]")
    ap.add_argument("--note", action="append", default=[], help="one per --fit: what the machine was doing, a citation")
    a = ap.parse_args()
    notes = a.note + [""] * (len(a.fit) - len(a.note))
    fits = [one_fit(spec, note) for spec, note in zip(a.fit, notes)]
    old = json.loads(a.out.read_text(encoding="utf-8")) if a.out.exists() else {}
    keep = [f for f in old.get("fits", []) if (f["engine"], f["strategy"], f["concurrency"])
            not in {(f2["engine"], f2["strategy"], f2["concurrency"]) for f2 in fits}]
    doc = {"schema": "specpicker.engine_overhead/1",
           "model": "step / plain_step = 1 + per_step + per_draft_step * [step drafted] + per_draft_token * "
                    "draft tokens verified; constants in plain decode steps, 95% bootstrap intervals over rows "
                    "(picker.profiler.overhead, docs/engine-overhead.md)",
           "fits": keep + fits}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    for f in fits:
        print(f["engine"], f["strategy"], f"C={f['concurrency']}", json.dumps(f["fit"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

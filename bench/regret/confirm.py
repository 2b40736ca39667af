"""Re-measure the finalists of every held-out workload on fresh prompts, interleaved, on one thread.

    $ python -m bench.regret.confirm --regret runs/regret/regret.json --out runs/confirm

For each workload, every configuration named in ``regret.json`` (the policy's and the analytic
model's choices, the sweep's best, the best on average, the engine defaults) plus plain decoding
runs on prompts the sweep never saw (``--first-prompt`` onwards). Prompt by prompt, each
configuration runs once, in an order rotated per prompt; the whole pass repeats ``--passes``
times. Per pass the speedup is (Σ tokens / Σ seconds) over plain's; the reported figure is the
median over passes. Records are the profiler's append-only JSONL: a killed run resumes.

``--reuse DIR`` takes an earlier confirmation's records for every workload whose set of
configurations is unchanged (e.g. after re-running ``regret.py``); a workload with any new or
dropped configuration is measured again whole, so each workload's ratios come from one
interleaved run.

The sweep's best is re-measured here rather than quoted from the sweep: the maximum of noisy
measurements is biased upward (the winner's curse), a re-measurement is not.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.regret.hf_assisted import AssistedDrafter, Schedule
from picker.engine.plugins import load_strategies
from picker.profiler.records import CellKey, Record, RecordLog
from picker.profiler.source import GenParams
from picker.profiler.sweep import SweepSource
from picker.profiler.torch_source import _make_drafter
from picker.tasks import Prompt, builtin_prompts

HF_PREFIX = "hf-"


class BenchSource(SweepSource):
    """The sweep's source, plus Hugging Face's assisted-generation rules on the draft model."""

    def _drafter(self, cell: CellKey) -> tuple[Any, Any, int]:
        if not cell.strategy.startswith(HF_PREFIX):
            return super()._drafter(cell)
        plugin = load_strategies()["vanilla"]
        if cell not in self._drafters:
            base, _ = _make_drafter(plugin, self.target, self.artifacts["vanilla"], 1)
            kind = "heuristic" if cell.strategy.endswith("heuristic") else "constant"
            self._drafters[cell] = (AssistedDrafter(base, Schedule(kind, cell.num_draft_tokens)), 64)
        drafter, max_draft = self._drafters[cell]
        return drafter, plugin.capabilities, max_draft


def plan(regret: dict[str, Any]) -> dict[tuple[str, float], dict[str, CellKey]]:
    """Per workload: configuration label -> cell to measure (plain included)."""
    out: dict[tuple[str, float], dict[str, CellKey]] = defaultdict(dict)
    for row in regret["rows"]:
        key = (row["task"], row["temperature"])
        out[key]["plain"] = CellKey(row["task"], "plain", row["temperature"], 0)
        for cfg in row["configs"].values():
            if cfg["strategy"] != "plain":
                out[key][cfg["label"]] = CellKey(row["task"], cfg["strategy"], row["temperature"], cfg["n"],
                                                 cfg["tree"])
    return out


def reuse(log: RecordLog, earlier: Path, todo: dict[tuple[str, float], dict[str, CellKey]],
          prompt_ids: dict[str, set[str]]) -> list[str]:
    """Copy ``earlier``'s records of the workloads whose configurations are unchanged and complete."""
    from picker.recommend.sweep_data import records_by_workload

    by_workload = records_by_workload(earlier)
    done, have = [], log.done()
    for key, cells in sorted(todo.items()):
        recs = by_workload.get(key, [])
        wanted = {(c.id, pid) for c in cells.values() for pid in prompt_ids[key[0]]}
        got = {(r.cell.id, pid) for r in recs for pid in r.prompt_ids}
        if not recs or got != wanted or wanted & have:
            continue
        for r in recs:
            log.append(r)
        done.append(f"{key[0]}@T={key[1]:g}")
    return done


def fresh_prompts(task: str, first: int, count: int, passes: int) -> list[list[Prompt]]:
    base = builtin_prompts([task], first + count, 0)[first:]
    return [[Prompt(f"{p.id}@pass{r}", p.task, p.turns, p.category, p.raw) for p in base] for r in range(passes)]


def measure(source: BenchSource, log: RecordLog, cells: dict[str, CellKey], passes: list[list[Prompt]],
            params: GenParams) -> None:
    done = log.done()
    order = list(cells.values())
    for prompts in passes:
        for i, prompt in enumerate(prompts):
            rotated = order[i % len(order):] + order[: i % len(order)]
            for cell in rotated:
                if (cell.id, prompt.id) in done:
                    continue
                for record in source.measure(cell, [prompt], params):
                    log.append(record)


def speedups(records: list[Record], cells: dict[str, CellKey], passes: int) -> dict[str, dict[str, Any]]:
    """Median over passes of the pass's tokens/s ratio to plain, per configuration label."""
    per: dict[tuple[str, int], list[Record]] = defaultdict(list)
    for r in records:
        per[(r.cell.id, int(r.prompt_ids[0].rsplit("@pass", 1)[1]))].append(r)

    def tps(cell: CellKey, p: int) -> float | None:
        rs = per.get((cell.id, p), [])
        wall = sum(r.wall_s for r in rs)
        return sum(r.tokens for r in rs) / wall if wall else None

    out = {}
    for label, cell in cells.items():
        ratios = [tps(cell, p) / tps(cells["plain"], p) for p in range(passes)
                  if tps(cell, p) and tps(cells["plain"], p)]
        out[label] = {"speedup": statistics.median(ratios) if ratios else None, "passes": ratios,
                      "tokens_per_second": statistics.median([t for p in range(passes) if (t := tps(cell, p))] or [0])}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--regret", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--first-prompt", type=int, default=8, help="prompts before this index were swept")
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--reuse", type=Path, default=None,
                    help="an earlier confirmation folder: reuse its records of unchanged workloads")
    args = ap.parse_args()
    regret = json.loads(args.regret.read_text())
    run = json.loads((Path(regret["sweeps"][0]) / "run.json").read_text())
    artifacts = {k: Path(v) for k, v in run["source"]["artifacts"].items()}
    todo = plan(regret)
    source = BenchSource(Path(run["target_path"]), artifacts, threads=1, grid=[])
    args.out.mkdir(parents=True, exist_ok=True)
    log = RecordLog.open(args.out / "records.jsonl", resume=True)
    params = GenParams(args.max_new_tokens, 0)
    if args.reuse is not None:
        ids = {task: {p.id for ps in fresh_prompts(task, args.first_prompt, args.prompts, args.passes) for p in ps}
               for task, _ in todo}
        print("reused from", args.reuse, ":", reuse(log, args.reuse, todo, ids), flush=True)
    results = {}
    try:
        for (task, temp), cells in sorted(todo.items()):
            passes = fresh_prompts(task, args.first_prompt, args.prompts, args.passes)
            measure(source, log, cells, passes, params)
            mine = [r for r in log.records if r.cell.task == task and r.cell.temperature == temp]
            results[f"{task}@T={temp:g}"] = speedups(mine, cells, args.passes)
            print(task, temp, {k: round(v["speedup"] or 0, 3) for k, v in results[f"{task}@T={temp:g}"].items()},
                  flush=True)
    finally:
        log.close()
    (args.out / "confirm.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

"""Target forwards to reach α ± 0.03: sequential stopping against a fixed-sample design, one run.

    $ python bench/bench_profiler.py --model zoo --strategies ngram,vanilla,lookahead --limit 40
    $ python bench/bench_profiler.py --from runs/fixed       # reuse a fixed-sample run's records

1. A fixed-sample run measures every prompt (``--limit`` per task) of every cell, no stopping.
2. The same records are replayed through the real profiler with sequential stopping on (a
   :class:`ReplaySource` answers each (cell, prompt) with its recorded measurement), so both
   designs see the very same generations and the comparison carries no sampling noise.
3. The fixed-sample baseline is that first run as performed: every prompt of every cell.

The table gives, per cell, the prompts and forwards at which ± target was first reached, what
sequential stopping spent (and why it stopped), and the ratio of total forwards: sequential / fixed.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from picker.profiler.records import CellKey, Record, read_records
from picker.profiler.run import ProfileConfig, Profiler
from picker.profiler.source import DraftConfig, GenParams
from picker.profiler.stats import cell_stats
from picker.profiler.stopping import StopRule
from picker.tasks import Prompt, builtin_prompts


class ReplaySource:
    """A source that answers from a finished run's records instead of generating."""

    name = "replay"
    concurrency = 1

    def __init__(self, records: Sequence[Record]) -> None:
        self.by_key = {(r.cell, r.prompt_ids[0]): r for r in records}
        self.cells = sorted({r.cell for r in records})
        self.plain = any(c.is_plain for c in self.cells)

    def describe(self) -> dict[str, Any]:
        return {"backend": "replay", "records": len(self.by_key)}

    def configs(self, strategies: Sequence[str], num_draft_tokens: Sequence[int]) -> list[DraftConfig]:
        shapes = {(c.strategy, c.num_draft_tokens, c.tree) for c in self.cells if not c.is_plain}
        return [DraftConfig(s, n, t) for s, n, t in sorted(shapes, key=str)]

    def measure(self, cell: CellKey, prompts: Sequence[Prompt], params: GenParams) -> Iterator[Record]:
        for p in prompts:
            if (cell, p.id) in self.by_key:
                yield self.by_key[(cell, p.id)]

    def close(self) -> None:
        return None


def fixed_run(args: argparse.Namespace, out: Path) -> list[Record]:
    """Measure every prompt of every cell (no stopping) with the torch backend."""
    from picker.profiler.options import resolve_model
    from picker.profiler.torch_source import TorchSource

    target, artifacts = resolve_model(args.model, {})
    source = TorchSource(target, artifacts, threads=1)
    prompts = {t: builtin_prompts([t], args.limit) for t in args.tasks}
    cfg = ProfileConfig(out=out, tasks=args.tasks, temperatures=args.temperatures, strategies=args.strategies,
                        num_draft_tokens=[args.n], max_new_tokens=args.max_new_tokens, limit_per_task=args.limit,
                        rule=StopRule(early=False), plot=False,
                        meta={"tasks": args.tasks, "temperatures": args.temperatures, "limit_per_task": args.limit})
    Profiler(source, prompts, cfg).run()
    return read_records(out / "records.jsonl")[0]


def sequential(records: list[Record], tasks: list[str], temps: list[float], limit: int, target: float,
               min_samples: int) -> dict[str, Any]:
    """Replay ``records`` through the profiler with sequential stopping; its summary cells by id."""
    prompt_ids = defaultdict(list)
    for r in records:
        if r.prompt_ids[0] not in prompt_ids[r.cell.task]:
            prompt_ids[r.cell.task].append(r.prompt_ids[0])
    prompts = {t: [Prompt(pid, t, ("",)) for pid in ids] for t, ids in prompt_ids.items()}
    with tempfile.TemporaryDirectory() as tmp:
        cfg = ProfileConfig(out=Path(tmp), tasks=tasks, temperatures=temps, strategies=[], num_draft_tokens=[],
                            max_new_tokens=0, limit_per_task=limit, plot=False,
                            rule=StopRule(ci_target=target, min_samples=min_samples))
        summary = Profiler(ReplaySource(records), prompts, cfg).run()
    return {CellKey(c["task"], c["strategy"], c["temperature"], c["num_draft_tokens"], c["tree"]).id: c
            for c in summary["cells"]} | {CellKey(b["task"], "plain", b["temperature"], 0).id: b
                                           for b in summary["baselines"]}


def prefix_needs(records: list[Record], target: float, min_samples: int) -> dict[CellKey, tuple[int | None, list[int]]]:
    """Per cell: prompts needed to reach ± target (None: never), and cumulative forwards by prefix."""
    by_cell: dict[CellKey, list[Record]] = defaultdict(list)
    for r in records:
        by_cell[r.cell].append(r)
    out = {}
    for cell, recs in by_cell.items():
        forwards = [sum(r.forwards for r in recs[:n]) for n in range(len(recs) + 1)]
        need = None
        if not cell.is_plain:
            for n in range(min_samples, len(recs) + 1):
                if cell_stats(recs[:n], cell.id).half_width <= target:
                    need = n
                    break
        out[cell] = (need, forwards)
    return out


def report(records: list[Record], seq: dict[str, Any], target: float, min_samples: int) -> dict[str, Any]:
    """Print the comparison table; return its totals.

    The fixed-sample baseline is the run as performed: every prompt of every cell, the budget a
    user must provision when the sample size that reaches ± target is not known in advance. For
    reference the table also gives, per cell, the prompts and forwards at which ± target was
    first reached (the oracle a fixed design cannot know).
    """
    needs = prefix_needs(records, target, min_samples)
    table = Table(title=f"target forwards to reach alpha +/- {target}: sequential stopping vs fixed sample")
    for col in ("cell", "n to target", "fwd to target", "sequential n", "sequential fwd", "stopped",
                "fixed n", "fixed fwd"):
        table.add_column(col, justify="left" if col in ("cell", "stopped") else "right")
    totals = {"sequential": 0, "fixed": 0, "sequential_strategies": 0, "fixed_strategies": 0}
    reached = {"sequential": 0, "fixed": 0, "cells": 0}
    for cell in sorted(needs):
        need, forwards = needs[cell]
        s = seq.get(cell.id, {})
        spent, fixed = s.get("target_forwards", 0), forwards[-1]
        totals["sequential"] += spent
        totals["fixed"] += fixed
        if not cell.is_plain:
            totals["sequential_strategies"] += spent
            totals["fixed_strategies"] += fixed
            reached["cells"] += 1
            reached["fixed"] += need is not None
            reached["sequential"] += s.get("stopped") == "precision"
        table.add_row(cell.id, str(need or "-"), str(forwards[need] if need else "-"), str(s.get("samples", 0)),
                      str(spent), str(s.get("stopped") or ""), str(len(forwards) - 1), str(fixed))
    Console(width=170).print(table)
    ratio = totals["sequential"] / totals["fixed"] if totals["fixed"] else float("nan")
    print(f"target forwards, all cells: sequential {totals['sequential']}, fixed sample {totals['fixed']}, "
          f"ratio {ratio:.3f}")
    print(f"target forwards, strategy cells only: sequential {totals['sequential_strategies']}, "
          f"fixed {totals['fixed_strategies']}")
    print(f"strategy cells at +/- {target}: fixed sample {reached['fixed']}/{reached['cells']}; sequential "
          f"{reached['sequential']} by precision, the rest stopped as unable to change the decision or out of "
          "prompts")
    return {**totals, "ratio": ratio, **{f"reached_{k}": v for k, v in reached.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="zoo")
    parser.add_argument("--strategies", default="ngram,vanilla,lookahead")
    parser.add_argument("--tasks", default="code,structured,math,summarization,creative")
    parser.add_argument("--temperatures", default="0,1")
    parser.add_argument("--n", type=int, default=4, help="draft length")
    parser.add_argument("--limit", type=int, default=40, help="prompts per task in the fixed-sample run")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--ci-target", type=float, default=0.03)
    parser.add_argument("--min-samples", type=int, default=8)
    parser.add_argument("--out", type=Path, default=None, help="keep the fixed-sample run here")
    parser.add_argument("--from", dest="source", type=Path, default=None, help="reuse a fixed-sample run folder")
    args = parser.parse_args(argv)
    args.strategies = args.strategies.split(",")
    args.tasks = args.tasks.split(",")
    args.temperatures = [float(t) for t in args.temperatures.split(",")]
    if args.source is not None:
        records = read_records(args.source / "records.jsonl")[0]
        run = json.loads((args.source / "run.json").read_text())
        args.tasks, args.temperatures = run.get("tasks", args.tasks), run.get("temperatures", args.temperatures)
        args.limit = run.get("limit_per_task", args.limit)
    else:
        out = args.out or Path(tempfile.mkdtemp(prefix="bench-profiler-"))
        records = fixed_run(args, out)
        print(f"fixed-sample run: {out}", file=sys.stderr)
    seq = sequential(records, args.tasks, args.temperatures, args.limit, args.ci_target, args.min_samples)
    report(records, seq, args.ci_target, args.min_samples)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The noise floor of the regret bench's error figure: how far the sweep's labels are from themselves.

Every grid cell's label is the speedup the sweep measured on its 8 prompts. Prompts differ a lot
(one repeats itself and prompt lookup flies, the next does not), so a label is itself an estimate.
Two figures, from the sweep's records alone (no model involved):

- *split halves*: the speedup on k of a cell's prompts against that on the others (every split,
  the configuration and plain decoding on the same prompts); median over splits, then over cells.
- *bootstrap*: the 8 prompts resampled with replacement (configuration and plain together); the
  median relative distance of the resampled speedup from the label, median over cells. A perfect
  predictor of each cell's expected speedup would show roughly this median error against the labels.

With replicate sweeps (``--replicate``: the same grid on other prompts, another session) the label
is the geometric mean over the runs (as ``data.load_sweeps`` builds it); the bootstrap then resamples
each run's prompts apart, and a third figure sets each run's label against the other's (other
prompts *and* another session: the plainest check of how far an 8-prompt label moves).

    $ python -m bench.regret.label_noise --sweep runs/sweep-a --sweep runs/sweep-b
    $ python -m bench.regret.label_noise --sweep runs/sweep-a --sweep runs/sweep-b --replicate runs/sweep-c0
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from picker.profiler.records import Record
from picker.recommend.sweep_data import GridKey, load_sweeps

Totals = dict[str, tuple[float, float]]  # prompt id -> (tokens, wall seconds)


def cell_totals(records: list[Record]) -> tuple[dict[GridKey, Totals], Totals | None]:
    """Per grid configuration, each prompt's (tokens, seconds); and plain decoding's (one sweep run)."""
    cells: dict[GridKey, Totals] = defaultdict(dict)
    for r in records:
        cells[GridKey(r.cell.strategy, r.cell.num_draft_tokens, r.cell.tree)][r.prompt_ids[0]] = (
            float(r.tokens), float(r.wall_s))
    plain = cells.pop(GridKey("plain", 0), None)
    return dict(cells), plain


def speedup(cfg: Totals, plain: Totals, prompts: Sequence[str]) -> float:
    """Σ tokens / Σ seconds of the configuration over plain's, on the same prompts (the sweep's label)."""
    def rate(t: Totals) -> float:
        return sum(t[p][0] for p in prompts) / sum(t[p][1] for p in prompts)

    return rate(cfg) / rate(plain)


def split_error(cfg: Totals, plain: Totals, prompts: Sequence[str], k: int) -> float:
    """Median |S(part) / S(rest) − 1| over every way to take ``k`` of ``prompts`` as the part."""
    errs = []
    for part in itertools.combinations(prompts, k):
        rest = [p for p in prompts if p not in part]
        errs.append(abs(speedup(cfg, plain, part) / speedup(cfg, plain, rest) - 1.0))
    return statistics.median(errs)


Run = tuple[Totals, Totals, list[str]]  # (configuration, plain, the prompts both ran) of one sweep run


def one_run(cells: dict[GridKey, Totals], plain: Totals | None, g: GridKey, least: int = 4) -> Run | None:
    """Configuration ``g`` of one sweep run with its plain baseline on the prompts both ran (at
    least ``least`` of them), or None."""
    if plain is None or g not in cells:
        return None
    prompts = sorted(set(cells[g]) & set(plain))
    return (cells[g], plain, prompts) if len(prompts) >= least else None


def pooled(runs: Sequence[Run], picks: Sequence[Sequence[str]]) -> float:
    """The label: geometric mean over runs of each run's speedup on its ``picks``."""
    return statistics.geometric_mean(speedup(cfg, plain, pick) for (cfg, plain, _), pick in zip(runs, picks))


def bootstrap_error(runs: Sequence[Run], rng: random.Random, draws: int) -> float:
    """Median |S* / S − 1| of the label S over resamples S* of each run's prompts."""
    full = pooled(runs, [prompts for _, _, prompts in runs])
    errs = []
    for _ in range(draws):
        picks = [[rng.choice(prompts) for _ in prompts] for _, _, prompts in runs]
        errs.append(abs(pooled(runs, picks) / full - 1.0))
    return statistics.median(errs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sweep", type=Path, action="append", required=True, help="sweep folder (repeatable)")
    ap.add_argument("--replicate", type=Path, action="append", default=[],
                    help="a replicate sweep on other prompts (repeatable), as for bench.regret.regret")
    ap.add_argument("--draws", type=int, default=400, help="bootstrap resamples per cell")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    data = load_sweeps(args.sweep, args.replicate)
    rng = random.Random(args.seed)
    halves: dict[int, list[float]] = defaultdict(list)
    boot: list[float] = []
    between: list[float] = []
    for w in data.workloads.values():
        sessions = [cell_totals(recs) for recs in [w.records, *w.replicates]]
        for g in sessions[0][0]:
            first = one_run(*sessions[0], g)
            if first is None:
                continue
            others = [run for s in sessions[1:] if (run := one_run(*s, g)) is not None]
            cfg, plain, prompts = first
            for k in sorted({3, len(prompts) // 2}):
                halves[k].append(split_error(cfg, plain, prompts, k))
            boot.append(bootstrap_error([first, *others], rng, args.draws))
            between += [abs(speedup(cfg, plain, prompts) / speedup(c, p, ps) - 1.0) for c, p, ps in others]
    print(f"{len(boot)} grid cells with their plain baseline on the same prompts; "
          f"{1 + len(args.replicate)} run(s) per label")
    print("| figure | median over cells |")
    print("|---|---|")
    for k, errs in sorted(halves.items()):
        print(f"| speedup on {k} prompts vs the cell's other prompts (first sweep) | {statistics.median(errs):.1%} |")
    if between:
        print("| first sweep's label vs a replicate's (other prompts, other session) | "
              f"{statistics.median(between):.1%} |")
    floor = statistics.median(boot)
    print(f"| label vs prompt-bootstrap of itself (a perfect predictor's error, roughly) | {floor:.1%} |")


if __name__ == "__main__":
    main()

"""The noise floor of the regret bench's error figure: how far the sweep's labels are from themselves.

Every grid cell's label is the speedup the sweep measured on its 8 prompts. Prompts differ a lot
(one repeats itself and prompt lookup flies, the next does not), so a label is itself an estimate.
Two figures, from the sweep's records alone (no model involved):

- *split halves*: the speedup on k of a cell's prompts against that on the others (every split,
  the configuration and plain decoding on the same prompts); median over splits, then over cells.
- *bootstrap*: the 8 prompts resampled with replacement (configuration and plain together); the
  median relative distance of the resampled speedup from the label, median over cells. A perfect
  predictor of each cell's expected speedup would show roughly this median error against the labels.

    $ python -m bench.regret.label_noise --sweep runs/sweep-a --sweep runs/sweep-b
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from bench.regret.data import GridKey, Workload, load_sweeps

Totals = dict[str, tuple[float, float]]  # prompt id -> (tokens, wall seconds)


def cell_totals(w: Workload) -> tuple[dict[GridKey, Totals], Totals | None]:
    """Per grid configuration, each prompt's (tokens, seconds); and plain decoding's."""
    cells: dict[GridKey, Totals] = defaultdict(dict)
    for r in w.records:
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


def bootstrap_error(cfg: Totals, plain: Totals, prompts: Sequence[str], rng: random.Random, draws: int) -> float:
    """Median |S* / S − 1| of the label S over prompt resamples S*."""
    full = speedup(cfg, plain, prompts)
    errs = []
    for _ in range(draws):
        pick = [rng.choice(prompts) for _ in prompts]
        errs.append(abs(speedup(cfg, plain, pick) / full - 1.0))
    return statistics.median(errs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sweep", type=Path, action="append", required=True, help="sweep folder (repeatable)")
    ap.add_argument("--draws", type=int, default=400, help="bootstrap resamples per cell")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    data = load_sweeps(args.sweep)
    rng = random.Random(args.seed)
    halves: dict[int, list[float]] = defaultdict(list)
    boot: list[float] = []
    for w in data.workloads.values():
        cells, plain = cell_totals(w)
        if plain is None:
            continue
        for cfg in cells.values():
            prompts = sorted(set(cfg) & set(plain))
            if len(prompts) < 4:
                continue
            for k in (3, len(prompts) // 2):
                halves[k].append(split_error(cfg, plain, prompts, k))
            boot.append(bootstrap_error(cfg, plain, prompts, rng, args.draws))
    print(f"{len(boot)} grid cells with their plain baseline on the same prompts")
    print("| figure | median over cells |")
    print("|---|---|")
    for k, errs in sorted(halves.items()):
        print(f"| speedup on {k} prompts vs the cell's other prompts | {statistics.median(errs):.1%} |")
    floor = statistics.median(boot)
    print(f"| label vs prompt-bootstrap of itself (a perfect predictor's error, roughly) | {floor:.1%} |")


if __name__ == "__main__":
    main()

"""Gains of each strategy over plain decoding in a torch profile run, paired by prompt, with intervals.

    python bench/paired_gains.py RUN_FOLDER        # the --out of `specpick profile --backend torch`

The reference profiler times plain decoding and every strategy on the same prompts, interleaved.
Per cell (task, temperature, strategy, N) this prints acceptance (accepted / drafted), the gain in
target forwards per output token (load-independent: the same text, counted steps) and the
wall-clock tokens/s gain (what the machine's load also moves), each with a 95% bootstrap interval
over prompts (ratio of sums, 2000 resamples, seed 0). Concurrency-1 runs: one record per prompt.
"""
from __future__ import annotations

import json
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

Cell = tuple[str, float, str, int]
Ratio = Callable[[Any], float]  # a ratio of sums over the prompts an index array selects


def by_cell(run: Path) -> dict[Cell, dict[str, dict[str, Any]]]:
    """The run's records per cell, keyed by prompt."""
    out: dict[Cell, dict[str, dict[str, Any]]] = defaultdict(dict)
    with open(run / "records.jsonl", encoding="utf-8") as fh:
        for line in fh:
            r = json.loads(line)
            if "prompt_ids" in r:
                c = r["cell"]
                out[(c["task"], c["temperature"], c["strategy"], c["num_draft_tokens"])][r["prompt_ids"][0]] = r
    return out


def ratios(plain: dict[str, dict[str, Any]], spec: dict[str, dict[str, Any]], ids: list[str]) -> dict[str, Ratio]:
    """Acceptance, forwards gain and wall-clock gain as ratios of sums over a sample of ``ids``."""
    def col(rows: dict[str, dict[str, Any]], key: str) -> np.ndarray:
        return np.array([rows[i][key] for i in ids], float)

    pf, sf, pw, sw = col(plain, "forwards"), col(spec, "forwards"), col(plain, "wall_s"), col(spec, "wall_s")
    tok_p, tok_s, acc, dr = col(plain, "tokens"), col(spec, "tokens"), col(spec, "accepted"), col(spec, "drafted")
    return {
        "alpha": lambda s: acc[s].sum() / max(1, dr[s].sum()),
        "forwards": lambda s: (pf[s].sum() / tok_p[s].sum()) / (sf[s].sum() / tok_s[s].sum()),
        "wall": lambda s: (tok_s[s].sum() / sw[s].sum()) / (tok_p[s].sum() / pw[s].sum()),
    }


def interval(f: Ratio, k: int, rng: np.random.Generator) -> tuple[float, float]:
    """The 95% bootstrap interval of ``f`` over ``k`` prompts (2000 resamples)."""
    vals = [f(rng.integers(0, k, k)) for _ in range(2000)]
    lo, hi = np.percentile(vals, [2.5, 97.5])
    return float(lo), float(hi)


def main(run: Path) -> None:
    cells = by_cell(run)
    rng = np.random.default_rng(0)
    for (task, temp, strat, n), rows in sorted(cells.items()):
        plain = cells[(task, temp, "plain", 0)]
        ids = [i for i in rows if i in plain]
        if strat == "plain" or not ids:
            continue
        r = ratios(plain, rows, ids)
        (a0, a1), (f0, f1), (w0, w1) = (interval(r[k], len(ids), rng) for k in ("alpha", "forwards", "wall"))
        every = slice(None)
        print(f"{task:8s} T={temp:g} {strat:7s} N={n}: prompts {len(ids):2d}  alpha(acc/drafted) "
              f"{r['alpha'](every):.3f} [{a0:.3f}, {a1:.3f}]  forwards gain {r['forwards'](every):.2f}x "
              f"[{f0:.2f}, {f1:.2f}]  wall gain {r['wall'](every):.2f}x [{w0:.2f}, {w1:.2f}]")


if __name__ == "__main__":
    main(Path(sys.argv[1]))

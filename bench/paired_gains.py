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

import numpy as np

recs = [r for r in (json.loads(l) for l in open(sys.argv[1] + "/records.jsonl")) if "prompt_ids" in r]
by = defaultdict(dict)
for r in recs:
    c = r["cell"]
    by[(c["task"], c["temperature"], c["strategy"], c["num_draft_tokens"])][r["prompt_ids"][0]] = r
rng = np.random.default_rng(0)
for (task, temp, strat, n), rows in sorted(by.items()):
    if strat == "plain":
        continue
    plain = by[(task, temp, "plain", 0)]
    ids = [i for i in rows if i in plain]
    if not ids:
        continue
    pf = np.array([plain[i]["forwards"] for i in ids], float); sf = np.array([rows[i]["forwards"] for i in ids], float)
    pt = np.array([plain[i]["tokens"] / plain[i]["wall_s"] for i in ids]); st = np.array([rows[i]["tokens"] / rows[i]["wall_s"] for i in ids])
    pw = np.array([plain[i]["wall_s"] for i in ids]); sw = np.array([rows[i]["wall_s"] for i in ids])
    tok_p = np.array([plain[i]["tokens"] for i in ids], float); tok_s = np.array([rows[i]["tokens"] for i in ids], float)
    acc = np.array([rows[i]["accepted"] for i in ids], float); dr = np.array([rows[i]["drafted"] for i in ids], float)
    def boot(f):
        k = len(ids); vals = [f(rng.integers(0, k, k)) for _ in range(2000)]
        return np.percentile(vals, [2.5, 97.5])
    fwd = lambda s: (pf[s].sum() / tok_p[s].sum()) / (sf[s].sum() / tok_s[s].sum())
    wall = lambda s: (tok_s[s].sum() / sw[s].sum()) / (tok_p[s].sum() / pw[s].sum())
    alpha = lambda s: acc[s].sum() / max(1, dr[s].sum())
    print(f"{task:8s} T={temp:g} {strat:7s} N={n}: prompts {len(ids):2d}  alpha(acc/drafted) {alpha(slice(None)):.3f} "
          f"[{boot(alpha)[0]:.3f}, {boot(alpha)[1]:.3f}]  forwards gain {fwd(slice(None)):.2f}x [{boot(fwd)[0]:.2f}, {boot(fwd)[1]:.2f}]  "
          f"wall gain {wall(slice(None)):.2f}x [{boot(wall)[0]:.2f}, {boot(wall)[1]:.2f}]")

"""Set the profiler's A/B gain on the real pair beside real_llamacpp_regret.py's interleaved rounds.

Reads ``OUT/regret.json`` + ``OUT/regret.rounds.jsonl`` (real_llamacpp_regret.py) and ``OUT/grid/*-np1``
(real_llamacpp_grid.py run: the profiler, one server per configuration beside one plain server) and
prints, per configuration, both tools' decode gain (engine clock, prefill left out) and wall gain with
95% intervals over rounds (a round: one prompt at one temperature, pooled over the task mix), the
profiler's gain split by which side ran first in a round, the servers' prefill (prompt_n, cache hits,
prompt_ms), and, from the regret's rotated rounds, each configuration's speed when first in a round
and later.

    $ python scripts/real_llamacpp_agree.py /work/logs/latency-real2
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

from picker.profiler.ab import paired_gain
from picker.profiler.records import Record, read_records


def _pooled(records: list[Record]) -> list[Record]:
    """Rounds keyed across groups: every (task, temperature) group has its own round 0."""
    return [replace(r, extra={**r.extra, "round": f"{r.cell.task}|{r.cell.temperature}|{r.extra.get('round')}"})
            for r in records]


def profiler(run: Path) -> None:
    records = read_records(run / "records.jsonl")[0]
    plain, spec = _pooled([r for r in records if r.cell.is_plain]), _pooled([r for r in records if not r.cell.is_plain])
    g = paired_gain(spec, plain)
    print(f"{run.name} profiler: decode gain {g.get('decode_gain_vs_plain')} {g.get('decode_gain_ci')}  "
          f"wall gain {g.get('gain_vs_plain')} {g.get('gain_ci')}  ({g.get('rounds')} rounds)")
    starts: dict[str, list[tuple[float, bool]]] = {}
    for r in plain + spec:
        starts.setdefault(r.extra["round"], []).append((r.extra["wave_t0"], r.cell.is_plain))
    plain_first = {k for k, v in starts.items() if min(v)[1]}
    for label, keep in (("plain first", True), ("plain second", False)):
        part = paired_gain([r for r in spec if (r.extra["round"] in plain_first) == keep],
                           [r for r in plain if (r.extra["round"] in plain_first) == keep])
        print(f"    {label}: decode {part.get('decode_gain_vs_plain')} wall {part.get('gain_vs_plain')} "
              f"({part.get('rounds')} rounds)")
    for name, rs in (("plain", plain), ("speculative", spec)):
        eng = [t.engine for r in rs for t in r.timings]
        print(f"    {name}: {len(eng)} requests, prompt cache hits {sum(e.get('cache_n', 0) > 0 for e in eng)}, "
              f"mean prompt_n {statistics.mean(e.get('prompt_n', 0) for e in eng):.1f}, "
              f"mean prompt_ms {statistics.mean(e.get('prompt_ms', 0) for e in eng):.0f}")


def regret(out: Path) -> None:
    summary = json.loads((out / "regret.json").read_text())["summary"]
    rounds = [json.loads(line) for line in (out / "regret.rounds.jsonl").read_text().splitlines() if line]
    for cfg, s in summary.items():
        print(f"regret {cfg}: decode gain {s['gain']} {s['gain_ci']}  wall gain {s['wall_gain']} {s['wall_gain_ci']}  "
              f"({s['rounds']} rounds)")

        def rate(ws: list[dict], num: str, den: str) -> float | None:
            return round(sum(w[num] for w in ws) / sum(w[den] for w in ws), 3) if ws else None

        first = [r["waves"][cfg] for r in rounds if r["order"][0] == cfg]
        later = [r["waves"][cfg] for r in rounds if r["order"][0] != cfg]
        print(f"    first in its round ({len(first)}): wall {rate(first, 'tokens', 'wall_s')} tok/s, decode "
              f"{rate(first, 'decode_tokens', 'decode_s')} tok/s; later ({len(later)}): wall "
              f"{rate(later, 'tokens', 'wall_s')}, decode {rate(later, 'decode_tokens', 'decode_s')}")


def main() -> int:
    out = Path(sys.argv[1])
    regret(out)
    for run in sorted((out / "grid").glob("*-np1")):
        if (run / "records.jsonl").exists():
            profiler(run)
    return 0


if __name__ == "__main__":
    sys.exit(main())

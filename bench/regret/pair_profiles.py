"""Pair a profile with a probing re-run: the earlier run's records and timings, plus the sibling
counts (``picker.engine.siblings``) a re-run with the same settings recorded on the identical generations.

The probe reads each step's distributions, draws from a generator of its own and changes no output,
so a re-run with the same seed produces the same tokens, acceptances and per-position counts; only
its timings differ (machine noise). Pairing keeps the earlier timings, so a regret comparison of the
tree model with and without measured siblings changes nothing else. Refuses when any generation
differs.

    python -m bench.regret.pair_profiles runs/profile-s1a runs/profile-s3a runs/profile-s3a-paired
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

from picker.profiler.records import Record
from picker.profiler.summary import build_summary, write_json_atomic


def _lines(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (folder / "records.jsonl").read_text().splitlines() if line.strip()]


def _key(r: dict[str, Any]) -> tuple[str, tuple[str, ...]]:
    return json.dumps(r["cell"], sort_keys=True), tuple(r["prompt_ids"])


def pair(old: Path, new: Path, out: Path) -> int:
    probed = {_key(r): r for r in _lines(new) if "prompt_ids" in r}
    out.mkdir(parents=True, exist_ok=True)
    records, lines = [], []
    for r in _lines(old):
        if "prompt_ids" in r:  # a record; other lines (stops) are copied as they are
            b = probed.get(_key(r))
            same = ("accepted", "tokens", "drafted", "pos_accepted", "pos_reached")
            if b is None or any(b[f] != r[f] for f in same):
                raise SystemExit(f"{new}: generation {_key(r)} differs from {old}'s; not a re-run of it")
            r = {**r, "sib_reached": b["sib_reached"], "sib_accepted": b["sib_accepted"]}
            records.append(Record.from_dict(r))
        lines.append(json.dumps(r, separators=(",", ":"), sort_keys=True))
    (out / "records.jsonl").write_text("\n".join(lines) + "\n")
    shutil.copy(old / "run.json", out / "run.json")
    write_json_atomic(out / "summary.json", build_summary(records, {}, json.loads((old / "run.json").read_text())))
    return len(records)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", type=Path, help="the profile whose records and timings are kept")
    ap.add_argument("new", type=Path, help="its re-run with the sibling probe (same settings and seed)")
    ap.add_argument("out", type=Path)
    args = ap.parse_args(argv)
    print(f"{args.out}: {pair(args.old, args.new, args.out)} records paired")


if __name__ == "__main__":
    main()

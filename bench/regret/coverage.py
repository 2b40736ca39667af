"""Coverage: how often a measured gain falls inside the range ``specpick recommend`` predicted for it.

    $ python -m bench.regret.coverage --zoo RUN [--zoo RUN ...] [--real REGRET.json ...] [--published]

A plan's predicted range (mean, low, high) is the speedup at the ends of the evidence's α interval
with the model's held-out error added (``picker.recommend.uncertainty.widened``). This bench holds
each measurement out of the range made for it and counts how many fall inside:

- ``--zoo RUN``: a ``specpick profile --concurrency ...`` run of the zoo on the reference engine.
  Each configuration is held out in turn: its cells keep their acceptance (the model's input) and
  lose every timing (gains, A/B intervals, per-step seconds); the other configurations' timings
  stay, as a cheap profile of siblings would give them. Its gain at each (task, temperature,
  concurrency) is then predicted by the recommender's own scoring (``scoring.bucket_speedups``,
  measured step costs, the reference loop's curve with ``--calibration``) and compared with the
  measured one (the A/B ``gain_vs_plain`` where measured, else ``throughput_gain_vs_plain``).
- ``--real REGRET.json``: ``scripts/real_llamacpp_regret.py`` output on the real Qwen2.5-Coder pair
  on llama.cpp (interleaved rounds): each configuration's gain per task and over the mix, against
  the range predicted from the shipped profile and its shipped summary with that configuration's
  timings removed (ngram N=1 was never in it).
- ``--published``: the load bench's 60 published points (``bench.load``; E[L] anchored at each
  curve's smallest batch, the range the held-out error alone). In-sample for the error constant,
  which is their 80th percentile: printed apart, not in the held-out total.

Printed: one row per source (points, inside, below the low end, above the high end), the same with
the evidence's spread alone (no model error); the CPU error constant is fitted to these points
(``policies.CPU_HELD_OUT_ERROR``), so each kind of run is also covered by ranges whose error was
fitted on the other kind alone (the held-out figure that is not in-sample); and, for the decision's
margin, how many held-out points whose predicted low end cleared ``ENABLE_LOW`` measured below 1.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bench.regret.data import zoo_profile_data
from picker.engine.plugins import load_strategies
from picker.inputs.measurements import Measurements
from picker.inputs.workload import WorkloadProfile, load_profile
from picker.recommend.costs import CostSource, at_cost, choose_costs, cost, cost_context, level_factor
from picker.recommend.evidence_index import EvidenceIndex, index_evidence
from picker.recommend.measured_load import MEASURED, config_of, cost_source
from picker.recommend.options import options_for
from picker.recommend.scoring import bucket_speedups
from picker.recommend.table import Bucket, Option, harmonic
from picker.recommend.uncertainty import ENABLE_LOW, widened
from policies import CPU_HELD_OUT_ERROR, HELD_OUT_ERROR, Calibration, Config, calibration_for, chain
from policies.calibration import read_calibration

ROOT = Path(__file__).resolve().parents[2]
TIMINGS = ("speedup_vs_plain", "throughput_gain_vs_plain", "gain_vs_plain", "gain_ci", "decode_gain_vs_plain",
           "decode_gain_ci", "seconds", "tokens_per_second", "throughput_tokens_per_second", "draft_s_per_token",
           "verify_s_per_step", "cost_ratio", "c_vs_plain_forward", "v_vs_plain_forward", "break_even_alpha")


@dataclass(frozen=True)
class Check:
    source: str
    what: str
    measured: float
    mean: float
    low: float
    high: float
    bare_low: float  # the evidence's spread alone
    bare_high: float

    @property
    def inside(self) -> bool:
        return self.low <= self.measured <= self.high

    @property
    def bare_inside(self) -> bool:
        return self.bare_low <= self.measured <= self.bare_high


def held_out(summary: dict[str, Any], strategy: str, config: Config) -> Measurements:
    """The summary with one configuration's timings removed (its acceptance kept)."""
    cells = []
    for c in summary["cells"]:
        if c["strategy"] == strategy and config_of(_Cell(c)) == config:
            c = {k: v for k, v in c.items() if k not in TIMINGS}
        cells.append(c)
    data = {**summary, "cells": cells}
    return Measurements.model_validate(data).model_copy(update={"source": "held-out"})


class _Cell:  # config_of reads attributes
    def __init__(self, d: dict[str, Any]) -> None:
        self.tree, self.num_draft_tokens = d.get("tree"), d.get("num_draft_tokens")


def predict(prof: WorkloadProfile, meas: Measurements, option: Option, buckets: list[Bucket],
            calibration: Calibration | None) -> tuple[tuple[float, float, float], tuple[float, float]]:
    """The recommender's range for ``option`` over ``buckets`` (token weights as given), and the
    evidence's spread alone (the same without the model's error)."""
    index = index_evidence(prof, meas, measured_costs=True)
    costs = choose_costs(prof, index, meas, calibration, calibration.measured_engine if calibration else None)
    per, _ = bucket_speedups(index, costs, [(option, b) for b in buckets])
    full = tuple(harmonic([(b.weight, per[option, b.key][i]) for b in buckets]) for i in range(3))
    bare = [_bare(index, costs, option, b) for b in buckets]
    return full, (harmonic([(b.weight, s[1]) for b, s in zip(buckets, bare)]),  # type: ignore[return-value]
                  harmonic([(b.weight, s[2]) for b, s in zip(buckets, bare)]))


def _bare(index: EvidenceIndex, costs: CostSource, option: Option, b: Bucket) -> tuple[float, float, float]:
    c = cost(index, costs, option, b.batch, b.temperature > 0)
    f = level_factor(index, costs, option, b)
    s = at_cost(index, costs, option, b, c, cost_source(c) == MEASURED)
    return f * s[0], f * s[1], f * s[2]


def _option(prof: WorkloadProfile, strategy: str, config: Config) -> Option:
    plugins = load_strategies()
    like = next(o for o in options_for(prof, plugins, cost_context(prof).target) if o.plugin.name == strategy)
    return Option(plugins[strategy], config, True, True, like.notes)


def zoo_checks(run: Path, calibration: Calibration | None, tmp: Path) -> list[Check]:
    summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    source = summary["run"]["source"]
    target, artifacts = Path(source["model"]), source.get("artifacts", {})
    out_tokens = int(summary["run"].get("max_new_tokens", 32))
    configs = {(c["strategy"], config_of(_Cell(c))) for c in summary["cells"]}
    out = []
    for strategy, config in sorted(configs, key=lambda k: (k[0], k[1].depth)):
        meas = held_out(summary, strategy, config)
        for c in summary["cells"]:
            if c["strategy"] != strategy or config_of(_Cell(c)) != config:
                continue
            measured = c.get("gain_vs_plain") or c.get("throughput_gain_vs_plain")
            if not measured:
                continue
            doc = zoo_profile_data(c["task"], c["temperature"], target, artifacts, 64.0, out_tokens, c["concurrency"])
            doc["model"]["name"] = summary["run"]["provenance"]["model"]["name"] if "provenance" in summary["run"] \
                else source["model"]
            path = tmp / f"{doc['name']}.yaml"
            path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
            prof = load_profile(path)
            bucket = Bucket(c["task"], c["concurrency"], c["temperature"], 1.0)
            (mean, low, high), (blo, bhi) = predict(prof, meas, _option(prof, strategy, config), [bucket], calibration)
            out.append(Check(f"zoo {run.name}", f"{strategy} {config.label} {c['task']} T={c['temperature']:g} "
                             f"C={c['concurrency']}", float(measured), mean, low, high, blo, bhi))
    return out


def real_checks(regret: Path) -> list[Check]:
    """Per task and over the mix, each configuration of a real llama.cpp regret run."""
    data = json.loads(regret.read_text(encoding="utf-8"))
    prof = load_profile(ROOT / data["profile"])
    shipped = json.loads((ROOT / "profiles" / "measurements" / f"{prof.name}.summary.json").read_text())
    temps, tasks, slots = data["temperatures"], data["tasks"], int(data.get("slots", 1))
    out = []
    for key, s in data["summary"].items():
        if key == "plain":
            continue
        strategy, n = key.split(":")
        config = chain(int(n))
        meas = held_out(shipped, strategy, config)
        option = _option(prof, strategy, config)
        for task in [*tasks, None]:
            measured = s["by_task"].get(task) if task else s["gain"]
            if measured is None:
                continue
            bs = [Bucket(t, slots, temp, 1.0) for t in ([task] if task else tasks) for temp in temps]
            (mean, low, high), (blo, bhi) = predict(prof, meas, option, bs, None)
            out.append(Check(f"real {regret.parent.name}/{regret.name}", f"{key} {task or 'mix'} C={slots}",
                             float(measured), mean, low, high, blo, bhi))
    return out


def published_checks() -> list[Check]:
    from bench.load.data import load_points
    from bench.load.predict import by_curve
    from bench.load.run import shipped_predictions

    points, _ = load_points()
    out = []
    for p in shipped_predictions(by_curve(points)):
        low, high = p.predicted / (1 + HELD_OUT_ERROR), p.predicted / (1 - HELD_OUT_ERROR)
        out.append(Check("published (in-sample for the error)", f"{p.point.curve} x={p.point.x:g}",
                         p.point.value, p.predicted, low, high, p.predicted, p.predicted))
    return out


def table(checks: Iterable[Check]) -> list[str]:
    rows: dict[str, list[Check]] = {}
    for c in checks:
        rows.setdefault(c.source, []).append(c)
    lines = ["| source | points | inside | below low | above high | inside, evidence spread alone |",
             "|---|---|---|---|---|---|"]
    for name, cs in [*rows.items(), ("held-out total", [c for c in checks if not c.source.startswith("published")])]:
        n = len(cs)
        if not n:
            continue
        inside = sum(c.inside for c in cs)
        lines.append(f"| {name} | {n} | {inside} ({inside / n:.0%}) | {sum(c.measured < c.low for c in cs)} | "
                     f"{sum(c.measured > c.high for c in cs)} | {sum(c.bare_inside for c in cs) / n:.0%} |")
    return lines


def p80_error(checks: list[Check]) -> float:
    """The relative error (as ``HELD_OUT_ERROR`` states one) that 80 % of ``checks`` lie within,
    nearest rank, of the prediction's mean."""
    logs = sorted(abs(math.log(c.measured / c.mean)) for c in checks)
    return math.exp(logs[math.ceil(0.8 * len(logs)) - 1]) - 1.0


def cross_validated(checks: list[Check]) -> list[str]:
    """Each kind of held-out run (zoo, real) covered by ranges whose model error is fitted on the
    other kind alone: the CPU error constant (policies.CPU_HELD_OUT_ERROR) is not in-sample here."""
    kinds = {k: [c for c in checks if c.source.startswith(k)] for k in ("zoo", "real")}
    lines = ["| held out | error fitted on the other kind (p80) | points | inside |", "|---|---|---|---|"]
    for kind, cs in kinds.items():
        other = [c for k, v in kinds.items() if k != kind for c in v]
        if not cs or not other:
            continue
        e = p80_error(other)
        inside = sum(lo <= c.measured <= hi for c in cs
                     for _, lo, hi in [widened((c.mean, c.bare_low, c.bare_high), None, e)])
        lines.append(f"| {kind} | {e:.3f} | {len(cs)} | {inside} ({inside / len(cs):.0%}) |")
    return lines


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--zoo", type=Path, action="append", default=[], help="a specpick profile run of the zoo")
    ap.add_argument("--real", type=Path, action="append", default=[], help="scripts/real_llamacpp_regret.py output")
    ap.add_argument("--published", action="store_true", help="also the load bench's published points (in-sample)")
    ap.add_argument("--calibration", type=Path, default=ROOT / "bench" / "load" / "zoo-ci-cpu-calibration.json",
                    help="the reference loop's calibration, for the zoo runs' unmeasured steps")
    ap.add_argument("--verbose", action="store_true", help="every point")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)
    cal = calibration_for(a.calibration, read_calibration(a.calibration).engine, "cpu") if a.calibration else None
    checks: list[Check] = []
    with tempfile.TemporaryDirectory() as tmp:
        for run in a.zoo:
            checks += zoo_checks(run, cal, Path(tmp))
    for regret in a.real:
        checks += real_checks(regret)
    if a.published:
        checks += published_checks()
    if a.verbose:
        for c in checks:
            flag = "in " if c.inside else "OUT"
            print(f"{flag} {c.source:32s} {c.what:44s} measured {c.measured:.3f}  predicted {c.mean:.3f} "
                  f"({c.low:.3f}-{c.high:.3f}; evidence alone {c.bare_low:.3f}-{c.bare_high:.3f})")
    print("\n".join(table(checks)))
    print(f"\nthe model error in the ranges above: {HELD_OUT_ERROR} (GPU load curve), {CPU_HELD_OUT_ERROR} on a CPU "
          f"(fitted to these zoo and llama.cpp points: p80 {p80_error([c for c in checks if not c.source.startswith('published')]):.3f})")
    print("\n".join(cross_validated(checks)))
    held = [c for c in checks if not c.source.startswith("published")]
    cleared = [c for c in held if c.low >= ENABLE_LOW]
    print(f"\nheld-out points whose predicted low end cleared {ENABLE_LOW:g}: {len(cleared)}; measured below 1.0: "
          f"{sum(c.measured < 1.0 for c in cleared)}"
          + "".join(f"\n  {c.source} {c.what}: measured {c.measured:.3f}, predicted {c.mean:.3f} "
                    f"({c.low:.3f}-{c.high:.3f})" for c in cleared if c.measured < 1.0))
    lost = [c for c in held if c.low < ENABLE_LOW and c.measured >= ENABLE_LOW]
    print(f"held-out points measured at {ENABLE_LOW:g} or more whose predicted low end did not clear it (gains the "
          f"rule leaves off until measured): {len(lost)} of {sum(c.measured >= ENABLE_LOW for c in held)}")
    if a.json:
        a.json.write_text(json.dumps([c.__dict__ for c in checks], indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()

"""Sweep data: the rows a policy is fitted on (``specpick policy fit``) -- workloads, the policy's
cheap profile, candidate rows, truth.

A *workload* is one (task type, temperature) of a sweep on the zoo at batch 1. For each:

- the **truth**: every grid cell's measured speedup over plain decoding (the sweep, all prompts;
  with replicate sweeps on other prompts, the geometric mean over the runs);
- the **policy's profile**: what ``specpick profile`` would have measured for the policy -- one chain
  cell per strategy (``PROFILE_DEPTH``) plus the plain baseline, on the first ``k`` prompts -- cut
  from the sweep's own records (same prompts, same seeds, same loop), with its cost counted from
  those records. Nothing of the other cells reaches the policy.
"""

from __future__ import annotations

import json
import statistics
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from picker.inputs.measurements import Measurements, parse_tree_label
from picker.inputs.verify_curve import CURVE_NAME, curve_medians, ratio_curve, read_curve_lines
from picker.inputs.workload import WorkloadProfile, load_profile
from picker.profiler.records import Record, read_records
from picker.profiler.source import DraftConfig
from picker.profiler.summary import build_summary

# The one chain cell per strategy the policy profiles: the deepest chain of the grid, whose
# per-position rates cover every shorter chain (lookahead: its n-gram size changes with N, a
# middle length). Keyed by draft-cost kind, never by strategy name.
PROFILE_DEPTH = {"cpu_lookup": 8, "draft_model": 8, "target_layer": 8, "heads": 4, "in_forward": 4}


@dataclass(frozen=True)
class GridKey(DraftConfig):
    """A grid configuration: the profiler's draft shape (strategy, chain length N or tree nodes,
    tree label) with a short name for N and its label."""

    @property
    def n(self) -> int:
        return self.num_draft_tokens

    @property
    def label(self) -> str:
        if self.strategy == "plain":
            return "plain"
        if self.tree:
            d, k, t = parse_tree_label(self.tree)
            return f"{self.strategy} tree({d},{k},{t})"
        return f"{self.strategy} N={self.n}"


@dataclass
class Workload:
    task: str
    temperature: float
    truth: dict[GridKey, float] = field(default_factory=dict)  # measured speedup vs plain
    truth_tps: dict[GridKey, float] = field(default_factory=dict)
    records: list[Record] = field(default_factory=list)  # the primary sweep's (cost, cut profiles, probe)
    replicates: list[list[Record]] = field(default_factory=list)  # other sweeps' records, one list per run

    @property
    def name(self) -> str:
        return f"{self.task}@T={self.temperature:g}"


@dataclass
class SweepData:
    workloads: dict[tuple[str, float], Workload]
    curve: tuple[tuple[float, float], ...]  # (tokens in flight, T(m)/T(1))
    curve_cost: dict[str, float]
    target_path: str
    artifacts: dict[str, str]


def load_sweeps(dirs: list[Path], replicates: list[Path] | tuple[Path, ...] = ()) -> SweepData:
    """Merge sweep folders: records, truth and the verify curve (timings of every folder pooled).

    A workload (task, temperature) found in a later folder of ``dirs`` replaces the earlier folder's
    records of it whole: cells are only comparable when measured in the same interleaved run as
    their plain baseline.

    ``replicates`` are further sweeps of the same grid on *other prompts* (another ``--seed``), run
    in other sessions. They only sharpen the labels: each run's speedups are read against that run's
    own plain baseline and a cell's truth is the geometric mean over the runs that measured it
    (equal weight per run). Their records never reach the policy, the profiling-cost figures (the
    sweep's cost stays one sweep's) or the verify curve.
    """
    workloads: dict[tuple[str, float], Workload] = {}
    curve_lines: list[dict[str, Any]] = []
    target, artifacts = "", {}
    for d in dirs:
        run = json.loads((d / "run.json").read_text())
        target = target or run.get("target_path", "")
        artifacts.update(run.get("source", {}).get("artifacts", {}))
        curve_lines += read_curve_lines(d / CURVE_NAME)
        for key, recs in records_by_workload(d).items():  # a later folder re-measures a workload whole
            workloads[key] = Workload(*key, records=recs)
    for d in replicates:
        for key, recs in records_by_workload(d).items():
            if key in workloads:
                workloads[key].replicates.append(recs)
    for w in workloads.values():
        runs = [session_cells(recs) for recs in [w.records, *w.replicates]]
        for g in runs[0]:
            seen = [run[g] for run in runs if g in run]
            w.truth[g] = statistics.geometric_mean(s for s, _ in seen)
            w.truth_tps[g] = statistics.fmean(t for _, t in seen)
    curve = tuple(ratio_curve(curve_medians(curve_lines)))
    cost = {"forwards": len(curve_lines), "seconds": sum(float(x["seconds"]) for x in curve_lines)}
    return SweepData(workloads, curve, cost, target, artifacts)


def records_by_workload(folder: Path) -> dict[tuple[str, float], list[Record]]:
    """A run folder's records, grouped by (task, temperature)."""
    out: dict[tuple[str, float], list[Record]] = {}
    for r in read_records(folder / "records.jsonl")[0]:
        out.setdefault((r.cell.task, r.cell.temperature), []).append(r)
    return out


def session_cells(records: list[Record]) -> dict[GridKey, tuple[float, float]]:
    """(speedup over plain, tokens/s) per grid cell of one sweep run's records of a workload."""
    out = {}
    for c in build_summary(records, {}, {})["cells"]:
        if c.get("speedup_vs_plain"):
            out[GridKey(c["strategy"], c["num_draft_tokens"], c.get("tree"))] = (
                c["speedup_vs_plain"], c["tokens_per_second"])
    return out


def _prompt_index(pid: str) -> int:
    return int(pid.rsplit("-", 1)[1])


def profile_records(w: Workload, depth_of: dict[str, int], k: int) -> list[Record]:
    """The policy's profile: the chain cell at its profile depth per strategy, plus plain, first k prompts."""
    keep = []
    for r in w.records:
        c = r.cell
        if _prompt_index(r.prompt_ids[0]) >= k or c.tree is not None:
            continue
        if c.is_plain or depth_of.get(c.strategy) == c.num_draft_tokens:
            keep.append(r)
    return keep


# The drafter probe: one short chain per drafter whose cost grows with N (draft model, EAGLE layer),
# on one prompt of one task at each temperature, with its plain baseline -- a measurement of the
# deployment (drafting cost does not depend on the task; sampling drafts cost more than greedy ones),
# made once and shared by every workload like the verify curve.
PROBE_DEPTH = 1
PROBE_TASK = "drafter-probe"
PROBE_KINDS = ("draft_model", "target_layer")


def probe_records(data: SweepData, kinds: dict[str, str], prompts: int = 1) -> list[Record]:
    """The probe cut from the sweep's first task at each temperature (chain N = 1 and plain, first
    ``prompts``), relabelled to its own task so that it informs drafting costs only, never a
    workload's acceptance. ``kinds`` maps strategy to its declared draft-cost kind.
    """
    first = min(t for t, _ in data.workloads)
    keep = [r for (t, _), w in sorted(data.workloads.items()) if t == first for r in w.records
            if _prompt_index(r.prompt_ids[0]) < prompts and r.cell.tree is None
            and (r.cell.is_plain or (kinds.get(r.cell.strategy) in PROBE_KINDS
                                     and r.cell.num_draft_tokens == PROBE_DEPTH))]
    return [replace(r, cell=replace(r.cell, task=PROBE_TASK)) for r in keep]


SESSION = "session"  # Record.extra key: which profile run (folder) a record came from


def load_profile_records(folders: list[Path]) -> dict[tuple[str, float], list[Record]]:
    """``specpick profile`` runs' records by workload (the policy's own, separately run profile).

    Several folders (e.g. one per draft length) pool; each ran its own plain baseline, so plain
    decoding is counted -- and paid for -- once per folder. Each record is tagged with its folder
    (``extra["session"]``): its timings are relative to that run's own plain baseline only.
    """
    out: dict[tuple[str, float], list[Record]] = {}
    for folder in folders:
        for r in read_records(folder / "records.jsonl")[0]:
            tagged = replace(r, extra={**r.extra, SESSION: str(folder)})
            out.setdefault((r.cell.task, r.cell.temperature), []).append(tagged)
    return out


def measurements_of(records: list[Record], source: str) -> Measurements:
    """The records as ``specpick recommend --measurements`` would read them (summary.json).

    Records of different profile runs (``extra["session"]``) are summarised apart and their cells
    joined: a cell's step costs and speedup are relative to plain decoding timed in the same run.
    Pooling every run's plain records instead mixes sessions whose machine speed differed (two
    profiles run side by side on the zoo: plain steps 16% apart, which moved every verify ratio).
    """
    sessions: dict[str, list[Record]] = {}
    for r in records:
        sessions.setdefault(str(r.extra.get(SESSION, "")), []).append(r)
    summaries = [build_summary(recs, {}, {"backend": "torch"}) for recs in sessions.values()]
    merged = {**summaries[0], "cells": [c for s in summaries for c in s["cells"]],
              "baselines": [b for s in summaries for b in s.get("baselines", [])]}
    return Measurements.model_validate({**merged, "source": source})


def cost_of(records: list[Record]) -> dict[str, float]:
    return {"forwards": sum(r.forwards for r in records), "seconds": sum(r.wall_s for r in records)}


def zoo_profile(task: str, temperature: float, target: Path, artifacts: dict[str, str],
                prompt_tokens: float, out_tokens: int) -> WorkloadProfile:
    """A workload profile of the zoo at batch 1 for one task and temperature (read back, validated)."""
    data = zoo_profile_data(task, temperature, target, artifacts, prompt_tokens, out_tokens)
    with tempfile.TemporaryDirectory(prefix="zoo-profile-") as folder:  # read once, then gone
        path = Path(folder) / "profile.yaml"
        path.write_text(yaml.safe_dump(data))
        return load_profile(path)


def zoo_profile_data(task: str, temperature: float, target: Path, artifacts: dict[str, str],
                     prompt_tokens: float, out_tokens: int, batch: int = 1) -> dict[str, Any]:
    """The YAML document of a zoo workload: one task and temperature, ``batch`` requests in flight.

    The engine label is ``tensorrt_llm`` only because it runs all five strategies and trees; the
    reference engine measures everything here, and its step costs come from the measurements.
    """
    cfg = json.loads((target / "config.json").read_text())
    draft = artifacts.get("vanilla")
    drafters: dict[str, Any] = {"allow_ngram": True, "allow_lookahead": True}
    if draft:
        dcfg = json.loads((Path(draft) / "config.json").read_text())
        drafters["draft_model"] = {"name": "zoo-draft", "params_b": _params(dcfg) / 1e9, "path": draft}
    if "eagle3" in artifacts:
        drafters["eagle3_head"] = {"path": artifacts["eagle3"]}
    if "medusa" in artifacts:
        heads = json.loads((Path(artifacts["medusa"]) / "config.json").read_text())
        drafters["medusa_heads"] = {"path": artifacts["medusa"],
                                    "num_heads": int(heads.get("num_heads") or heads.get("medusa_num_heads") or 4)}
    if "mtp" in artifacts:
        modules = json.loads((Path(artifacts["mtp"]) / "config.json").read_text())
        drafters["mtp"] = {"path": artifacts["mtp"], "modules": int(modules.get("num_modules", 1))}
    return {
        "name": f"zoo-{task}-T{temperature:g}" + (f"-C{batch}" if batch != 1 else ""),
        "description": f"zoo ci target on the reference engine, batch {batch}",
        "model": {"name": "zoo-ci-target", "hf_config": str(target / "config.json"), "params_b": _params(cfg) / 1e9},
        "hardware": {"gpu": "cpu", "count": 1}, "engine": {"name": "tensorrt_llm", "version": "reference-loop"},
        "traffic": {"task_mix": {task: 1.0}, "prompt_tokens": {"mean": prompt_tokens},
                    "output_tokens": {"mean": out_tokens}, "concurrency": [{"batch_size": batch, "weight": 1.0}],
                    "temperature": [{"value": temperature, "weight": 1.0}]},
        "drafters": drafters, "memory_headroom_gib": 100,
    }


def _params(cfg: dict[str, Any]) -> float:
    """Parameter count of a Llama config (embeddings tied when the config says so)."""
    h, layers, v, inter = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"], cfg["intermediate_size"]
    heads = cfg["num_attention_heads"]
    kv = cfg.get("num_key_value_heads", heads) * cfg.get("head_dim", h // heads)
    per_layer = 2 * h * h + 2 * h * kv + 3 * h * inter
    heads = v * h * (1 if cfg.get("tie_word_embeddings") else 2)
    return float(layers * per_layer + heads)


"""``summary.json``: one cell per task × strategy × temperature × draft shape, from the records alone.

The summary is a pure function of ``records.jsonl`` (plus run metadata), rewritten atomically, so
whatever stops a run — a kill, Ctrl-C, a failing endpoint — the summary on disk is consistent
with the records on disk. ``specpick recommend --measurements`` reads it
(``picker.inputs.measurements.Cell``).

    >>> from picker.profiler.records import CellKey, Record
    >>> key = CellKey("math", "ngram", 0.0, 2)
    >>> recs = [Record(key, ("m0",), tokens=8, forwards=4, steps=3, drafted=6, accepted=4, wall_s=0.5)]
    >>> cell = build_summary(recs, {}, {})["cells"][0]
    >>> cell["alpha"], cell["tau"], cell["tokens_per_second"], cell["target_forwards"]
    (0.666667, 2.333333, 16.0, 4)
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from picker.profiler.ab import paired_gain
from picker.profiler.latency import clock_check, goodput, latency_stats
from picker.profiler.load import load_curves
from picker.profiler.records import CellKey, Record
from picker.profiler.stats import CellStats, cell_stats, tau_by_depth, wave_seconds
from picker.profiler.stopping import StepCost, step_cost

SCHEMA = "specpicker.profile.summary/1"
CONVENTIONS = {
    "alpha": "accepted draft tokens / proposed draft tokens (bonus excluded; vLLM's acceptance rate)",
    "alpha_iid": "accepted / examined draft positions: the per-token alpha of E[L]=(1-a^(N+1))/(1-a)",
    "alpha_ci": "95% interval; alpha_ci_method: bootstrap-prompts (generations resampled) or "
                "wilson-tokens (fewer than 5 generations)",
    "per_position": "P(position k accepted | positions < k accepted), k = 0..N-1",
    "tau": "tokens per verify step that carried drafts, bonus included: 1 + accepted / draft_steps",
    "decode_steps": "target forwards after the prefill (vllm, llamacpp: from tokens - accepted; vllm: a lower bound)",
    "tau_by_depth": "predicted tau had the chain stopped at depth 1..N, from per_position",
    "sibling_accept": "P(sibling rank r accepted | ranks < r rejected), r = 2.., for a tree whose siblings "
                      "are sampled without replacement; computed at the sampled chain's rejections "
                      "(tree-capable drafters, reference backend); sibling_reached: expected rejections behind each",
    "tokens_per_forward": "new tokens / target forwards (prefill and steps without drafts included)",
    "cost_ratio": "c = (draft seconds per draft token) / (verify seconds per verify step)",
    "speedup_vs_plain": "tokens/s over tokens/s of plain decoding, both on the prompts both ran, each "
                        "request timed alone (at concurrency > 1: the per-request speed-up)",
    "concurrency": "requests in flight while the cell was measured, in waves of concurrency x wave_rounds "
                   "prompts (run.json; 1 unless --wave-rounds): a finished request is replaced by its wave's "
                   "next prompt, and each wave drains at its end (its last requests finish one by one, rows "
                   "left empty); every cell is compared with plain decoding at its own concurrency",
    "throughput_tokens_per_second": "tokens of all requests / wall seconds of the waves that ran them",
    "throughput_gain_vs_plain": "throughput over plain decoding's at the same concurrency, on the waves "
                                "whose prompts both ran",
    "break_even_alpha": "alpha_iid at which E[L](a, N) = N*c + v (batch 1, measured c and v; v = 1 and "
                        "c = cost_ratio without a plain baseline): below it speculation is slower",
    "samples": "independent units behind the interval: generations (waves for counter sources)",
    "prompt_format": "how the prompts were rendered: chat_template (the model's own chat template, every turn) "
                     "or raw (text as it is, role tags between turns); null for records that do not say",
    "latency": "ttft / itl / tpot / e2e _ms_{mean,p50,p90,p99} per cell (plain decoding's under baselines): "
               "TTFT = request sent (reference loop: admitted; open loop: arrived) -> first token; ITL = the gap "
               "between consecutive streamed chunks (vLLM's load client's definition: a chunk of k tokens, one "
               "speculative step, is ONE gap); TPOT = (e2e - TTFT) / (tokens - 1) per request; e2e = sent -> last "
               "token; percentiles inverted-CDF over requests (ITL: over all gaps); _ci: 95% bootstrap over requests; "
               "_vs_plain: the cell's figure over plain decoding's in the same group (interval: both resampled)",
    "gain_vs_plain": "A/B gain: (sum tokens / sum wave seconds) over plain's, on the rounds both ran (a round = one "
                     "block of prompts every cell of the group ran, in ABBA or seeded random order); gain_ci: 95% "
                     "bootstrap over rounds; decode_gain_vs_plain: the same with decode rates, sum (tokens - 1) / "
                     "sum (e2e - TTFT), the prefill left out",
    "goodput_requests_per_second": "DistServe's goodput: requests that met every SLO (run.slo, milliseconds) per "
                                   "wall second of the waves; slo_attainment: their share",
    "open_loop": "cells measured under an offered request rate (seeded Poisson, or gamma with run.burstiness): "
                 "request_rate_per_second offered, concurrency = the cap on requests in flight (0: none), achieved "
                 "requests_per_second and throughput, latency and gain as for cells",
    "load": "per task x strategy x draft shape x temperature measured at >= 2 concurrencies: "
            "[concurrency, gain] with gain = throughput_gain_vs_plain (speedup_vs_plain where waves were "
            "not timed), and crossover = the concurrency from which the gain stays <= 1 (its last fall "
            "through 1, log-linear between measured levels; null: above 1 at the last level measured)",
}


def _r(x: float | None, nd: int = 6) -> float | None:
    return None if x is None else round(float(x), nd)


def _break_even(key: CellKey, cost: StepCost) -> float | None:
    """The i.i.d. α (compare ``alpha_iid``) below which this chain is slower than plain at batch 1."""
    if key.tree is not None or key.num_draft_tokens < 1:
        return None
    from policies.theory import break_even_alpha

    return break_even_alpha(key.num_draft_tokens, cost.c, cost.v)


def _reached(per_position: list[float | None]) -> list[float]:
    out: list[float] = []
    for p in per_position:
        if p is None:
            break
        out.append(p)
    return out


def _speedup(records: Sequence[Record], plain: Sequence[Record]) -> float | None:
    """tokens/s ratio over the prompts both the cell and plain decoding ran (lengths differ by prompt)."""
    shared = {p for r in records for p in r.prompt_ids} & {p for r in plain for p in r.prompt_ids}
    ours = [r for r in records if set(r.prompt_ids) <= shared]
    theirs = [r for r in plain if set(r.prompt_ids) <= shared]
    wall, plain_wall = sum(r.wall_s for r in ours), sum(r.wall_s for r in theirs)
    if not ours or not theirs or wall <= 0 or plain_wall <= 0 or not sum(r.tokens for r in theirs):
        return None
    return (sum(r.tokens for r in ours) / wall) / (sum(r.tokens for r in theirs) / plain_wall)


def _prompt_format(records: Sequence[Record]) -> str | None:
    """The records' rendering (``extra["prompt_format"]``); "mixed" if they disagree, None if unsaid."""
    said = {r.extra["prompt_format"] for r in records if "prompt_format" in r.extra}
    return None if not said else said.pop() if len(said) == 1 else "mixed"


def _throughput(records: Sequence[Record]) -> float | None:
    seconds = wave_seconds(records)
    return sum(r.tokens for r in records) / seconds if seconds > 0 and records else None


def _throughput_gain(records: Sequence[Record], plain: Sequence[Record]) -> float | None:
    """Throughput ratio over the waves whose prompts both the cell and plain decoding ran."""
    shared = {p for r in records for p in r.prompt_ids} & {p for r in plain for p in r.prompt_ids}

    def whole_waves(recs: Sequence[Record]) -> list[Record]:
        waves: dict[Any, list[Record]] = defaultdict(list)
        for r in recs:
            waves[r.extra.get("wave", id(r))].append(r)
        return [r for w in waves.values() if all(set(x.prompt_ids) <= shared for x in w) for r in w]

    ours, theirs = _throughput(whole_waves(records)), _throughput(whole_waves(plain))
    return ours / theirs if ours and theirs else None


def _timings(records: Sequence[Record]) -> list[Any]:
    return [t for r in records for t in r.timings]


def latency_fields(key: CellKey, records: Sequence[Record], plain: Sequence[Record],
                   slo: Mapping[str, float]) -> dict[str, Any]:
    """Latency percentiles (ratios to plain where it ran), the A/B gain and goodput of one cell."""
    out = latency_stats(_timings(records), seed_key=key.id, plain=_timings(plain) if not key.is_plain else ())
    if plain and not key.is_plain:
        out.update(paired_gain(records, plain, seed=len(key.id)))
    out.update(goodput(_timings(records), slo, wave_seconds(records)))
    check = clock_check(_timings(records))
    if check is not None:  # the engine reported its own clock per request (llama.cpp)
        out["engine_clock"] = check
    if key.open_loop:
        seconds = wave_seconds(records)
        requests = sum(len(r.timings) or int(r.extra.get("requests", 1)) for r in records)
        out.update(request_rate_per_second=key.request_rate,
                   requests_per_second=_r(requests / seconds, 4) if seconds > 0 else None)
    return out


def _cell_entry(key: CellKey, records: Sequence[Record], stats: CellStats, plain: Sequence[Record],
                plain_stats: CellStats | None, stopped: str | None, slo: Mapping[str, float]) -> dict[str, Any]:
    speedup = _speedup(records, plain)
    cost = step_cost(stats, plain_stats)
    ci = stats.alpha_ci if stats.alpha_ci is not None else (0.0, 1.0)
    return {
        "task": key.task, "strategy": key.strategy, "temperature": key.temperature,
        "num_draft_tokens": key.num_draft_tokens, "tree": key.tree, "concurrency": key.concurrency,
        "alpha": _r(stats.alpha if stats.alpha is not None else 0.0),
        "alpha_ci": [_r(ci[0]), _r(ci[1])], "alpha_ci_method": stats.alpha_ci_method,
        "alpha_iid": _r(stats.alpha_iid),
        "alpha_iid_ci": [_r(x) for x in stats.alpha_iid_ci] if stats.alpha_iid_ci else None,
        # Positions never examined (no earlier acceptance reached them) end the list: a position
        # after one that was never reached is never reached either.
        "per_position": [_r(p) for p in _reached(stats.per_position)] or None,
        "per_position_n": stats.per_position_n[: len(_reached(stats.per_position))] or None,
        "tau": _r(stats.tau), "tau_by_depth": tau_by_depth(stats.per_position) or None,
        # Sampled chains of tree-capable drafters: what a tree's later siblings accept after a rejection.
        "sibling_accept": [_r(s) for s in _reached(stats.sibling_accept)] or None,
        "sibling_reached": [_r(n, 2) for n in stats.sibling_reached[: len(_reached(stats.sibling_accept))]] or None,
        "tokens_per_forward": _r(stats.tokens_per_forward),
        "cost_ratio": _r(stats.cost_ratio), "draft_s_per_token": _r(stats.draft_s_per_token, 9),
        "verify_s_per_step": _r(stats.verify_s_per_step, 9),
        "break_even_alpha": _r(_break_even(key, cost)),
        # Only with step timings (the reference loop): a live server's plain baseline times whole
        # requests, from which the policy derives a step ratio instead (live_step_ratio).
        "c_vs_plain_forward": _r(cost.c) if plain_stats and stats.verify_s_per_step else None,
        "v_vs_plain_forward": _r(cost.v) if plain_stats and stats.verify_s_per_step else None,
        "tokens_per_second": _r(stats.tokens_per_second, 3),
        "speedup_vs_plain": _r(speedup, 4),
        "throughput_tokens_per_second": _r(_throughput(records), 3),
        "throughput_gain_vs_plain": _r(_throughput_gain(records, plain), 4),
        "samples": stats.samples, "draft_tokens": stats.drafted, "accepted_tokens": stats.accepted,
        "draft_steps": stats.draft_steps, "decode_steps": stats.steps, "tokens": stats.tokens,
        "target_forwards": stats.forwards,
        "seconds": _r(stats.wall_s, 3), "stopped": stopped,
        "source": sorted({r.source for r in records if r.source}),
        "prompt_format": _prompt_format(records),
        **latency_fields(key, records, plain, slo),
    }


def build_summary(records: Sequence[Record], stops: Mapping[str, str], run: Mapping[str, Any]) -> dict[str, Any]:
    """Aggregate every cell that has records; plain baselines go under ``baselines``."""
    by_cell: dict[CellKey, list[Record]] = defaultdict(list)
    for r in records:
        by_cell[r.cell].append(r)
    plain = {k.group: v for k, v in by_cell.items() if k.is_plain}
    plain_stats = {g: cell_stats(v, seed_key="plain") for g, v in plain.items()}
    slo = {k: float(v) for k, v in (run.get("slo") or {}).items() if v is not None}
    cells, baselines, open_loop, open_base = [], [], [], []
    for key in sorted(by_cell, key=lambda k: (k.task, k.temperature, k.request_rate or 0.0, k.concurrency, k.strategy,
                                              k.num_draft_tokens, k.tree or "")):
        recs = by_cell[key]
        if key.is_plain:
            ps = plain_stats[key.group]
            (open_base if key.open_loop else baselines).append({"task": key.task, "temperature": key.temperature,
                              "strategy": key.strategy,
                              "concurrency": key.concurrency, "tokens_per_second": _r(ps.tokens_per_second, 3),
                              "throughput_tokens_per_second": _r(_throughput(recs), 3), "samples": ps.samples,
                              "tokens": ps.tokens, "target_forwards": ps.forwards, "seconds": _r(ps.wall_s, 3),
                              "stopped": stops.get(key.id), "prompt_format": _prompt_format(recs),
                              **latency_fields(key, recs, [], slo)})
            continue
        stats = cell_stats(recs, seed_key=key.id)
        # Open-loop cells are kept apart: readers of "cells" take concurrency as requests in flight.
        (open_loop if key.open_loop else cells).append(
            _cell_entry(key, recs, stats, plain.get(key.group, []), plain_stats.get(key.group), stops.get(key.id), slo))
    totals = {"records": len(records), "target_forwards": sum(r.forwards for r in records),
              "seconds": round(sum(r.wall_s for r in records), 3)}
    out = {"schema": SCHEMA, "conventions": CONVENTIONS, "run": dict(run), "totals": totals,
           "cells": cells, "baselines": baselines}
    if open_loop or open_base:
        out["open_loop"], out["open_loop_baselines"] = open_loop, open_base
    curves = load_curves(cells)
    if curves:  # measured at two or more concurrency levels
        out["load"] = curves
    return out


def write_json_atomic(path: Path, data: Any) -> None:
    """Write to a temporary file in the same folder, fsync, then rename over ``path``."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise

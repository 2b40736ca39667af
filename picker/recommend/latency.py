"""The plan's predicted latency, and the profile's latency targets as constraints.

Per batch range of the schedule, plain decoding's and the plan's TTFT, p50 / p99 ITL and mean
TPOT (``policies.latency_model``: one step is one gap, a step's accepted tokens arrive together,
other requests' prefills land in the gaps, prefill sets TTFT), read off the same step costs the
speedups are priced with: a setting's step is ``plain step × step ratio`` and its tokens per step
``predicted speedup × step ratio``, so a plan's TPOT ratio to plain is its speedup's inverse
(prefills aside) by construction.

The profile's ``slo`` (``itl_p99_ms``, ``itl_p50_ms``, ``ttft_ms``, ``tpot_ms``) is checked at every
batch the workload runs at. An option that breaks a target plain decoding meets is infeasible, with
the reason in Alternatives; a target plain decoding already misses rules nothing out (no setting
meets it), and the plan says so, with what the deployed setting makes of it.

    >>> _ms(8.96), _ms(23.04), _ms(380.2)
    ('9.0', '23.0', '380')
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from picker.inputs.workload import WorkloadProfile
from picker.recommend.contract import LatencyFigures, PlanLatency, RangeLatency, Recommendation, SloCheck
from picker.recommend.costs import cost_context
from picker.recommend.figures import rounded
from picker.recommend.schedule import Deployment
from picker.recommend.table import BATCH_GRID, Bucket, Scored, ScoredTable, pinned
from policies import (
    CostContext,
    Latency,
    Share,
    StepCost,
    expected_length,
    latency,
    plain_step_seconds,
    pooled_latency,
    prefill_seconds,
)

SLO_LABELS = {"itl_p99_ms": "p99 ITL", "itl_p50_ms": "p50 ITL", "ttft_ms": "TTFT", "tpot_ms": "TPOT"}
# The targets that rule options out. A median gap of a speculative deployment is a whole step (its
# accepted tokens arrive as one chunk), longer than plain's by construction, so a p50 ITL target
# would forbid every speculation that pays; it is checked and reported, and tpot_ms holds the
# per-token pace instead.
CONSTRAINTS = ("itl_p99_ms", "ttft_ms", "tpot_ms")
# The rollout's tail-latency gate: the canary's p99 ITL over the baseline's may exceed the predicted
# ratio by this much before it fails. The model's p99 has no machine jitter (a preempted thread, a
# network hiccup) and is validated to about this median error (docs/latency-prediction.md).
ITL_GATE_TOLERANCE = 0.15


@dataclass(frozen=True)
class Traffic:
    """What the latency of a request depends on besides its steps: lengths and prefill times."""

    output_tokens: float
    prompt_tokens: int
    long_prompt_tokens: int  # the longest prompt the profile states (its p90, or largest point)
    prefill_s: float  # the target's prefill of a mean prompt
    long_prefill_s: float
    ctx: CostContext
    joint_share: float = 1.0  # what a second prompt adds to one prefill forward (policies.latency_model)
    # (drafter, long) -> seconds: a pure function of the fields above, asked once per scored share
    # (thousands of times per plan), so kept once per Traffic.
    _drafter_s: dict[tuple[str, bool], float] = field(default_factory=dict, compare=False, repr=False)

    def drafter_prefill(self, drafter: str | None, long: bool = False) -> float:
        """The drafter's own prefill of a (mean or long) prompt; 0 for plain decoding."""
        if drafter is None:
            return 0.0
        key = (drafter, long)
        if key not in self._drafter_s:
            c = self.ctx
            self._drafter_s[key] = prefill_seconds(
                c.target, c.hardware, self.long_prompt_tokens if long else self.prompt_tokens, c.engine,
                c.num_devices, drafter=drafter, draft=c.draft)[1]  # type: ignore[arg-type]
        return self._drafter_s[key]


def traffic_of(profile: WorkloadProfile, ctx: CostContext | None = None) -> Traffic:
    """The profile's lengths and its prompts' prefill on ``ctx``'s curve (default: the profile's engine)."""
    ctx = ctx or cost_context(profile)
    t = profile.traffic
    mean = max(int(round(t.prompt_tokens.expected())), 1)
    p = t.prompt_tokens
    long = int(p.p90 if p.p90 is not None else max(x.value for x in p.points) if p.points else mean)
    pre = prefill_seconds(ctx.target, ctx.hardware, mean, ctx.engine, ctx.num_devices)[0]
    pre_long = prefill_seconds(ctx.target, ctx.hardware, long, ctx.engine, ctx.num_devices)[0]
    two = prefill_seconds(ctx.target, ctx.hardware, 2 * mean, ctx.engine, ctx.num_devices)[0]
    share = min(max(two / pre - 1.0, 0.0), 1.0) if pre > 0 else 1.0
    return Traffic(t.output_tokens.expected(), mean, long, pre, pre_long, ctx, share)


@dataclass(frozen=True)
class Setting:
    """One share of the traffic at one batch: its step, tokens per step and drafter (None: plain)."""

    weight: float  # share of tokens
    step_s: float
    tokens_per_step: float
    drafter: str | None


def mixture(settings: Sequence[Setting], tr: Traffic, batch: int, long: bool = False) -> Latency:
    """``policies.pooled_latency`` of ``settings``, each request's prefill its prompt's (mean or long)
    plus its drafter's own."""
    base = tr.long_prefill_s if long else tr.prefill_s
    shares = [Share(s.weight, s.step_s, s.tokens_per_step, base + tr.drafter_prefill(s.drafter, long),
                    tr.joint_share) for s in settings]
    return pooled_latency(shares, tr.output_tokens, batch)


def long_ttft_ms(settings: Sequence[Setting], tr: Traffic) -> float:
    """The token-weighted TTFT of ``settings`` at the longest prompt: ``mixture(..., long=True).ttft_ms``
    without pooling the gaps it does not read."""
    total = sum(s.weight for s in settings) or 1.0
    return sum(s.weight / total * 1e3 * (tr.long_prefill_s + tr.drafter_prefill(s.drafter, True)) for s in settings)


def _figures(lat: Latency) -> LatencyFigures:
    return LatencyFigures(ttft_ms=rounded(lat.ttft_ms), itl_ms_p50=rounded(lat.itl_ms_p50),
                          itl_ms_p99=rounded(lat.itl_ms_p99), tpot_ms_mean=rounded(lat.tpot_ms_mean))


def _tokens_per_step(table: ScoredTable, s: Scored, b: Bucket, ratio: float) -> float:
    """E[L] as the plan prices it: its predicted speedup times the step ratio (so throughput agrees),
    else from the bucket's α where that speedup was not scored."""
    if b.key in s.speedups:
        return max(1.0, s.speedups[b.key][0] * ratio)
    return expected_length(s.config, table.alpha(s.plugin.name, b.task, b.temperature).mean)


def deployed_settings(table: ScoredTable, deployed: Deployment | None, batch: int,
                      plain_s: float) -> list[Setting]:
    """What the plan runs on each share of the traffic at ``batch`` (plain where it is off)."""
    out = []
    for b in pinned(table.buckets, batch=batch):
        s = deployed.runs(b) if deployed is not None else None
        cost = s.costs_by_batch.get(batch) if s is not None else None
        if s is None or cost is None:
            out.append(Setting(b.weight, plain_s, 1.0, None))
            continue
        out.append(Setting(b.weight, plain_s * cost.step_ratio, _tokens_per_step(table, s, b, cost.step_ratio),
                           s.caps.draft_cost))
    return out


def _at_batch(table: ScoredTable, lo: int, hi: int | None) -> int:
    weights: dict[int, float] = {}
    for b in table.buckets:
        if lo <= b.batch and (hi is None or b.batch <= hi):
            weights[b.batch] = weights.get(b.batch, 0.0) + b.weight
    if weights:
        return max(weights, key=lambda k: (weights[k], -k))
    return next((g for g in BATCH_GRID if g >= lo), BATCH_GRID[-1])


def plan_latency(table: ScoredTable, deployed: Deployment | None) -> PlanLatency:
    """Per batch range of the plan (one open range when speculation is off): plain's and the plan's
    latency, and every latency target of the profile checked at each of the workload's batches."""
    tr = traffic_of(table.profile)
    ranges = [(r.min_batch, r.max_batch) for r in deployed.ranges] if deployed is not None else [(1, None)]
    rows = []
    for lo, hi in ranges:
        batch = _at_batch(table, lo, hi)
        plain_s = _plain_at(table, tr.ctx, batch)
        plain = latency(plain_s, 1.0, tr.prefill_s, tr.prefill_s, tr.output_tokens, batch, joint_share=tr.joint_share)
        dep = mixture(deployed_settings(table, deployed, batch, plain_s), tr, batch)
        rows.append(RangeLatency(
            min_batch=lo, max_batch=hi, at_batch=batch, plain=_figures(plain), deployed=_figures(dep),
            itl_p99_vs_plain=rounded(dep.itl_ms_p99 / plain.itl_ms_p99),
            tpot_vs_plain=rounded(dep.tpot_ms_mean / plain.tpot_ms_mean)))
    return PlanLatency(per_range=rows, slo=slo_checks(table, deployed, tr), assumptions=assumptions(tr))


def _plain_at(table: ScoredTable, ctx: CostContext, batch: int) -> float:
    """Plain step seconds at ``batch`` as the scored step costs have it (calibrated where a file was
    given), else on the profile's curve."""
    for r in table.rows:
        cost = r.costs_by_batch.get(batch) or (r.cost if batch == table.typical_batch else None)
        if cost is not None:
            return cost.plain_seconds
    return plain_step_seconds(ctx, batch)


def _value(lat: Latency, slo: str) -> float:
    return {"itl_p99_ms": lat.itl_ms_p99, "itl_p50_ms": lat.itl_ms_p50, "ttft_ms": lat.ttft_ms,
            "tpot_ms": lat.tpot_ms_mean}[slo]


def targets(profile: WorkloadProfile) -> dict[str, float]:
    """The profile's latency targets that are set, by field name."""
    return {k: float(v) for k in SLO_LABELS if (v := getattr(profile.slo, k, None)) is not None}


def _ms(x: float) -> str:
    return f"{x:.1f}" if x < 100 else f"{x:.0f}"


def _plain_what(slo: str, lat: Latency, tr: Traffic) -> str:
    if slo == "ttft_ms":
        return f"to prefill a {tr.long_prompt_tokens}-token prompt"
    if slo == "tpot_ms":
        return "per output token"
    value = _value(lat, slo)
    if abs(value - lat.step_ms) < 1e-6:
        return "a step"
    return f"(a {_ms(lat.step_ms)} ms step plus other requests' prefills)"


def worst(slo: str, by_batch: Mapping[int, tuple[Latency, Latency]], use: int) -> tuple[int, float]:
    """(batch, value) where ``slo``'s figure is largest over the workload's batches; ``use`` 0 plain, 1 the option."""
    batch = max(by_batch, key=lambda b: _value(by_batch[b][use], slo))
    return batch, _value(by_batch[batch][use], slo)


def _judge(profile: WorkloadProfile, tr: Traffic, by_batch: Mapping[int, tuple[Latency, Latency]],
           who: str) -> list[tuple[str, float, int, float, float, bool, bool, str]]:
    """Each target: (slo, target, batch, plain, option, plain meets, option meets, message)."""
    out = []
    for slo, target in targets(profile).items():
        label = SLO_LABELS[slo]
        pb, pv = worst(slo, by_batch, 0)
        ob, ov = worst(slo, by_batch, 1)
        plain_ok, ok = pv <= target, ov <= target
        if not plain_ok:
            msg = (f"plain decoding already misses the {target:g} ms {label} SLO: about {_ms(pv)} ms "
                   f"{_plain_what(slo, by_batch[pb][0], tr)} at batch {pb}")
            if ov > pv * (1 + 1e-9):
                msg += f"; {who} makes it about {_ms(ov)} ms"
            elif ov < pv:
                msg += f"; {who} brings it to about {_ms(ov)} ms" + ("" if ok else ", still above it")
        elif not ok:
            msg = (f"{who} breaks the {target:g} ms {label} SLO that plain decoding meets: about {_ms(ov)} ms "
                   f"at batch {ob} (plain {_ms(_value(by_batch[ob][0], slo))} ms)")
            if slo not in CONSTRAINTS:
                msg += " (reported, not a constraint: a speculative step's tokens arrive together, so its median " \
                       "gap is a whole step; tpot_ms holds the per-token pace)"
        else:
            msg = f"{who} meets the {target:g} ms {label} SLO: about {_ms(ov)} ms at batch {ob} (plain {_ms(pv)} ms)"
        out.append((slo, target, ob, pv, ov, plain_ok, ok, msg))
    return out


def breaks(verdict: tuple[str, float, int, float, float, bool, bool, str]) -> bool:
    """An option breaks a target where plain decoding meets it and the option does not. A target plain
    decoding already misses rules no option out (no setting meets it): the plan says so instead. The
    p50 ITL target is reported, never a constraint (:data:`CONSTRAINTS`)."""
    return verdict[0] in CONSTRAINTS and verdict[5] and not verdict[6]


def option_slo_notes(profile: WorkloadProfile, ctx: CostContext, drafter: str,
                     priced: Sequence[tuple[Bucket, StepCost, float]]) -> tuple[str, ...]:
    """Why an option (its step cost and predicted speedup on each workload bucket) is infeasible under
    the profile's latency targets; empty when it breaks none (scoring's feasibility check)."""
    if not targets(profile):
        return ()
    tr = traffic_of(profile, ctx)
    by_batch = {}
    for batch in sorted({b.batch for b, _, _ in priced}):
        here = [(b, c, s) for b, c, s in priced if b.batch == batch]
        plain_s = here[0][1].plain_seconds
        plain = latency(plain_s, 1.0, tr.prefill_s, tr.prefill_s, tr.output_tokens, batch, joint_share=tr.joint_share)
        settings = [Setting(b.weight, plain_s * c.step_ratio, max(1.0, s * c.step_ratio), drafter) for b, c, s in here]
        opt = mixture(settings, tr, batch)
        if "ttft_ms" in targets(profile):  # TTFT is held to the longest prompt the profile states
            plain = _with_ttft(plain, 1e3 * tr.long_prefill_s)
            opt = _with_ttft(opt, long_ttft_ms(settings, tr))
        by_batch[batch] = (plain, opt)
    return tuple(v[-1] for v in _judge(profile, tr, by_batch, "it") if breaks(v))


BREAKS = "it breaks the "  # how option_slo_notes' sentences begin


def _with_ttft(lat: Latency, ttft_ms: float) -> Latency:
    return Latency(ttft_ms, lat.itl_ms_p50, lat.itl_ms_p99, lat.tpot_ms_mean, lat.step_ms, lat.tokens_per_step,
                   lat.prefills_per_gap)


def slo_checks(table: ScoredTable, deployed: Deployment | None, tr: Traffic | None = None) -> list[SloCheck]:
    """The profile's targets against plain decoding and the plan, at the workload's batches."""
    profile = table.profile
    if not targets(profile):
        return []
    tr = tr or traffic_of(profile)
    by_batch = {}
    for batch in sorted({b.batch for b in table.buckets}):
        plain_s = _plain_at(table, tr.ctx, batch)
        settings = deployed_settings(table, deployed, batch, plain_s)
        plain = latency(plain_s, 1.0, tr.prefill_s, tr.long_prefill_s, tr.output_tokens, batch,
                        joint_share=tr.joint_share)
        opt = mixture(settings, tr, batch)
        by_batch[batch] = (plain, _with_ttft(opt, long_ttft_ms(settings, tr)))
    who = "the plan" if deployed is not None else "leaving speculation off"
    return [SloCheck(slo=slo, target_ms=target, at_batch=b, plain_ms=rounded(pv), deployed_ms=rounded(ov),  # type: ignore[arg-type]
                     met_by_plain=pok, met_by_deployed=ok, message=msg)
            for slo, target, b, pv, ov, pok, ok, msg in _judge(profile, tr, by_batch, who)]


def slo_blocked(table: ScoredTable) -> str | None:
    """Why nothing is deployable, where latency targets are the reason: every option the engine can
    run with its drafters breaks a target plain decoding meets (None otherwise)."""
    runnable = [r for r in table.rows if r.option.engine_supported and r.option.feasible]
    broken = [r for r in runnable if any(n.startswith(BREAKS) for n in r.notes)]
    if not runnable or len(broken) < len(runnable):
        return None
    names = sorted({n.removeprefix(BREAKS).split(" SLO")[0] for r in broken for n in r.notes if n.startswith(BREAKS)})
    return (f"every option this deployment can run breaks the {' and the '.join(names)} SLO that plain decoding "
            "meets (Alternatives says by how much)")


def plain_misses(table: ScoredTable) -> list[str]:
    """Each latency target plain decoding already misses, as the plan's sentence ("plain decoding
    already misses the 8 ms p99 ITL SLO: about 9.0 ms a step at batch 32")."""
    return [c.message.split("; ")[0] + ": no setting meets it, so it rules no option out"
            for c in slo_checks(table, None) if not c.met_by_plain]


def assumptions(tr: Traffic) -> list[str]:
    """What the latency figures average over and assume (carried in the JSON and the markdown)."""
    return [
        "one step is one inter-token gap: a speculative step's accepted tokens arrive together, as one chunk "
        "(vllm bench serve and specpick profile count it as one gap); a step that accepts nothing still costs a "
        "whole draft + verify step, so p99 ITL is about the full step time while mean TPOT is the step time "
        "over the tokens a step emits",
        "a step's time is the load curve's plain step at that batch times the plan's step ratio (the same step "
        "costs as its speedups); tokens per step = predicted speedup x step ratio, token-weighted over the task "
        "mix and temperatures",
        f"closed loop at that batch, requests of the profile's mean output ({tr.output_tokens:g} tokens): a gap "
        "also holds other requests' prefills, Poisson with mean (batch - 1) / (decode steps per request + 1), "
        "each one prompt's prefill forward",
        f"TTFT at the mean prompt ({tr.prompt_tokens} tokens): its prefill forward plus the drafter's own "
        f"prefill where it keeps a KV cache (a draft model, an EAGLE layer), no queueing; the TTFT SLO is held "
        f"to the longest prompt the profile states ({tr.long_prompt_tokens} tokens)",
        "prefill is priced on the profile's engine curve as shipped; no machine jitter, preemption or network "
        "time is in these figures (measured p99s carry them: docs/latency.md)",
    ]


def typical_itl(table: ScoredTable, deployed: Deployment | None) -> tuple[int, float, float]:
    """(typical batch, plain p99 ITL ms, deployed p99 ITL ms) there: the rollout's tail-latency gate."""
    tr = traffic_of(table.profile)
    batch = table.typical_batch
    plain_s = _plain_at(table, tr.ctx, batch)
    plain = latency(plain_s, 1.0, tr.prefill_s, tr.prefill_s, tr.output_tokens, batch, joint_share=tr.joint_share)
    dep = mixture(deployed_settings(table, deployed, batch, plain_s), tr, batch)
    return batch, plain.itl_ms_p99, dep.itl_ms_p99


def itl_gate(itl: tuple[int, float, float] | None, slo: float | None) -> str:
    """The rollout's tail-latency gate: the predicted p99 ITL ratio at the typical batch, with
    :data:`ITL_GATE_TOLERANCE`, and the SLO where the profile sets one."""
    under = f", and under the {slo:g} ms SLO" if slo else ""
    if itl is None:
        return f"p99 ITL no worse than the baseline's{under}; a rejected step costs a whole draft + verify step"
    batch, plain, spec = itl
    ratio = spec / plain if plain > 0 else 1.0
    return (f"p99 ITL at most {ratio * (1 + ITL_GATE_TOLERANCE):.2f}x the baseline's at the same load: predicted "
            f"{ratio:.2f}x at batch {batch} (about {_ms(spec)} ms against {_ms(plain)} ms; a step that accepts "
            f"nothing still costs a whole draft + verify step), {ITL_GATE_TOLERANCE:.0%} tolerance for what the "
            f"model leaves out{under}")


def latency_markdown(rec: Recommendation) -> list[str]:
    """The plan's latency section: per batch range plain → plan, the SLO checks, what it assumes."""
    lat = rec.latency
    if lat is None:
        return []
    out = ["### Latency (predicted, per request)", "",
           "| batch size | at batch | TTFT ms | p50 ITL ms | p99 ITL ms | mean TPOT ms |", "|---|---|---|---|---|---|"]
    for r in lat.per_range:
        cells = [f"{_ms(getattr(r.plain, f))} → {_ms(getattr(r.deployed, f))}"
                 for f in ("ttft_ms", "itl_ms_p50", "itl_ms_p99", "tpot_ms_mean")]
        out.append(f"| {r.min_batch}–{'∞' if r.max_batch is None else r.max_batch} | {r.at_batch} | "
                   + " | ".join(cells) + " |")
    out += ["", "Each cell: plain decoding → the plan. " + " ".join(f"{a[0].upper()}{a[1:]}." for a in lat.assumptions)]
    out += [f"- SLO: {c.message}." for c in lat.slo]
    return [*out, ""]

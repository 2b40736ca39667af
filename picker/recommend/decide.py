"""From scored options to the Recommendation: the deployed setting, its temperature switch and
batch schedule, per-task table, alternatives, engine configs, rollout and evidence.

    >>> from picker.recommend.decide import merge_schedule
    >>> merge_schedule([(1, 4), (2, 4), (4, 3), (8, 0)])
    [(1, 2, 4), (3, 4, 3), (5, None, 0)]
"""

from __future__ import annotations

from picker.recommend.contract import (
    BatchRange,
    Candidate,
    Decision,
    Evidence,
    Recommendation,
    RolloutStep,
    SpeedupRange,
    TaskRow,
    TemperatureSwitch,
    TreeShape,
)
from picker.recommend.engine_configs import ScheduleEntry, build_engine_configs
from picker.recommend.scoring import NOT_WORTH_IT, TEMPERATURE_GRID, Bucket, Option, Scorer, harmonic
from policies import analytic

SCHEDULE_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
ALTERNATIVES = 8


def merge_schedule(points: list[tuple[int, int]]) -> list[tuple[int, int | None, int]]:
    """(batch, K) at grid points → contiguous ranges (min, max, K); point b_i covers (b_{i-1}, b_i]."""
    ranges: list[list] = []
    prev = 0
    for batch, k in points:
        if ranges and ranges[-1][2] == k:
            ranges[-1][1] = batch
        else:
            ranges.append([prev + 1, batch, k])
        prev = batch
    if ranges:
        ranges[-1][1] = None  # the last range is open-ended
    return [tuple(r) for r in ranges]  # type: ignore[misc]


def _family(options: list[Option], chosen: Option) -> list[Option]:
    """Configurations a schedule may switch between: same strategy and branching, no deeper than the
    deployed one (engines take the deployed length as the maximum: vLLM's num_speculative_tokens,
    TensorRT-LLM's max_draft_len at the smallest schedule key)."""
    return [o for o in options if o.plugin.name == chosen.plugin.name and o.config.topk == chosen.config.topk
            and o.config.depth <= chosen.config.depth]


def _speedup_at(scorer: Scorer, opt: Option, bs: list[Bucket], batch: int | None = None,
                temperature: float | None = None, which: int = 0) -> float:
    """Workload speedup of ``opt`` with the batch and/or temperature pinned (weights kept)."""
    return harmonic([(b.weight, scorer.bucket_speedup(opt, b)[which]) for b in _pinned(bs, batch, temperature)])


def _pinned(bs: list[Bucket], batch: int | None = None, temperature: float | None = None) -> list[Bucket]:
    return [Bucket(b.task, batch or b.batch, b.temperature if temperature is None else temperature, b.weight)
            for b in bs]


def temperature_switch(scorer: Scorer, opt: Option, bs: list[Bucket]) -> TemperatureSwitch:
    """Speculation off above the highest temperature at which it still pays.

    Scanned from the top, not from 0: the curve need not fall monotonically when its evidence
    differs by temperature (measured cells near the workload's temperatures, priors and the
    roofline elsewhere). A scan from 0 stopped at the first dip -- a prior-based 0.9x at T = 0 --
    and switched speculation off above 0 for a T = 1 workload measured at 1.8x.
    """
    scorer.prime([opt], [b for t in TEMPERATURE_GRID for b in _pinned(bs, temperature=t)])
    paying = [t for t in TEMPERATURE_GRID if _speedup_at(scorer, opt, bs, temperature=t) >= 1.0]
    top = TEMPERATURE_GRID[-1]
    if paying and paying[-1] == top:
        return TemperatureSwitch(above=None, action="none",
                                 reason=f"predicted speedup stays above 1.0x up to temperature {top:g}")
    if not paying:
        return TemperatureSwitch(above=0.0, action="disable",
                                 reason="predicted speedup is below 1.0x at every temperature")
    return TemperatureSwitch(above=paying[-1], action="disable",
                             reason=f"predicted speedup falls below 1.0x above temperature {paying[-1]:g}")


def batch_schedule(scorer: Scorer, options: list[Option], chosen: Option, bs: list[Bucket],
                   switch: TemperatureSwitch) -> list[BatchRange]:
    family = _family(options, chosen)
    kept = [b for b in bs if switch.above is None or b.temperature <= switch.above] or bs
    points, best_s = [], {}
    cap = chosen.config.depth
    scorer.prime(family, [b for batch in SCHEDULE_BATCHES for b in _pinned(kept, batch=batch)])
    for batch in SCHEDULE_BATCHES:
        # Never lengthen as the batch grows: verification only gets dearer with more tokens in flight.
        allowed = [o for o in family if o.config.depth <= cap] or family
        best = max(allowed, key=lambda o: _speedup_at(scorer, o, kept, batch=batch))
        s = _speedup_at(scorer, best, kept, batch=batch)
        k = best.config.depth if s >= 1.0 else 0
        cap = max(k, 1) if k else cap
        points.append((batch, k))
        best_s[batch] = s if k else 1.0
    # Once off, stay off: a schedule that turns speculation back on at a larger batch is noise.
    for i in range(1, len(points)):
        if points[i - 1][1] == 0:
            points[i] = (points[i][0], 0)
            best_s[points[i][0]] = 1.0
    out = []
    for lo, hi, k in merge_schedule(points):
        grid = [b for b in SCHEDULE_BATCHES if b >= lo and (hi is None or b <= hi)]
        out.append(BatchRange(min_batch=lo, max_batch=hi, num_speculative_tokens=k,
                              predicted_speedup=round(best_s[grid[0]], 3),
                              predicted_speedup_at_max_batch=round(best_s[grid[-1]], 3)))
    return out


def _policy_speedups(scorer: Scorer, options: list[Option], chosen: Option, bs: list[Bucket],
                     switch: TemperatureSwitch, schedule: list[BatchRange]) -> SpeedupRange:
    """Workload speedup of the deployed policy: schedule by batch, off above the switch."""
    family = {o.config.depth: o for o in _family(options, chosen) if o.config.topk == chosen.config.topk}
    family[chosen.config.depth] = chosen
    out = []
    for which in range(3):
        pairs = []
        for b in bs:
            k = next(r.num_speculative_tokens for r in schedule
                     if r.min_batch <= b.batch and (r.max_batch is None or b.batch <= r.max_batch))
            off = k == 0 or (switch.above is not None and b.temperature > switch.above)
            s = 1.0 if off else scorer.bucket_speedup(family.get(k, chosen), b)[which]
            pairs.append((b.weight, s))
        out.append(harmonic(pairs))
    return SpeedupRange(mean=round(out[0], 3), low=round(min(out), 3), high=round(max(out), 3))


def _tree(opt: Option) -> TreeShape | None:
    c = opt.config
    return TreeShape(depth=c.depth, topk=c.topk, num_draft_tokens=c.num_draft_tokens) if c.is_tree else None


def _candidate(scorer: Scorer, opt: Option, batch: int) -> Candidate:
    return Candidate(
        strategy=opt.plugin.name, num_speculative_tokens=opt.config.depth, tree=_tree(opt),
        predicted_speedup=SpeedupRange(mean=round(opt.mean, 3), low=round(opt.low, 3), high=round(opt.high, 3)),
        break_even_alpha=round(analytic.break_even(opt.config, scorer.cost(opt, batch)), 3),
        feasible=opt.feasible, engine_supported=opt.engine_supported, notes=opt.notes)


def per_task_rows(scorer: Scorer, options: list[Option], chosen: Option | None, bs: list[Bucket]) -> list[TaskRow]:
    rows = []
    for task in dict.fromkeys(b.task for b in bs):
        tb = [b for b in bs if b.task == task]
        weight = sum(b.weight for b in tb)
        usable = [o for o in options if o.deployable]
        best = max(usable, key=lambda o: _speedup_at(scorer, o, tb)) if usable else None
        if best is None:
            continue
        s = [_speedup_at(scorer, best, tb, which=i) for i in range(3)]
        # The α the decision used: this configuration's evidence on the task's heaviest bucket (what
        # --explain shows), its source over all the task's buckets. (The median temperature's α showed
        # a prior when no cell lay near it, while the decision ran on the measured cell.)
        a = scorer.candidate(best, max(tb, key=lambda b: b.weight)).evidence
        sources = {scorer.candidate(best, b).evidence.source for b in tb}
        rows.append(TaskRow(
            task=task, weight=round(weight, 4), strategy=best.plugin.name, alpha=round(a.alpha, 3),
            alpha_range=(round(a.alpha_low, 3), round(a.alpha_high, 3)),
            evidence=sources.pop() if len(sources) == 1 else "mixed",  # type: ignore[arg-type]
            predicted_speedup=SpeedupRange(mean=round(s[0], 3), low=round(min(s), 3), high=round(max(s), 3)),
            deployed_speedup=round(_speedup_at(scorer, chosen, tb), 3) if chosen else 1.0))
    return rows


def alternatives(scorer: Scorer, options: list[Option], batch: int) -> list[Candidate]:
    """Each strategy's best deployable configuration, ranked; then better configurations this
    deployment cannot run (missing drafter, engine limits), each saying why."""
    best: dict[tuple[str, bool], Option] = {}
    for o in options:
        key = (o.plugin.name, o.deployable)
        if key not in best or o.mean > best[key].mean:
            best[key] = o
    deployable = {name for name, ok in best if ok}
    shown = [o for (name, ok), o in best.items()
             if ok or name not in deployable or o.mean > best[(name, True)].mean]
    ranked = sorted(shown, key=lambda o: (not o.deployable, -o.mean))
    return [_candidate(scorer, o, batch) for o in ranked[:ALTERNATIVES]]


def rollout(strategy: str, break_even: float, accept_length: float, itl_p99: float | None) -> list[RolloutStep]:
    slo = f" and under the {itl_p99:g} ms SLO" if itl_p99 else ""
    steps = [
        ("baseline", "Run without speculation; record tokens/s, p50 and p99 inter-token latency per task.",
         "a baseline of at least a few thousand requests per task type"),
        ("enable on a canary", f"Enable {strategy} with the config below on one replica or ~5% of traffic.",
         "no errors; greedy (T=0) outputs identical to the baseline on a fixed prompt set"),
        ("measure alpha", "Measure per-token acceptance per task on live traffic "
         "(`specpick profile --backend <engine> --url ...`).",
         f"alpha >= break-even {break_even:.2f} (accept length >= {accept_length:.2f} tokens per verify) for "
         "every task with real traffic; otherwise turn it off "
         "for that traffic or re-run `specpick recommend --measurements`"),
        ("watch tail latency", "Compare p99 inter-token latency with the baseline at the same load.",
         f"p99 ITL within 5% of the baseline{slo}; a rejected step costs a whole verify"),
        ("ramp", "Ramp 25% -> 50% -> 100%, keeping a one-flag rollback.",
         "each stage holds the alpha and p99 gates for a full traffic cycle (a day)"),
        ("keep measuring", "Re-profile when the traffic mix, temperature or batch size drifts.",
         "alpha stays above break-even; the SDK Controller switches off below it"),
    ]
    return [RolloutStep(step=i + 1, name=n, action=a, gate=g) for i, (n, a, g) in enumerate(steps)]


def _engine_configs(scorer: Scorer, chosen: Option, schedule: list[BatchRange]) -> dict:
    d = scorer.profile.drafters
    art = chosen.caps.artifact
    spec = getattr(d, art, None) if art else None
    path = None
    if art is not None:
        path = (getattr(spec, "path", None) or getattr(spec, "name", None)) if spec else f"<trained {art}>"
    sched = [ScheduleEntry(r.min_batch, r.max_batch, r.num_speculative_tokens) for r in schedule]
    c = chosen.config
    return build_engine_configs(
        strategy=chosen.plugin.name, engines=chosen.caps.engines, num_speculative_tokens=c.depth,
        tree=(c.depth, c.topk, c.num_draft_tokens), schedule=sched, draft_path=path)


def _evidence(scorer: Scorer, options: list[Option], chosen: Option | None, bs: list[Bucket]) -> Evidence:
    plugins = [chosen.plugin] if chosen else list({o.plugin.name: o.plugin for o in options}.values())
    used = [scorer.alpha(p, b.task, b.temperature) for p in plugins for b in bs]
    sources = {a.source for a in used}
    source = "mixed" if len(sources) > 1 else (sources.pop() if sources else "prior")
    citations = sorted({c for a in used for c in a.citations})
    notes = [
        "alpha is per-token acceptance (accepted drafts / proposed drafts); E[L] counts the bonus token",
        "costs come from a roofline of the target on the profile's hardware with engine efficiencies "
        "that are assumptions until calibrated (policies/roofline.py)",
        "tree E[L] assumes the i-th ranked child accepts with alpha*(1-alpha)^(i-1) (Sequoia-style positional model)",
    ]
    return Evidence(source=source, citations=citations, notes=notes)  # type: ignore[arg-type]


def _typical_batch(bs: list[Bucket]) -> int:
    weights: dict[int, float] = {}
    for b in bs:
        weights[b.batch] = weights.get(b.batch, 0.0) + b.weight
    return max(weights, key=lambda k: weights[k])


def decide(scorer: Scorer, options: list[Option], bs: list[Bucket], *, path: str = "") -> Recommendation:
    profile = scorer.profile
    usable = sorted((o for o in options if o.deployable), key=lambda o: (-o.mean, -o.low))
    chosen = usable[0] if usable and usable[0].mean >= NOT_WORTH_IT else None
    batch = _typical_batch(bs)
    rationale, warnings = [], []
    if chosen is None:
        why = ("no strategy is deployable on this profile" if not usable else
               f"the best option ({usable[0].plugin.name}, {usable[0].config.label}) predicts only "
               f"{usable[0].mean:.2f}x")
        rationale.append(f"Leave speculation off: {why}.")
        decision = Decision(strategy="none", num_speculative_tokens=0, tree=None,
                            temperature_switch=TemperatureSwitch(above=None, action="none", reason=why),
                            batch_schedule=[BatchRange(min_batch=1, max_batch=None, num_speculative_tokens=0,
                                                       predicted_speedup=1.0, predicted_speedup_at_max_batch=1.0)])
        return Recommendation(
            profile=path or profile.name, engine=profile.engine.name, decision=decision,
            predicted_speedup=SpeedupRange(mean=1.0, low=1.0, high=1.0), break_even_alpha=1.0,
            break_even_accept_length=1.0,
            per_task=per_task_rows(scorer, options, None, bs), alternatives=alternatives(scorer, options, batch),
            engine_configs={}, rollout=rollout("speculation", 1.0, 1.0, profile.slo.itl_p99_ms),
            evidence=_evidence(scorer, options, None, bs), rationale=rationale, warnings=warnings)

    switch = temperature_switch(scorer, chosen, bs)
    schedule = batch_schedule(scorer, options, chosen, bs, switch)
    k_max = max(r.num_speculative_tokens for r in schedule)
    if 0 < k_max < chosen.config.depth:
        # The schedule never uses the full depth: deploy the length it does use at small batches,
        # so the engine's maximum (vLLM num_speculative_tokens, TRT max_draft_len) matches it.
        chosen = max(_family(options, chosen), key=lambda o: (o.config.depth == k_max, o.mean))
        schedule = batch_schedule(scorer, options, chosen, bs, switch)
    predicted = _policy_speedups(scorer, options, chosen, bs, switch, schedule)
    be = analytic.break_even(chosen.config, scorer.cost(chosen, batch))
    rationale += _rationale(scorer, chosen, usable, switch, schedule, batch, be)
    warnings += [n for n in chosen.notes]
    if not chosen.caps.engines.get(profile.engine.name):
        warnings.append(f"{profile.engine.name} cannot run {chosen.plugin.name}")
    decision = Decision(strategy=chosen.plugin.name, num_speculative_tokens=chosen.config.depth,  # type: ignore[arg-type]
                        tree=_tree(chosen), temperature_switch=switch, batch_schedule=schedule)
    return Recommendation(
        profile=path or profile.name, engine=profile.engine.name, decision=decision,
        predicted_speedup=predicted, break_even_alpha=round(be, 3),
        break_even_accept_length=round(scorer.cost(chosen, batch).step_ratio, 3),
        per_task=per_task_rows(scorer, options, chosen, bs), alternatives=alternatives(scorer, options, batch),
        engine_configs=_engine_configs(scorer, chosen, schedule),
        rollout=rollout(chosen.plugin.name, be, scorer.cost(chosen, batch).step_ratio, profile.slo.itl_p99_ms),
        evidence=_evidence(scorer, options, chosen, bs), rationale=rationale, warnings=warnings)


def _rationale(scorer: Scorer, chosen: Option, usable: list[Option], switch: TemperatureSwitch,
               schedule: list[BatchRange], batch: int, be: float) -> list[str]:
    cost = scorer.cost(chosen, batch)
    out = [
        f"{chosen.plugin.name} with {chosen.config.label} has the best token-weighted speedup over the "
        f"workload ({chosen.mean:.2f}x, range {chosen.low:.2f}-{chosen.high:.2f}x).",
        f"At the typical batch of {batch}, one step costs {cost.step_ratio:.2f} plain forwards "
        f"(draft c={cost.cost_ratio:.3f} per token, verify {cost.verify_ratio:.2f}x, {cost.bound}-bound); "
        f"it pays while alpha >= {be:.2f}.",
    ]
    runner = next((o for o in usable if o.plugin.name != chosen.plugin.name), None)
    if runner is not None:
        out.append(f"Runner-up: {runner.plugin.name} ({runner.config.label}) at {runner.mean:.2f}x.")
    off = [r for r in schedule if r.num_speculative_tokens == 0]
    if off:
        out.append(f"From batch {off[0].min_batch} up, verification is no longer free enough: speculation off.")
    if switch.above is not None:
        out.append(f"Above temperature {switch.above:g} acceptance drops too far: {switch.reason}.")
    return out

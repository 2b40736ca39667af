"""From the scored table to the Recommendation: the deployed setting, its temperature switch and
batch schedule, per-task table, alternatives, engine configs, rollout and evidence.

The decision reads a :class:`~picker.recommend.table.ScoredTable` (``picker.recommend.pipeline``
builds it) and nothing else: every speedup, cost and α it needs was scored before it runs.

    >>> from picker.recommend.decide import merge_schedule
    >>> merge_schedule([(1, 4), (2, 4), (4, 3), (8, 0)])
    [(1, 2, 4), (3, 4, 3), (5, None, 0)]
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

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
from picker.recommend.engine_configs import ENGINE_GREEDY, ScheduleEntry, build_engine_configs
from picker.recommend.measured_load import MEASURED, AnchoredStepCost, cost_source
from picker.recommend.table import (
    BATCH_GRID,
    NOT_WORTH_IT,
    TEMPERATURE_GRID,
    Bucket,
    Scored,
    ScoredTable,
    family,
    harmonic,
    ranked,
)
from policies import break_even

ALTERNATIVES = 8


def merge_schedule(points: list[tuple[int, Hashable]]) -> list[tuple[int, int | None, Any]]:
    """(batch, key) at grid points → contiguous ranges (min, max, key); point b_i covers (b_{i-1}, b_i]."""
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


def temperature_switch(opt: Scored, bs: list[Bucket], batch: int | None = None) -> TemperatureSwitch:
    """Speculation off above the highest temperature at which it still pays.

    Scanned from the top, not from 0: the curve need not fall monotonically when its evidence
    differs by temperature (measured cells near the workload's temperatures, priors and the
    roofline elsewhere). A scan from 0 stopped at the first dip -- a prior-based 0.9x at T = 0 --
    and switched speculation off above 0 for a T = 1 workload measured at 1.8x. A temperature with
    no evidence (a plugin measured only near the workload's, with no published prior) never pays.
    ``batch`` pins the batch size too (a batch range's own switch), else the workload's batch mix.
    """
    known = [t for t in TEMPERATURE_GRID if opt.scored_at(bs, batch=batch, temperature=t)]
    paying = [t for t in known if opt.speedup_at(bs, batch=batch, temperature=t) >= 1.0]
    top = TEMPERATURE_GRID[-1]
    if paying and paying[-1] == known[-1] != top:
        return TemperatureSwitch(above=paying[-1], action="disable",
                                 reason=f"nothing measured or published above temperature {paying[-1]:g}")
    if paying and paying[-1] == top:
        return TemperatureSwitch(above=None, action="none",
                                 reason=f"predicted speedup stays above 1.0x up to temperature {top:g}")
    if not paying:
        return TemperatureSwitch(above=0.0, action="disable",
                                 reason="predicted speedup is below 1.0x at every temperature")
    return TemperatureSwitch(above=paying[-1], action="disable",
                             reason=f"predicted speedup falls below 1.0x above temperature {paying[-1]:g}")


def batch_schedule(rows: tuple[Scored, ...], chosen: Scored, bs: list[Bucket],
                   switch: TemperatureSwitch) -> list[BatchRange]:
    members = family(rows, chosen)
    kept = [b for b in bs if switch.above is None or b.temperature <= switch.above] or bs
    points, best_s, best_o = [], {}, {}
    cap = chosen.config.depth
    for batch in BATCH_GRID:
        # Never lengthen as the batch grows: verification only gets dearer with more tokens in flight.
        allowed = [o for o in members if o.config.depth <= cap] or members
        best = max(allowed, key=lambda o: o.speedup_at(kept, batch=batch))
        s = best.speedup_at(kept, batch=batch)
        k = best.config.depth if s >= 1.0 else 0
        cap = max(k, 1) if k else cap
        points.append((batch, k))
        best_s[batch] = s if k else 1.0
        best_o[batch] = best
    # Once off, stay off: a schedule that turns speculation back on at a larger batch is noise --
    # in the model. A measured gain against concurrency is no noise to smooth away: where the
    # step cost is measured the row follows the measurement (the reference loop, for one, batches
    # plain decoding badly at concurrency 1 and gains more at 2 and 4).
    sources = {batch: cost_source(best_o[batch].costs_by_batch.get(batch)) for batch in BATCH_GRID}
    for i in range(1, len(points)):
        if points[i - 1][1] == 0 and sources[points[i][0]] != MEASURED:
            points[i] = (points[i][0], 0)
            best_s[points[i][0]] = 1.0
    # A range also ends where its step costs change source: every row is measured or modelled.
    out = []
    for lo, hi, (k, source) in merge_schedule([(batch, (k, sources[batch])) for batch, k in points]):
        grid = [b for b in BATCH_GRID if b >= lo and (hi is None or b <= hi)]
        opt = best_o[grid[0]]
        cost = opt.costs_by_batch.get(grid[0])
        be = round(break_even(opt.config, cost), 3) if k and cost is not None else None
        low, high = (opt.speedup_at(kept, batch=grid[0], which=w) for w in (1, 2))
        out.append(BatchRange(min_batch=lo, max_batch=hi, num_speculative_tokens=k,
                              predicted_speedup=round(best_s[grid[0]], 3),
                              predicted_speedup_at_max_batch=round(best_s[grid[-1]], 3), break_even_alpha=be,
                              predicted_speedup_range=(round(low, 3), round(high, 3)), uncertain=low < 1.0 <= high,
                              disable_above_temperature=_range_switch(opt, bs, grid[0], switch) if k else None,
                              step_cost=source))
    return out


def _range_switch(opt: Scored, bs: list[Bucket], batch: int, switch: TemperatureSwitch) -> float | None:
    """The temperature above which ``opt`` stops paying at ``batch``, where that is below the global
    switch: a larger batch makes verification dearer, so speculation can stop paying at a lower
    temperature there than over the workload's batch mix."""
    at = temperature_switch(opt, bs, batch).above
    if at is None or (switch.above is not None and at >= switch.above):
        return None
    return at


def _policy_speedups(rows: tuple[Scored, ...], chosen: Scored, bs: list[Bucket],
                     switch: TemperatureSwitch, schedule: list[BatchRange]) -> SpeedupRange:
    """Workload speedup of the deployed policy: schedule by batch, off above the switch (a range's own
    where it has a lower one).

    A batch range that drafts k tokens runs the chosen shape cut to depth k: the same top-k and, for
    a tree, the node budget nearest the chosen one. (Keying the family by depth alone let the last
    shape listed stand for each depth -- a 32-node tree for a 12-node one -- and the headline fell
    far below the chosen configuration's own workload speedup.)
    """
    budget = chosen.config.num_draft_tokens
    by_depth: dict[int, Scored] = {chosen.config.depth: chosen}
    for o in family(rows, chosen):
        if o.config.topk != chosen.config.topk or o.config.depth == chosen.config.depth:
            continue
        held = by_depth.get(o.config.depth)
        if held is None or abs(o.config.num_draft_tokens - budget) < abs(held.config.num_draft_tokens - budget):
            by_depth[o.config.depth] = o
    out = []
    for which in range(3):
        pairs = []
        for b in bs:
            r = next(r for r in schedule if r.min_batch <= b.batch and (r.max_batch is None or b.batch <= r.max_batch))
            k = r.num_speculative_tokens
            above = r.disable_above_temperature if r.disable_above_temperature is not None else switch.above
            off = k == 0 or (above is not None and b.temperature > above)
            s = 1.0 if off else by_depth.get(k, chosen).speedups[b.key][which]
            pairs.append((b.weight, s))
        out.append(harmonic(pairs))
    return SpeedupRange(mean=round(out[0], 3), low=round(min(out), 3), high=round(max(out), 3))


def _tree(opt: Scored) -> TreeShape | None:
    c = opt.config
    return TreeShape(depth=c.depth, topk=c.topk, num_draft_tokens=c.num_draft_tokens) if c.is_tree else None


def _candidate(opt: Scored) -> Candidate:
    notes = list(opt.notes)
    if opt.measured_levels:
        lo, hi = opt.measured_levels[0], opt.measured_levels[-1]
        notes.append(f"step cost measured under load at batch {lo}-{hi}; the cost model outside")
    return Candidate(
        strategy=opt.plugin.name, num_speculative_tokens=opt.config.depth, tree=_tree(opt),
        predicted_speedup=SpeedupRange(mean=round(opt.mean, 3), low=round(opt.low, 3), high=round(opt.high, 3)),
        break_even_alpha=round(break_even(opt.config, opt.cost), 3),
        feasible=opt.feasible, engine_supported=opt.option.engine_supported, notes=notes)


def per_task_rows(table: ScoredTable, chosen: Scored | None) -> list[TaskRow]:
    rows = []
    bs = table.buckets
    for task in dict.fromkeys(b.task for b in bs):
        tb = [b for b in bs if b.task == task]
        weight = sum(b.weight for b in tb)
        usable = [o for o in table.rows if o.deployable]
        best = max(usable, key=lambda o: o.speedup_at(tb)) if usable else None
        if best is None:
            continue
        s = [best.speedup_at(tb, which=i) for i in range(3)]
        # The α the decision used: the task's heaviest bucket's, its source over all the task's
        # buckets. (The median temperature's α showed a prior when no cell lay near it, while the
        # decision ran on the measured cell at the temperature most of the traffic has.)
        a = table.alpha(best.plugin.name, task, max(tb, key=lambda b: b.weight).temperature)
        sources = {table.alpha(best.plugin.name, task, b.temperature).source for b in tb}
        rows.append(TaskRow(
            task=task, weight=round(weight, 4), strategy=best.plugin.name, alpha=round(a.mean, 3),
            alpha_range=(round(a.low, 3), round(a.high, 3)),
            evidence=sources.pop() if len(sources) == 1 else "mixed",  # type: ignore[arg-type]
            predicted_speedup=SpeedupRange(mean=round(s[0], 3), low=round(min(s), 3), high=round(max(s), 3)),
            deployed_speedup=round(chosen.speedup_at(tb), 3) if chosen else 1.0))
    return rows


def alternatives(rows: tuple[Scored, ...]) -> list[Candidate]:
    """Each strategy's best deployable configuration, ranked; then better configurations this
    deployment cannot run (missing drafter, engine limits), each saying why."""
    best: dict[tuple[str, bool], Scored] = {}
    for o in rows:
        key = (o.plugin.name, o.deployable)
        if key not in best or o.mean > best[key].mean:
            best[key] = o
    deployable = {name for name, ok in best if ok}
    shown = [o for (name, ok), o in best.items()
             if ok or name not in deployable or o.mean > best[(name, True)].mean]
    ordered = sorted(shown, key=lambda o: (not o.deployable, -o.mean))
    return [_candidate(o) for o in ordered[:ALTERNATIVES]]


def greedy_gate_text(engine: str) -> str:
    """The canary's output gate on ``engine``, from its declared greedy exactness (``ENGINE_GREEDY``).

    Token identity only where it is shown for the engine; elsewhere the near-tie rule that
    ``picker.tasks.agreement.greedy_gate`` checks, with its width and the reason identity is not asked.
    """
    g = ENGINE_GREEDY[engine]
    if g.identical:
        return f"no errors; greedy (T=0) outputs identical to the baseline on a fixed prompt set ({g.why})"
    return (f"no errors; on a fixed prompt set at T=0, every output that differs from the baseline's greedy "
            f"output first differs at a near tie: there the canary emits the baseline's second-ranked token and "
            f"the baseline's top-2 log-probs are within {g.tolerance_nats:g} nats (check each prompt with "
            f"picker.tasks.agreement.greedy_gate); token identity is not the gate on {engine} because {g.why}")


def rollout(strategy: str, break_even: float, accept_length: float, itl_p99: float | None,
            engine: str) -> list[RolloutStep]:
    """The staged rollout on ``engine``; its canary gate follows the engine's greedy exactness."""
    slo = f" and under the {itl_p99:g} ms SLO" if itl_p99 else ""
    top2 = "" if ENGINE_GREEDY[engine].identical else " with each token's top-2 log-probs"
    steps = [
        ("baseline", ("Run without speculation; record tokens/s, p50 and p99 inter-token latency per task, and "
                      f"the greedy (T=0) outputs of a fixed prompt set{top2}."),
         "a baseline of at least a few thousand requests per task type"),
        ("enable on a canary", f"Enable {strategy} with the config below on one replica or ~5% of traffic.",
         greedy_gate_text(engine)),
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


def _engine_configs(table: ScoredTable, chosen: Scored, schedule: list[BatchRange]) -> dict:
    """Each engine's config from the chosen strategy's own hooks; the profile's engine at its version."""
    profile = table.profile
    art = chosen.caps.artifact
    spec = getattr(profile.drafters, art, None) if art else None
    path = None
    if art is not None:
        path = (getattr(spec, "path", None) or getattr(spec, "name", None)) if spec else f"<trained {art}>"
        if getattr(spec, "builtin", False):
            path = profile.model.name  # the artifact is part of the target checkpoint
    # Rows split only where the step cost's source changes are one range to an engine.
    sched = [ScheduleEntry(lo, hi, k) for lo, hi, k in
             merge_schedule([(r.max_batch or BATCH_GRID[-1], r.num_speculative_tokens) for r in schedule])]
    c = chosen.config
    return build_engine_configs(
        strategy=chosen.plugin.name, plugin=chosen.plugin, num_speculative_tokens=c.depth,
        tree=(c.depth, c.topk, c.num_draft_tokens), schedule=sched, draft_path=path,
        versions={profile.engine.name: profile.engine.version}, target=profile.model.name,
        artifact_info=spec.model_dump(exclude_none=True) if spec is not None else None)


def _evidence(table: ScoredTable, chosen: Scored | None) -> Evidence:
    names = [chosen.plugin.name] if chosen else list(dict.fromkeys(o.plugin.name for o in table.rows))
    used = [table.alpha(n, b.task, b.temperature) for n in names for b in table.buckets]
    sources = {a.source for a in used}
    source = "mixed" if len(sources) > 1 else (sources.pop() if sources else "prior")
    citations = sorted({c for a in used for c in a.citations})
    curve = (f"with constants calibrated from {table.calibration} (the rest fitted or assumed, as listed there)"
             if table.calibration else "whose constants are fitted to published runs or assumptions until calibrated")
    notes = [
        "alpha is per-token acceptance (accepted drafts / proposed drafts); E[L] counts the bonus token",
        f"costs come from the load curve of the target on the profile's hardware and engine "
        f"(policies/loadcurve.py, policies/data/loadcurve.json) {curve}",
        *table.cost_notes,
        "tree E[L] assumes the i-th ranked child accepts with alpha*(1-alpha)^(i-1) (Sequoia-style positional model)",
    ]
    return Evidence(source=source, citations=citations, notes=notes,  # type: ignore[arg-type]
                    calibration=table.calibration)


def _profile_warnings(table: ScoredTable) -> list[str]:
    """What the decision could not weigh, and the profile's deprecated spellings."""
    out = [f"{name} not scored: no measured acceptance here and no published prior; measure it "
           f"(specpick profile --strategies {name}) and pass --measurements" for name in table.unscored]
    old = table.profile.drafters.deprecated_fields()
    if old:
        off = [k.removeprefix("drafters.allow_") for k in old
               if table.profile.drafters.disabled_by(k.removeprefix("drafters.allow_"))]
        fix = (f"write drafters.disabled: [{', '.join(off)}] instead (the same decision)" if off else
               "they disable nothing here: delete them (drafters.disabled lists strategies to leave out)")
        out.append(f"{', '.join(old)} {'is' if len(old) == 1 else 'are'} deprecated: {fix}")
    return out


def _speculation_off(table: ScoredTable, usable: list[Scored], path: str) -> Recommendation:
    """The recommendation when nothing is deployable or nothing pays enough."""
    profile = table.profile
    why = ("no strategy is deployable on this profile" if not usable else
           f"the best option ({usable[0].plugin.name}, {usable[0].config.label}) predicts only "
           f"{usable[0].mean:.2f}x")
    decision = Decision(strategy="none", num_speculative_tokens=0, tree=None,
                        temperature_switch=TemperatureSwitch(above=None, action="none", reason=why),
                        batch_schedule=[BatchRange(min_batch=1, max_batch=None, num_speculative_tokens=0,
                                                   predicted_speedup=1.0, predicted_speedup_at_max_batch=1.0)])
    return Recommendation(
        profile=path or profile.name, engine=profile.engine.name, decision=decision,
        predicted_speedup=SpeedupRange(mean=1.0, low=1.0, high=1.0), break_even_alpha=1.0,
        break_even_accept_length=1.0, per_task=per_task_rows(table, None), alternatives=alternatives(table.rows),
        engine_configs={}, rollout=rollout("speculation", 1.0, 1.0, profile.slo.itl_p99_ms, profile.engine.name),
        evidence=_evidence(table, None), rationale=[f"Leave speculation off: {why}."],
        warnings=_profile_warnings(table))


def decide(table: ScoredTable, *, path: str = "") -> Recommendation:
    """Deploy the best deployable option if it pays, with its temperature switch and batch schedule."""
    profile, bs = table.profile, list(table.buckets)
    usable = ranked(table.rows)
    if not usable or usable[0].mean < NOT_WORTH_IT:
        return _speculation_off(table, usable, path)
    chosen = usable[0]
    switch = temperature_switch(chosen, bs)
    schedule = batch_schedule(table.rows, chosen, bs, switch)
    k_max = max(r.num_speculative_tokens for r in schedule)
    if 0 < k_max < chosen.config.depth:
        # The schedule never uses the full depth: deploy the length it does use at small batches,
        # so the engine's maximum (vLLM num_speculative_tokens, TRT max_draft_len) matches it.
        chosen = max(family(table.rows, chosen), key=lambda o: (o.config.depth == k_max, o.mean))
        schedule = batch_schedule(table.rows, chosen, bs, switch)
    predicted = _policy_speedups(table.rows, chosen, bs, switch, schedule)
    be = break_even(chosen.config, chosen.cost)
    warnings = list(chosen.notes)
    if not chosen.caps.engines.get(profile.engine.name):
        warnings.append(f"{profile.engine.name} cannot run {chosen.plugin.name}")
    decision = Decision(strategy=chosen.plugin.name, num_speculative_tokens=chosen.config.depth,
                        tree=_tree(chosen), temperature_switch=switch, batch_schedule=schedule)
    return Recommendation(
        profile=path or profile.name, engine=profile.engine.name, decision=decision,
        predicted_speedup=predicted, break_even_alpha=round(be, 3),
        break_even_accept_length=round(chosen.cost.step_ratio, 3),
        per_task=per_task_rows(table, chosen), alternatives=alternatives(table.rows),
        engine_configs=_engine_configs(table, chosen, schedule),
        rollout=rollout(chosen.plugin.name, be, chosen.cost.step_ratio, profile.slo.itl_p99_ms,
                        profile.engine.name),
        evidence=_evidence(table, chosen),
        rationale=_rationale(chosen, usable, switch, schedule, table.typical_batch, be, table.calibration),
        warnings=warnings + _profile_warnings(table))


def _rationale(chosen: Scored, usable: list[Scored], switch: TemperatureSwitch,
               schedule: list[BatchRange], batch: int, be: float, calibration: str | None) -> list[str]:
    cost = chosen.cost
    if cost_source(cost) == MEASURED:
        priced = "measured end to end under load, the draft/verify split the model's"
    elif isinstance(cost, AnchoredStepCost):
        priced = (f"per-step costs measured at concurrency {cost.measured_at}"
                  + ("" if batch == cost.measured_at else f", carried to batch {batch} by the load curve")
                  + "; the draft/verify split the model's")
    else:
        priced = f"load curve, calibrated from {calibration}" if calibration else "load curve model"
    out = [
        f"{chosen.plugin.name} with {chosen.config.label} has the best token-weighted speedup over the "
        f"workload at full depth on every batch ({chosen.mean:.2f}x, range {chosen.low:.2f}-{chosen.high:.2f}x; "
        f"the headline applies the batch schedule and the temperature switch).",
        f"At the typical batch of {batch} (the batch size carrying the most traffic), one step costs {cost.step_ratio:.2f} plain forwards "
        f"(draft c={cost.cost_ratio:.3f} per token, verify {cost.verify_ratio:.2f}x, {cost.bound}-bound; {priced}); "
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

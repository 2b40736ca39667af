"""From the scored table to the Recommendation: the deployed setting, its temperature switch and
batch schedule (``picker.recommend.schedule``), per-task table, alternatives, engine configs,
rollout and evidence.

The decision reads a :class:`~picker.recommend.table.ScoredTable` (``picker.recommend.scoring``
builds it) and nothing else: every speedup, cost and α it needs was scored before it runs. It
returns the Recommendation with the :class:`~picker.recommend.schedule.Deployment` behind it, so
the plots and the SDK read what the plan deploys instead of deciding again.

The headline break-even α is the deployed setting's at the typical batch (the batch size carrying
the most traffic): the batch schedule's row holding that batch states the same value, at that
batch, and the rationale and the rollout gate print it from the stored value.

    >>> greedy_gate_text("vllm").startswith("no errors; on a fixed prompt set at T=0")
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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
from picker.recommend.engine_configs import (
    CONCURRENCY_CAP_FLAGS,
    ENGINE_GREEDY,
    ScheduleEntry,
    build_engine_configs,
    runs_batch_schedule,
)
from picker.recommend.figures import fraction, rounded, times
from picker.recommend.latency import itl_gate, plain_misses, plan_latency, slo_blocked, typical_itl
from picker.recommend.measure import measure_command
from picker.recommend.measured_load import MEASURED, AnchoredStepCost, cost_source
from picker.recommend.schedule import Deployment, Point, batch_schedule, merge_schedule, temperature_switch
from picker.recommend.table import BATCH_GRID, NOT_WORTH_IT, Scored, ScoredTable, family, ranked
from picker.recommend.uncertainty import ENABLE_LOW, clears, measured_low
from picker.recommend.words import strategy_word
from policies import StepCost, break_even

ALTERNATIVES = 8


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
        predicted_speedup=SpeedupRange(mean=rounded(opt.mean), low=rounded(opt.low), high=rounded(opt.high)),
        break_even_alpha=rounded(break_even(opt.config, opt.cost)),
        feasible=opt.feasible, engine_supported=opt.option.engine_supported, notes=notes)


def per_task_rows(table: ScoredTable, deployed: Deployment | None) -> list[TaskRow]:
    """Per task type: the best deployable configuration on that task's traffic alone, the α it rests
    on, and the deployed policy's speedup there (schedule and switches applied, as the headline)."""
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
            task=task, weight=round(weight, 4), strategy=best.plugin.name, alpha=rounded(a.mean),
            alpha_range=(rounded(a.low), rounded(a.high)),
            evidence=sources.pop() if len(sources) == 1 else "mixed",  # type: ignore[arg-type]
            predicted_speedup=SpeedupRange(mean=rounded(s[0]), low=rounded(min(s)), high=rounded(max(s))),
            deployed_speedup=rounded(deployed.speedup(tb)[0]) if deployed else 1.0))
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
            engine: str, itl: tuple[int, float, float] | None = None) -> list[RolloutStep]:
    """The staged rollout on ``engine``; its canary gate follows the engine's greedy exactness, its
    tail-latency gate the predicted p99 ITL ratio ``itl`` (batch, plain ms, deployed ms)."""
    top2 = "" if ENGINE_GREEDY[engine].identical else " with each token's top-2 log-probs"
    steps = [
        ("baseline", ("Run without speculation; record tokens/s, p50 and p99 inter-token latency per task, and "
                      f"the greedy (T=0) outputs of a fixed prompt set{top2}."),
         "a baseline of at least a few thousand requests per task type"),
        ("enable on a canary", f"Enable {strategy} with the config below on one replica or ~5% of traffic.",
         greedy_gate_text(engine)),
        ("measure alpha", "Measure per-token acceptance per task on live traffic "
         "(`specpick profile --backend <engine> --url ...`).",
         f"alpha >= break-even {fraction(break_even)} (accept length >= {fraction(accept_length)} tokens per "
         "verify) for every task with real traffic; otherwise turn it off "
         "for that traffic or re-run `specpick recommend --measurements`"),
        ("watch tail latency", "Compare p99 inter-token latency with the baseline at the same load.",
         itl_gate(itl, itl_p99)),
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
                    calibration=table.calibration, cost_source=table.cost_kind)  # type: ignore[arg-type]


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


@dataclass(frozen=True)
class Decided:
    """The Recommendation, and what it deploys batch by batch (None, () when speculation stays off)."""

    recommendation: Recommendation
    deployment: Deployment | None
    points: tuple[Point, ...]


@dataclass(frozen=True)
class Unsure:
    """Why a deployment that might pay stays off: its predicted range over the workload and the
    command whose measurement would decide it."""

    chosen: Scored
    mean: float
    low: float
    high: float
    measure: str


def _speculation_off(table: ScoredTable, usable: list[Scored], path: str, unsure: Unsure | None = None) -> Decided:
    """The recommendation when nothing is deployable, nothing pays enough, or nothing is sure to pay."""
    profile = table.profile
    row = BatchRange(min_batch=1, max_batch=None, num_speculative_tokens=0, predicted_speedup=1.0,
                     predicted_speedup_at_max_batch=1.0)
    if unsure is not None:
        u = unsure
        why = (f"the best option ({strategy_word(u.chosen.plugin)}, {u.chosen.config.label}) predicts "
               f"{times(u.mean)} over the workload, range {times(u.low)}-{times(u.high)}: the low end does not "
               f"clear {times(ENABLE_LOW)} and no A/B gain measured at the deployment's concurrency is above 1.0x, "
               "so the evidence cannot tell it from slower than plain decoding; to decide it, measure: "
               f"`{u.measure}`")
        row = row.model_copy(update={"predicted_speedup_range": (rounded(u.low), rounded(u.high)), "uncertain": True,
                                     "measure": u.measure})
    else:
        why = ((slo_blocked(table) or "no strategy is deployable on this profile") if not usable else
               f"the best option ({strategy_word(usable[0].plugin)}, {usable[0].config.label}) predicts only "
               f"{times(usable[0].mean)}")
    decision = Decision(strategy="none", num_speculative_tokens=0, tree=None,
                        temperature_switch=TemperatureSwitch(above=None, action="none", reason=why),
                        batch_schedule=[row])
    return Decided(Recommendation(
        profile=path or profile.name, engine=profile.engine.name, decision=decision,
        predicted_speedup=SpeedupRange(mean=1.0, low=1.0, high=1.0), typical_batch=table.typical_batch,
        break_even_alpha=1.0, break_even_accept_length=1.0, per_task=per_task_rows(table, None),
        alternatives=alternatives(table.rows), engine_configs={},
        rollout=[],  # nothing to roll out: an "off" plan has no enable step (what would change it is rendered)
        evidence=_evidence(table, None), rationale=[f"Leave speculation off: {why}."],
        warnings=_profile_warnings(table) + plain_misses(table), latency=plan_latency(table, None)), None, ())


def _schedulable(table: ScoredTable, chosen: Scored) -> bool:
    """Whether the profile's engine switches this configuration's draft length by batch size."""
    engine = table.profile.engine.name
    return runs_batch_schedule(engine, chosen.plugin, chosen.config.topk, table.profile.engine.version)


def _at_typical(table: ScoredTable, deployed: Deployment) -> tuple[Scored, StepCost, float]:
    """The setting deployed at the typical batch, its step cost there and its break-even α: the
    schedule row holding the typical batch states that α (at that batch); where the row is off, the
    chosen configuration's at that batch (what turning it on there would need)."""
    batch = table.typical_batch
    row = next(r for r in deployed.ranges if r.min_batch <= batch and (r.max_batch is None or batch <= r.max_batch))
    shape = deployed.shapes.get(row.num_speculative_tokens, deployed.chosen) if row.num_speculative_tokens \
        else deployed.chosen
    cost = shape.costs_by_batch.get(batch, shape.cost)
    if row.break_even_alpha is not None and row.break_even_at_batch == batch:
        return shape, cost, row.break_even_alpha
    return shape, cost, rounded(break_even(shape.config, cost))


def _max_concurrency(deployed: Deployment) -> int | None:
    """Where the engine runs one setting at every batch: the last batch of the leading ranges whose
    low end clears the bar (None where every range does, or the first one does not)."""
    first = deployed.ranges[0]
    if not first.uncertain:
        cut = next((r for r in deployed.ranges if r.uncertain), None)
        return None if cut is None else cut.min_batch - 1
    return None


def _fixed_length_warning(table: ScoredTable, deployed: Deployment, cap: int | None) -> list[str]:
    """Where the engine drafts one length at every batch and that stops being sure to pay, say from where."""
    if cap is None:
        return []
    row = next(r for r in deployed.ranges if r.min_batch == cap + 1)
    lo, hi = row.predicted_speedup_range or (row.predicted_speedup, row.predicted_speedup)
    engine = table.profile.engine.name
    return [f"{engine} cannot change the draft length by batch size for this configuration: it drafts "
            f"{deployed.chosen.config.depth} at every batch, and above batch {cap} its predicted range "
            f"({times(lo)}-{times(hi)} at batch {row.min_batch}) no longer clears {times(ENABLE_LOW)}; keep the "
            f"server's concurrency at or below {cap} (the plan's max_concurrency: {CONCURRENCY_CAP_FLAGS[engine]} "
            f"{cap} caps it, and requests above it wait in the queue), or measure there first: "
            f"`{row.measure}`"]


def _whole_enabled(table: ScoredTable, deployed: Deployment, varies: bool) -> bool:
    """On or off for the whole deployment: where the engine switches by batch size, on if any range
    is; where it runs one setting at every batch, the rule (``uncertainty.enabled``) over the
    traffic-weighted gain of that setting as deployed."""
    if varies:
        return any(r.num_speculative_tokens for r in deployed.ranges)
    if clears(deployed.speedup(table.buckets)[1]):
        return True
    low = measured_low(deployed.chosen, table.buckets)
    return low is not None and low > 1.0


def decide(table: ScoredTable, *, path: str = "") -> Decided:
    """Deploy the best deployable option if it pays, with its temperature switch and batch schedule."""
    profile, bs = table.profile, list(table.buckets)
    usable = ranked(table.rows)
    if not usable or usable[0].mean < NOT_WORTH_IT:
        return _speculation_off(table, usable, path)
    chosen = usable[0]
    switch = temperature_switch(chosen, bs)
    varies = _schedulable(table, chosen)

    def measure(opt: Scored, levels: Sequence[int]) -> str:
        return measure_command(profile, path, opt.plugin.name, opt.config.depth, levels)

    deployed, points = batch_schedule(table.rows, chosen, bs, switch, varies, measure)
    k_max = max(r.num_speculative_tokens for r in deployed.ranges)
    if 0 < k_max < chosen.config.depth:
        # The schedule never uses the full depth: deploy the length it does use at small batches,
        # so the engine's maximum (vLLM num_speculative_tokens, TRT max_draft_len) matches it.
        chosen = max(family(table.rows, chosen), key=lambda o: (o.config.depth == k_max, o.mean))
        deployed, points = batch_schedule(table.rows, chosen, bs, switch, varies, measure)
    if not _whole_enabled(table, deployed, varies):
        mean, low, high = chosen.mean, chosen.low, chosen.high
        if not varies:  # the setting as deployed (its temperature switch applied)
            mean, low, high = deployed.speedup(bs)
        levels = sorted({b.batch for b in bs})
        return _speculation_off(table, usable, path, Unsure(chosen, mean, low, high, measure(chosen, levels)))
    schedule = list(deployed.ranges)
    mean, low, high = deployed.speedup(bs)
    _, cost, be = _at_typical(table, deployed)
    cap = None if varies else _max_concurrency(deployed)
    warnings = list(chosen.notes) + _fixed_length_warning(table, deployed, cap)
    if not chosen.caps.engines.get(profile.engine.name):
        warnings.append(f"{profile.engine.name} cannot run {chosen.plugin.name}")
    decision = Decision(strategy=chosen.plugin.name, num_speculative_tokens=chosen.config.depth,
                        tree=_tree(chosen), temperature_switch=switch, batch_schedule=schedule, max_concurrency=cap)
    rec = Recommendation(
        profile=path or profile.name, engine=profile.engine.name, decision=decision,
        predicted_speedup=SpeedupRange(mean=rounded(mean), low=rounded(min(low, mean, high)),
                                       high=rounded(max(low, mean, high))),
        typical_batch=table.typical_batch, break_even_alpha=be, break_even_accept_length=rounded(cost.step_ratio),
        per_task=per_task_rows(table, deployed), alternatives=alternatives(table.rows),
        engine_configs=_engine_configs(table, chosen, schedule),
        rollout=rollout(chosen.plugin.name, be, cost.step_ratio, profile.slo.itl_p99_ms, profile.engine.name,
                        typical_itl(table, deployed)),
        evidence=_evidence(table, chosen),
        rationale=_rationale(table, chosen, usable, deployed, cost, be),
        warnings=warnings + _profile_warnings(table) + plain_misses(table), latency=plan_latency(table, deployed))
    return Decided(rec, deployed, points)


def _rationale(table: ScoredTable, chosen: Scored, usable: list[Scored], deployed: Deployment, cost: StepCost,
               be: float) -> list[str]:
    batch, switch = table.typical_batch, deployed.switch
    if cost_source(cost) == MEASURED:
        priced = "measured end to end under load, the draft/verify split the model's"
    elif isinstance(cost, AnchoredStepCost):
        priced = (f"per-step costs measured at concurrency {cost.measured_at}"
                  + ("" if batch == cost.measured_at else f", carried to batch {batch} by the load curve")
                  + "; the draft/verify split the model's")
    else:
        priced = (f"the cost model's load curve, calibrated from {table.calibration}" if table.calibration
                  else "the cost model's load curve")
    out = [
        f"{strategy_word(chosen.plugin)} with {chosen.config.label} has the best token-weighted speedup over the "
        f"workload at full depth on every batch ({times(chosen.mean)}, range {times(chosen.low)}-{times(chosen.high)}; "
        f"the headline applies the batch schedule and the temperature switch).",
        f"At the typical batch of {batch} (the batch size carrying the most traffic), one step costs "
        f"{fraction(cost.step_ratio)} plain decoding steps: drafting {cost.cost_ratio:.3f} of a plain step per "
        f"draft token, verifying {cost.verify_ratio:.2f} plain steps ({cost.bound}-bound; {priced}); "
        f"it pays while alpha >= {fraction(be)}.",
    ]
    runner = next((o for o in usable if o.plugin.name != chosen.plugin.name), None)
    if runner is not None:
        out.append(f"Runner-up: {strategy_word(runner.plugin)} ({runner.config.label}) at {times(runner.mean)}.")
    off = [r for r in deployed.ranges if r.num_speculative_tokens == 0]
    if off and not off[0].uncertain:
        out.append(f"From batch {off[0].min_batch} up, verification is no longer free enough: speculation off.")
    for r in off:
        if r.uncertain and r.predicted_speedup_range is not None:
            lo, hi = r.predicted_speedup_range
            top = "∞" if r.max_batch is None else r.max_batch
            out.append(f"At batch {r.min_batch}-{top} speculation is off: the predicted range there "
                       f"({times(lo)}-{times(hi)}) does not clear {times(ENABLE_LOW)}; to decide it, measure: "
                       f"`{r.measure}`.")
    if switch.above is not None:
        out.append(f"Above temperature {switch.above:g} acceptance drops too far: {switch.reason}.")
    return out

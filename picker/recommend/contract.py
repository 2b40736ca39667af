"""The Recommendation contract (DESIGN.md): what `specpick recommend --format json` prints.

Every number that is predicted carries a range and says what it rests on (``evidence.source``).

    >>> SpeedupRange(mean=1.8, low=1.4, high=2.1).model_dump()
    {'mean': 1.8, 'low': 1.4, 'high': 2.1}
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

NO_STRATEGY = "none"  # reserved (picker.engine.plugins.RESERVED_NAMES): speculation stays off


def _registered(name: str) -> str:
    """A strategy is data: any name the registry holds (built-in or third-party), or ``none``."""
    from picker.engine.plugins import load_strategies

    if name != NO_STRATEGY and name not in (known := load_strategies()):
        raise ValueError(f"must be none or a registered strategy ({', '.join(sorted(known))}); got {name!r}")
    return name


StrategyName = Annotated[str, AfterValidator(_registered)]
EvidenceSource = Literal["measured", "prior", "mixed"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SpeedupRange(_Model):
    mean: float
    low: float
    high: float


class TreeShape(_Model):
    """An EAGLE/Medusa-style tree: ``depth`` draft steps, ``topk`` branches per node, ``num_draft_tokens``
    verified per step (SGLang's convention: the root, i.e. the last verified token, counts as one)."""

    depth: int
    topk: int
    num_draft_tokens: int


class TemperatureSwitch(_Model):
    above: float | None = Field(description="temperature above which the action applies; null: never")
    action: Literal["disable", "none"]
    reason: str


class BatchRange(_Model):
    min_batch: int
    max_batch: int | None = Field(description="inclusive; null = no upper bound")
    num_speculative_tokens: int = Field(description="0 = speculation off in this range")
    predicted_speedup: float = Field(description=(
        "of the deployed setting at the range's first batch on the batch grid (1, 2, 4, ..., 512): "
        "the draft length the engine runs there, off above the temperature switches"))
    predicted_speedup_at_max_batch: float = Field(description=(
        "the same at the range's last batch on the grid (the largest batch examined if open)"))
    break_even_alpha: float | None = Field(None, description=(
        "per-token alpha below which this range's setting is slower than plain decoding, at "
        "break_even_at_batch (null where speculation is off)"))
    break_even_at_batch: int | None = Field(None, description=(
        "the batch size break_even_alpha is computed at: the one carrying most of this range's traffic, "
        "else the range's first batch on the grid; the range holding the typical batch states the "
        "plan's headline break-even alpha"))
    predicted_speedup_range: tuple[float, float] | None = Field(None, description=(
        "low and high of predicted_speedup (of the best setting where the range is off)"))
    uncertain: bool = Field(False, description=(
        "the predicted range at the range's first batch does not clear the decision's bar (its low end "
        "at least 1.02x, or an A/B gain measured there with its interval above 1.0x) while its high end "
        "reaches 1.0x: speculation is off here where the engine switches by batch size; where it runs one "
        "setting at every batch, the range lies above the concurrency to keep (decision.max_concurrency)"))
    measure: str | None = Field(None, description=(
        "where uncertain: the specpick profile command whose A/B gain would decide this range"))
    disable_above_temperature: float | None = Field(None, description=(
        "in this range speculation is off above this temperature, where that is lower than the "
        "global temperature switch (null: the global switch holds)"))
    step_cost: Literal["measured", "model"] = Field("model", description=(
        "where this range's step costs (its predicted speedups and break-even alpha) come from: 'measured' "
        "= the measurements' gain against concurrency, interpolated in log concurrency between the measured "
        "levels (the range lies inside them); 'model' = the cost model (the load curve, policies/loadcurve.py, "
        "or per-step timings measured at one concurrency where the measurements' costs transfer)"))


class Decision(_Model):
    strategy: StrategyName
    num_speculative_tokens: int
    tree: TreeShape | None
    temperature_switch: TemperatureSwitch
    batch_schedule: list[BatchRange]
    max_concurrency: int | None = Field(None, description=(
        "where the engine runs one setting at every batch size: the largest batch at which its predicted "
        "range's low end still clears the bar; keep the server's concurrency at or below it (null: no cap)"))


class TaskRow(_Model):
    task: str
    weight: float
    strategy: StrategyName
    alpha: float | None
    alpha_range: tuple[float, float] | None
    evidence: EvidenceSource
    predicted_speedup: SpeedupRange = Field(description="of the best strategy for this task alone")
    deployed_speedup: float = Field(description="of the deployed decision on this task")
    measured_on: str | None = Field(None, description="the model the measurements behind this row came from, "
                                    "when it is not the profile's (recommend --allow-other-model)")


class Candidate(_Model):
    """One scored configuration, workload-averaged."""

    strategy: str
    num_speculative_tokens: int
    tree: TreeShape | None
    predicted_speedup: SpeedupRange
    break_even_alpha: float
    feasible: bool
    engine_supported: bool
    notes: list[str] = []


class RolloutStep(_Model):
    step: int
    name: str
    action: str
    gate: str


class Evidence(_Model):
    source: EvidenceSource
    citations: list[str]
    notes: list[str] = []
    provenance: Literal["measured", "alpha-only", "other-model", "unknown"] | None = Field(None, description=(
        "how the measurements relate to the deployment (picker.inputs.provenance); null without measurements"))
    measured_on: str | None = Field(None, description="the measured model, when it is not the profile's")
    calibration: str | None = Field(None, description=(
        "the calibration file (specpick calibrate) the load curve's constants came from; null: none"))
    cost_source: Literal["measured", "calibrated", "modelled"] = Field("modelled", description=(
        "where step costs come from (picker.recommend.costs): 'measured' = the measurements' own (their "
        "gain against concurrency, per-step timings), the load curve where they say nothing; 'calibrated' "
        "= the load curve with constants from the calibration file; 'modelled' = the shipped load curve"))


class LatencyFigures(_Model):
    """One request's predicted latency at one batch size, milliseconds (picker.recommend.latency)."""

    ttft_ms: float = Field(description="time to first token at the profile's mean prompt length: the prompt's "
                           "prefill forward, plus the drafter's own prefill where it keeps a KV cache; no queueing")
    itl_ms_p50: float = Field(description="median inter-token gap: one step (a speculative step's accepted tokens "
                              "arrive together, one gap), plus other requests' prefills where the median gap holds one")
    itl_ms_p99: float = Field(description="99th-percentile gap: a step that accepts nothing still costs a whole "
                              "draft + verify step, so about the full step time, plus the prefills a p99 gap holds")
    tpot_ms_mean: float = Field(description="mean time per output token: (step + prefills per gap) / tokens per step")


class RangeLatency(_Model):
    """Predicted latency of plain decoding and of the plan in one batch range of the schedule."""

    min_batch: int
    max_batch: int | None = Field(description="inclusive; null = no upper bound")
    at_batch: int = Field(description="the batch the figures are computed at: the one carrying most of the "
                          "range's traffic, else the range's first batch on the grid")
    plain: LatencyFigures
    deployed: LatencyFigures = Field(description="the plan as deployed at that batch (the range's draft length, "
                                     "off above its temperature switch), token-weighted over the task mix")
    itl_p99_vs_plain: float = Field(description="deployed p99 ITL over plain's")
    tpot_vs_plain: float = Field(description="deployed mean TPOT over plain's")


class SloCheck(_Model):
    """One latency target of the profile (``slo``), against plain decoding and the plan."""

    slo: Literal["itl_p99_ms", "itl_p50_ms", "ttft_ms", "tpot_ms"]
    target_ms: float
    at_batch: int = Field(description="the workload batch where the plan comes closest to missing it (worst)")
    plain_ms: float
    deployed_ms: float
    met_by_plain: bool
    met_by_deployed: bool
    message: str


class PlanLatency(_Model):
    """Predicted TTFT, ITL and TPOT per batch range (picker.recommend.latency), and the SLO checks."""

    per_range: list[RangeLatency]
    slo: list[SloCheck] = []
    assumptions: list[str] = Field(description="what the figures average over and assume")


# What every predicted speedup in a Recommendation averages over, stated once and carried in the
# JSON (``speedup_scopes``), the markdown and ``--explain`` alike. Workload averages are token-
# weighted (total plain time over total speculative time) over the profile's task mix, concurrency
# ranges (each at its geometric-middle batch) and temperatures.
SPEEDUP_SCOPES: dict[str, str] = {
    "predicted_speedup": "the deployed policy over the whole workload: task mix x concurrency ranges x "
                         "temperatures, token-weighted, with the batch schedule and the temperature switch applied",
    "alternatives.predicted_speedup": "one configuration at full depth at every batch, over the same workload "
                                      "(no schedule, no switch): the ranking the decision is made on",
    "per_task.predicted_speedup": "the best configuration for that task's traffic alone (its concurrency ranges "
                                  "and temperatures)",
    "per_task.deployed_speedup": "the deployed policy on that task's traffic alone",
    "decision.batch_schedule.predicted_speedup": "at that batch size, over the task mix and temperatures; "
                                                 "its step_cost says whether measured under load or modelled",
    "typical_batch": "the batch size carrying the most traffic; the rationale's step cost is at this batch",
    "break_even_alpha": "of the deployed setting at the typical batch: the batch schedule row holding it states "
                        "the same value (its break_even_at_batch is the typical batch)",
}


# --------------------------------------------------------------------------- what the plan was asked
# The plan's inputs as the loaded profile holds them (defaults applied and listed), so every rendering
# opens with what it was asked: ``picker.recommend.plan_inputs`` fills these from the profile.

class ModelInput(_Model):
    name: str
    params_b: float = Field(description="parameters, billions, as the profile gives them or its shape implies")
    dtype: str
    shape_from: str = Field(description="where the shape came from: the profile, a config.json, the catalog")


class HardwareInput(_Model):
    gpu: str = Field(description="the hardware catalog's name of the accelerator")
    count: int
    memory_gib: float = Field(description="memory of one accelerator, GiB")
    note: str | None = Field(None, description="how a family name (e.g. H100) was resolved; null: named exactly")


class EngineInput(_Model):
    name: str
    version: str
    version_default: bool = Field(
        False, description="the profile named no version: the one the configs are written for")


class ConcurrencyInput(_Model):
    min_batch: int
    max_batch: int
    weight: float


class TemperatureInput(_Model):
    value: float
    weight: float


class TrafficInput(_Model):
    task_mix: dict[str, float]
    concurrency: list[ConcurrencyInput]
    temperature: list[TemperatureInput]
    prompt_tokens: float = Field(description="mean prompt length, tokens")
    output_tokens: float = Field(description="mean output length, tokens")


class SloInput(_Model):
    ttft_ms: float | None = None
    itl_p50_ms: float | None = None
    itl_p99_ms: float | None = None
    tpot_ms: float | None = None


class EvidenceInput(_Model):
    acceptance: Literal["prior", "measured", "mixed"] = Field(description=(
        "where acceptance rates come from: published priors, the measurements file, or both"))
    step_costs: Literal["measured", "calibrated", "modelled"]
    measurements: str | None = Field(None, description="the measurements file; null: none given")
    calibration: str | None = Field(None, description="the calibration file; null: none given")
    policy: str | None = Field(None, description="the fitted policy artifact; null: none given")


class DefaultUsed(_Model):
    field: str = Field(description="dotted profile field the profile left out")
    value: str = Field(description="what was used, as it would be written in the profile")
    why: str


class PlanInputs(_Model):
    """What the plan was asked: the profile as loaded, every default it used, and the evidence files."""

    name: str
    description: str = ""
    file: str = Field("", description="the profile file the plan was made from")
    model: ModelInput
    hardware: HardwareInput
    engine: EngineInput
    traffic: TrafficInput
    slo: SloInput
    drafters: list[str] = Field(description="what speculation may draw on (drafters section), as written")
    disabled: list[str] = Field(default_factory=list, description="strategies the profile leaves out")
    memory_headroom_gib: float
    evidence: EvidenceInput
    defaults_applied: list[DefaultUsed]


class Unlock(_Model):
    """A better option this deployment cannot run, what it would give, and what would make it runnable."""

    strategy: str
    setting: str
    predicted_speedup: SpeedupRange = Field(description=(
        "one configuration at full depth at every batch over the whole workload, as in alternatives"))
    blocked_by: list[str] = Field(description="why it cannot run here (the alternatives' notes)")
    provide: list[str] = Field(description="what would unlock it: the field to give, the artifact, the engine")
    same_engine: bool = Field(description="runnable on the profile's engine once provided")


class Recommendation(_Model):
    profile: str
    engine: str
    inputs: PlanInputs | None = Field(None, description="what the plan was asked (null in plans made before it)")
    decision: Decision
    predicted_speedup: SpeedupRange
    typical_batch: int = Field(1, description="the batch size carrying the most traffic")
    break_even_alpha: float = Field(description=(
        "per-token alpha below which the deployed setting at the typical batch is slower than plain decoding"))
    break_even_accept_length: float = Field(
        description="tokens per verify step (bonus included; SGLang's accept length) needed to break even")
    per_task: list[TaskRow]
    alternatives: list[Candidate]
    engine_configs: dict[str, Any]
    rollout: list[RolloutStep]
    evidence: Evidence
    rationale: list[str]
    unlocks: list[Unlock] = Field(default_factory=list, description=(
        "better options this deployment cannot run, best first, each with what would unlock it"))
    warnings: list[str] = []
    speedup_scopes: dict[str, str] = Field(default_factory=lambda: dict(SPEEDUP_SCOPES),
                                           description="what each predicted speedup averages over")
    latency: PlanLatency | None = Field(None, description=(
        "predicted TTFT, p50/p99 ITL and mean TPOT of plain decoding and of the plan per batch range, "
        "from the same step costs as the speedups, and the profile's latency targets checked against them"))

"""The Recommendation contract (DESIGN.md): what `specpick recommend --format json` prints.

Every number that is predicted carries a range and says what it rests on (``evidence.source``).

    >>> SpeedupRange(mean=1.8, low=1.4, high=2.1).model_dump()
    {'mean': 1.8, 'low': 1.4, 'high': 2.1}
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

StrategyName = Literal["vanilla", "medusa", "eagle3", "lookahead", "ngram", "none"]
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
    predicted_speedup: float = Field(description="at min_batch")
    predicted_speedup_at_max_batch: float = Field(description="at max_batch (the largest batch examined if open)")


class Decision(_Model):
    strategy: StrategyName
    num_speculative_tokens: int
    tree: TreeShape | None
    temperature_switch: TemperatureSwitch
    batch_schedule: list[BatchRange]


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


class Recommendation(_Model):
    profile: str
    engine: str
    decision: Decision
    predicted_speedup: SpeedupRange
    break_even_alpha: float
    break_even_accept_length: float = Field(
        description="tokens per verify step (bonus included; SGLang's accept length) needed to break even")
    per_task: list[TaskRow]
    alternatives: list[Candidate]
    engine_configs: dict[str, Any]
    rollout: list[RolloutStep]
    evidence: Evidence
    rationale: list[str]
    warnings: list[str] = []

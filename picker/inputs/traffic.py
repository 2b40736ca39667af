"""The profile's ``traffic`` section: task mix, lengths, concurrency and temperature.

Only the task mix is required; one value is enough where one value is meant, and every field
left out takes a stated default that the loaded profile lists (``WorkloadProfile.defaults_applied``):

    traffic:
      task_mix: {chat: 0.7, code: 0.3}
      concurrency: 32              # short for [{batch_size: 32, weight: 1}]
      temperature: 0.7             # short for [{value: 0.7, weight: 1}]
      prompt_tokens: 1500          # short for {mean: 1500}

    >>> t = TrafficSpec.model_validate({"task_mix": "code", "concurrency": 32, "temperature": 0.7})
    >>> t.task_mix, t.concurrency[0].batch_size, t.temperature[0].value, t.prompt_tokens.mean
    ({'code': 1.0}, 32, 0.7, 1024.0)
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError, ValidationInfo, field_validator, model_validator

from picker.inputs.fields import Batch, Section, Tokens, TokensFloat, Weight, record_default
from picker.inputs.yamlio import fail_at

TaskType = Literal["chat", "code", "structured", "math", "summarization", "rag", "translation",
                   "creative", "agentic"]
TASK_TYPES: tuple[str, ...] = get_args(TaskType)
WEIGHT_TOLERANCE = 1e-6
Temperature = Annotated[float, Field(strict=True, ge=0, le=2)]

# The stated defaults of the fields a profile may leave out: (YAML value, why).
DEFAULT_PROMPT_TOKENS = 1024.0
DEFAULT_OUTPUT_TOKENS = 256.0
DEFAULT_CONCURRENCY = 1
DEFAULT_TEMPERATURE = 1.0
TRAFFIC_DEFAULTS: dict[str, tuple[Any, str]] = {
    "prompt_tokens": ({"mean": DEFAULT_PROMPT_TOKENS}, "a mid-sized chat prompt; give traffic.prompt_tokens, "
                      "one number being the mean"),
    "output_tokens": ({"mean": DEFAULT_OUTPUT_TOKENS}, "a mid-sized chat answer; give traffic.output_tokens"),
    "concurrency": (DEFAULT_CONCURRENCY, "one request decoded at a time; give traffic.concurrency, the "
                    "requests your server decodes together, since speculation pays less as it grows"),
    "temperature": (DEFAULT_TEMPERATURE, "SamplingParams' default in vLLM and SGLang when neither the request "
                    "nor the model's generation_config.json sets one; give traffic.temperature, 0 being greedy"),
}


def check_weights(weights: list[float]) -> None:
    total = sum(weights)
    if abs(total - 1.0) > WEIGHT_TOLERANCE:
        raise ValueError(f"weights must sum to 1 (got {total:.6g})")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _one_value(value: Any, adapter: TypeAdapter[Any], form: str) -> Any:
    """``value`` checked as the one number a shorthand stands for; errors name the shorthand's field."""
    try:
        return adapter.validate_python(value)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        bound = next(iter((err.get("ctx") or {}).values()), None)
        bound = f"{bound:g}" if isinstance(bound, (int, float)) else bound
        ops = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}
        if err["type"] in ops:
            raise ValueError(f"must be {ops[err['type']]} {bound} (got {value!r})") from None
        raise ValueError(f"must be {form} (got {value!r})") from None


class TokenPoint(Section):
    """One point of a token-length distribution."""

    value: Tokens = Field(description="Length in tokens.")
    weight: Weight = Field(description="Share of requests with this length, in [0, 1].")


class TokenLengths(Section):
    """A length distribution: a mean (optionally with a p90), or weighted points."""

    mean: TokensFloat | None = Field(None, description="Mean length in tokens.")
    p90: TokensFloat | None = Field(None, description="90th-percentile length in tokens (>= mean).")
    points: tuple[TokenPoint, ...] | None = Field(None, min_length=1, description=(
        "Weighted lengths; weights sum to 1."))

    @model_validator(mode="before")
    @classmethod
    def _one_number(cls, data: Any) -> Any:
        return {"mean": data} if _is_number(data) else data

    @model_validator(mode="after")
    def _one_form(self) -> TokenLengths:
        if (self.mean is None) == (self.points is None):
            raise ValueError("give either mean (with an optional p90) or points, not both or neither")
        if self.p90 is not None and (self.mean is None or self.p90 < self.mean):
            fail_at(("p90",), f"must be >= mean ({self.mean}) (got {self.p90})", self.p90)
        if self.points is not None:
            try:
                check_weights([p.weight for p in self.points])
            except ValueError as exc:
                fail_at(("points",), str(exc), None)
        return self

    def expected(self) -> float:
        """Mean length in tokens."""
        if self.mean is not None:
            return self.mean
        assert self.points is not None
        return sum(p.value * p.weight for p in self.points)


class ConcurrencyBucket(Section):
    """A share of decode steps run at one batch size (batch_size) or a range of them (min, max)."""

    model_config = ConfigDict(populate_by_name=True)

    batch_size: Batch | None = Field(None, description="A single batch size.")
    min_batch: Batch | None = Field(None, alias="min", description="Smallest batch size of the range.")
    max_batch: Batch | None = Field(None, alias="max", description="Largest batch size of the range.")
    weight: Weight = Field(description="Share of decode steps in this bucket, in [0, 1].")

    @model_validator(mode="before")
    @classmethod
    def _mapping(cls, data: Any) -> Any:
        if _is_number(data):  # [32] is read as a list of buckets: say how to write one batch size
            raise ValueError(f"must be a mapping {{batch_size, weight}} or {{min, max, weight}} (got {data!r}); "
                             "for one batch size write `concurrency: N`")
        return data

    @model_validator(mode="after")
    def _one_form(self) -> ConcurrencyBucket:
        lo, hi = self.min_batch, self.max_batch
        single = self.batch_size is not None
        if single == (lo is not None or hi is not None) or (not single and (lo is None or hi is None)):
            raise ValueError("give either batch_size, or both min and max")
        if lo is not None and hi is not None and lo > hi:
            fail_at(("max",), f"must be >= min ({lo}) (got {hi})", hi)
        return self

    @property
    def low(self) -> int:
        return self.batch_size or self.min_batch or 1  # one form is guaranteed by _one_form

    @property
    def high(self) -> int:
        return self.batch_size or self.max_batch or 1


class TemperaturePoint(Section):
    """One sampling temperature and its share of requests."""

    value: Temperature = Field(description="Temperature in [0, 2]; 0 is greedy.")
    weight: Weight = Field(description="Share of requests at this temperature, in [0, 1].")


_BATCH = TypeAdapter(Batch)
_TEMPERATURE = TypeAdapter(Temperature)


class TrafficSpec(Section):
    """What the requests look like: only task_mix is required."""

    task_mix: dict[TaskType, Weight] = Field(min_length=1, description=(
        "Share of requests per task type (" + ", ".join(TASK_TYPES) + "); values in [0, 1] summing "
        "to 1. Task types left out count as 0. One task type alone may be written as its name."))
    prompt_tokens: TokenLengths = Field(TokenLengths(mean=DEFAULT_PROMPT_TOKENS), description=(
        f"Prompt length distribution; one number is the mean. Default: mean {DEFAULT_PROMPT_TOKENS:g}."))
    output_tokens: TokenLengths = Field(TokenLengths(mean=DEFAULT_OUTPUT_TOKENS), description=(
        f"Output length distribution; one number is the mean. Default: mean {DEFAULT_OUTPUT_TOKENS:g}."))
    concurrency: tuple[ConcurrencyBucket, ...] = Field(
        (ConcurrencyBucket(batch_size=DEFAULT_CONCURRENCY, weight=1.0),), min_length=1, description=(
            "Distribution of the running batch size: one number (every step at that batch size), or "
            "buckets of {batch_size, weight} or {min, max, weight}, not overlapping, weights summing "
            f"to 1. Default: {DEFAULT_CONCURRENCY}."))
    temperature: tuple[TemperaturePoint, ...] = Field(
        (TemperaturePoint(value=DEFAULT_TEMPERATURE, weight=1.0),), min_length=1, description=(
            "Distribution of sampling temperatures: one number, or a list of {value, weight} with "
            f"weights summing to 1. Default: {DEFAULT_TEMPERATURE:g}."))

    @model_validator(mode="before")
    @classmethod
    def _note_defaults(cls, data: Any, info: ValidationInfo) -> Any:
        if isinstance(data, dict):
            for name, (value, why) in TRAFFIC_DEFAULTS.items():
                if name not in data:
                    shown = f"{{mean: {value['mean']:g}}}" if isinstance(value, dict) else value
                    record_default(info, f"traffic.{name}", shown, why)
        return data

    @field_validator("task_mix", mode="before")
    @classmethod
    def _one_task(cls, value: Any) -> Any:
        return {value: 1.0} if isinstance(value, str) else value

    @field_validator("concurrency", mode="before")
    @classmethod
    def _one_batch_size(cls, value: Any) -> Any:
        if _is_number(value):
            return ({"batch_size": _one_value(value, _BATCH, "a whole number of sequences"), "weight": 1.0},)
        return value

    @field_validator("temperature", mode="before")
    @classmethod
    def _one_temperature(cls, value: Any) -> Any:
        if _is_number(value):
            return ({"value": _one_value(value, _TEMPERATURE, "a number in [0, 2]"), "weight": 1.0},)
        return value

    @field_validator("task_mix")
    @classmethod
    def _mix_sums_to_one(cls, value: dict[str, float]) -> dict[str, float]:
        check_weights(list(value.values()))
        return value

    @field_validator("temperature")
    @classmethod
    def _temperature_sums_to_one(
        cls, value: tuple[TemperaturePoint, ...]
    ) -> tuple[TemperaturePoint, ...]:
        check_weights([p.weight for p in value])
        return value

    @field_validator("concurrency")
    @classmethod
    def _buckets_valid(cls, value: tuple[ConcurrencyBucket, ...]) -> tuple[ConcurrencyBucket, ...]:
        check_weights([b.weight for b in value])
        ordered = sorted(value, key=lambda b: b.low)
        for prev, cur in zip(ordered, ordered[1:], strict=False):
            if cur.low <= prev.high:
                raise ValueError(f"buckets overlap: {prev.low}-{prev.high} and {cur.low}-{cur.high}")
        return value

    def task_weights(self) -> dict[str, float]:
        """Share of every task type, 0.0 for the ones the profile leaves out."""
        return {t: float(self.task_mix.get(t, 0.0)) for t in TASK_TYPES}  # type: ignore[call-overload]

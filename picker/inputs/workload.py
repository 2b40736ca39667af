"""Workload profile: the YAML a user writes to describe what they serve, validated once at the edge.

A profile names the target model (or points at its Hugging Face ``config.json``), the hardware,
the serving engine, the traffic (task mix, lengths, concurrency, temperature), the latency SLOs
and which drafters exist. Every section forbids unknown keys and every loaded profile is frozen.

    >>> from picker.inputs.workload import load_profile
    >>> p = load_profile("profiles/chat-70b-h100.yaml")            # doctest: +SKIP
    >>> p.hardware.gpu, p.hardware.count, p.engine.name              # doctest: +SKIP
    ('h100-sxm', 4, 'sglang')
    >>> p.model_shape().num_kv_heads, p.traffic.task_weights()["chat"]  # doctest: +SKIP
    (8, 0.6)

Bad input raises :class:`picker.errors.UserError` with one line naming the file and the dotted
field path and, for closed sets, the allowed values, e.g.
``x.yaml: engine.name: must be one of sglang, vllm, tensorrt_llm, llama_cpp (got 'tgi')``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from picker.errors import UserError
from picker.inputs.drafters import DraftersSpec
from picker.inputs.fields import (
    Batch,
    Devices,
    Dim,
    Millis,
    Name,
    NonNegFloat,
    Params,
    Section,
    Tokens,
    TokensFloat,
    Weight,
)
from picker.inputs.hardware import CATALOG, Hardware, resolve_hardware_name
from picker.inputs.yamlio import fail_at as _fail_at
from picker.inputs.yamlio import (
    load_json_mapping,
    load_yaml_mapping,
    user_error_from_validation,
)

TaskType = Literal["chat", "code", "structured", "math", "summarization", "rag", "translation",
                   "creative", "agentic"]
TASK_TYPES: tuple[str, ...] = get_args(TaskType)
Dtype = Literal["bf16", "fp16", "fp8", "int8", "int4"]
BYTES_PER_PARAM: dict[str, float] = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}
EngineName = Literal["sglang", "vllm", "tensorrt_llm", "llama_cpp"]
WEIGHT_TOLERANCE = 1e-6

def _check_weights(weights: list[float]) -> None:
    total = sum(weights)
    if abs(total - 1.0) > WEIGHT_TOLERANCE:
        raise ValueError(f"weights must sum to 1 (got {total:.6g})")


# --------------------------------------------------------------------------- model

_HF_KEYS: dict[str, tuple[str, ...]] = {   # our field -> config.json keys (Llama/Qwen/Mistral, GPT-2)
    "num_layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "hidden_size": ("hidden_size", "n_embd", "d_model"),
    "num_attention_heads": ("num_attention_heads", "n_head"),
    "num_kv_heads": ("num_key_value_heads",),
    "head_dim": ("head_dim",),
    "vocab_size": ("vocab_size",),
    "intermediate_size": ("intermediate_size", "n_inner"),
}
_HF_REQUIRED = ("num_layers", "hidden_size", "num_attention_heads", "vocab_size")
_HF_DTYPES = {"bfloat16": "bf16", "float16": "fp16"}


def shape_from_hf_config(
    cfg: dict[str, Any], *, source: str, profile: str | None = None
) -> dict[str, Any]:
    """Map a Hugging Face ``config.json`` to ModelSpec fields; ``source`` names it in errors."""
    def bad(message: str) -> UserError:
        return UserError(f"{source}: {message}", file=profile, field="model.hf_config")

    # Multimodal wrappers (Llama 4, Gemma 3, Mistral 3) keep the language model under text_config.
    text = cfg.get("text_config") if "num_hidden_layers" not in cfg else None
    inner: dict[str, Any] = text if isinstance(text, dict) else cfg
    out: dict[str, Any] = {}
    for ours, keys in _HF_KEYS.items():
        key = next((k for k in keys if inner.get(k) is not None), None)
        if key is None:
            continue
        value = inner[key]
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise bad(f"{key} must be a positive integer (got {value!r})")
        out[ours] = value
    tie = inner.get("tie_word_embeddings", cfg.get("tie_word_embeddings"))
    if isinstance(tie, bool):
        out["tie_word_embeddings"] = tie
    dtype = _HF_DTYPES.get(str(cfg.get("torch_dtype") or cfg.get("dtype") or ""))
    if dtype:
        out["dtype"] = dtype
    return out


def estimate_params(num_layers: int, hidden_size: int, num_attention_heads: int, num_kv_heads: int,
                    head_dim: int, vocab_size: int, intermediate_size: int, *, tied: bool = False) -> int:
    """Parameter count of a Llama-style decoder (GQA attention, gated MLP, RMSNorm).

    Per layer: q and o projections (hidden x heads*head_dim each), k and v (hidden x
    kv_heads*head_dim each), gate/up/down (3 x hidden x intermediate), two norms. Plus the
    embedding and, unless tied, the LM head. Attention biases (Qwen) are ignored: < 0.01 %.
    """
    attn = 2 * hidden_size * num_attention_heads * head_dim + 2 * hidden_size * num_kv_heads * head_dim
    mlp = 3 * hidden_size * intermediate_size
    per_layer = attn + mlp + 2 * hidden_size
    embed = vocab_size * hidden_size * (1 if tied else 2)
    return num_layers * per_layer + embed + hidden_size


class ModelSpec(Section):
    """The target model: its shape, given here or read from a Hugging Face config.json."""

    name: Name = Field(description="Model name, for reports (e.g. meta-llama/Llama-3.1-8B-Instruct).")
    hf_config: Name | None = Field(None, description=(
        "Path to the model's Hugging Face config.json, relative to this profile file. Shape fields "
        "missing here are read from it; fields given here win."))
    params_b: Params | None = Field(None, description=(
        "Parameter count in billions. Estimated from the shape when absent (needs intermediate_size)."))
    num_layers: Dim | None = Field(None, description="Decoder layers (num_hidden_layers).")
    hidden_size: Dim | None = Field(None, description="Hidden (model) dimension.")
    num_attention_heads: Dim | None = Field(None, description="Query heads per layer.")
    num_kv_heads: Dim | None = Field(None, description=(
        "Key/value heads per layer (grouped-query attention); defaults to num_attention_heads."))
    head_dim: Dim | None = Field(None, description=(
        "Per-head dimension; defaults to hidden_size / num_attention_heads."))
    vocab_size: Dim | None = Field(None, description="Vocabulary size (embedding and LM-head rows).")
    intermediate_size: Dim | None = Field(None, description="MLP inner dimension (to estimate params_b).")
    tie_word_embeddings: StrictBool | None = Field(None, description=(
        "Whether the LM head shares the embedding matrix; used to estimate params_b (default false)."))
    dtype: Dtype = Field("bf16", description="Weight precision served: bf16, fp16, fp8, int8 or int4.")

    @model_validator(mode="before")
    @classmethod
    def _fill_from_hf_config(cls, data: Any, info: ValidationInfo) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("hf_config"), str):
            return data  # nothing to read, or a wrong type the field validation reports
        ctx = info.context or {}
        profile = ctx.get("file")
        ref = data["hf_config"].strip()
        path = Path(ctx.get("base_dir", ".")) / ref
        try:
            cfg = load_json_mapping(path, what="Hugging Face config")
        except UserError as exc:
            raise UserError(f"cannot use {ref!r}: {exc}", file=profile, field="model.hf_config") from None
        values = shape_from_hf_config(cfg, source=str(path), profile=profile)
        for ours in _HF_REQUIRED:
            if ours not in values and data.get(ours) is None:
                keys = " / ".join(_HF_KEYS[ours])
                raise UserError(f"{path} has no {keys}; give model.{ours} in the profile",
                                file=profile, field="model.hf_config")
        return {**values, **{k: v for k, v in data.items() if v is not None}}

    @model_validator(mode="after")
    def _check_shape(self) -> ModelSpec:
        for field in _HF_REQUIRED:
            if getattr(self, field) is None:
                _fail_at((field,), "required field is missing (give it here or through hf_config)", None)
        heads, kv = self.num_attention_heads, self.resolved_num_kv_heads
        assert heads is not None and self.hidden_size is not None
        if heads % kv:
            _fail_at(("num_kv_heads",), f"must divide num_attention_heads ({heads}) (got {kv})", kv)
        if self.head_dim is None and self.hidden_size % heads:
            _fail_at(("head_dim",), f"required: hidden_size {self.hidden_size} is not a multiple of "
                     f"num_attention_heads {heads}", None)
        if self.params_b is None and self.intermediate_size is None:
            _fail_at(("params_b",), "required field is missing (or give intermediate_size, or an "
                     "hf_config that has it, so it can be estimated)", None)
        return self

    @property
    def resolved_num_kv_heads(self) -> int:
        return self.num_kv_heads or self.num_attention_heads or 1

    @property
    def resolved_head_dim(self) -> int:
        assert self.hidden_size is not None and self.num_attention_heads is not None
        return self.head_dim or self.hidden_size // self.num_attention_heads


# --------------------------------------------------------------------------- hardware, engine

class HardwareSpec(Section):
    """Where the model runs."""

    gpu: Name = Field(description="Accelerator, a catalog name: " + ", ".join(CATALOG) +
                      " (case-insensitive; aliases such as H100 or a100 accepted).")
    count: Devices = Field(1, description="Accelerators the model is sharded over (tensor parallel).")

    @field_validator("gpu")
    @classmethod
    def _canonical_gpu(cls, value: str) -> str:
        key = resolve_hardware_name(value)
        if key is None:
            raise ValueError(f"must be one of {', '.join(CATALOG)} (got {value!r})")
        return key

    @property
    def spec(self) -> Hardware:
        return CATALOG[self.gpu]


class EngineSpec(Section):
    """The serving engine whose configuration the recommendation is written for."""

    name: EngineName = Field(description="Serving engine: sglang, vllm, tensorrt_llm or llama_cpp.")
    version: Name = Field(description=(
        "Engine version as a quoted string, e.g. \"0.5.23\"; flags change between versions."))

    @field_validator("version", mode="before")
    @classmethod
    def _version_is_text(cls, value: Any) -> Any:
        # An unquoted 0.10 is the float 0.1 to YAML: refuse rather than report the wrong version.
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            raise ValueError(f"must be a quoted string such as \"0.5.23\" (YAML read {value!r} as a "
                             "number)")
        return value


# --------------------------------------------------------------------------- traffic

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

    @model_validator(mode="after")
    def _one_form(self) -> TokenLengths:
        if (self.mean is None) == (self.points is None):
            raise ValueError("give either mean (with an optional p90) or points, not both or neither")
        if self.p90 is not None and (self.mean is None or self.p90 < self.mean):
            _fail_at(("p90",), f"must be >= mean ({self.mean}) (got {self.p90})", self.p90)
        if self.points is not None:
            try:
                _check_weights([p.weight for p in self.points])
            except ValueError as exc:
                _fail_at(("points",), str(exc), None)
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

    @model_validator(mode="after")
    def _one_form(self) -> ConcurrencyBucket:
        lo, hi = self.min_batch, self.max_batch
        single = self.batch_size is not None
        if single == (lo is not None or hi is not None) or (not single and (lo is None or hi is None)):
            raise ValueError("give either batch_size, or both min and max")
        if lo is not None and hi is not None and lo > hi:
            _fail_at(("max",), f"must be >= min ({lo}) (got {hi})", hi)
        return self

    @property
    def low(self) -> int:
        return self.batch_size or self.min_batch or 1  # one form is guaranteed by _one_form

    @property
    def high(self) -> int:
        return self.batch_size or self.max_batch or 1


class TemperaturePoint(Section):
    """One sampling temperature and its share of requests."""

    value: Annotated[float, Field(strict=True, ge=0, le=2)] = Field(description=(
        "Temperature in [0, 2]; 0 is greedy."))
    weight: Weight = Field(description="Share of requests at this temperature, in [0, 1].")


class TrafficSpec(Section):
    """What the requests look like."""

    task_mix: dict[TaskType, Weight] = Field(min_length=1, description=(
        "Share of requests per task type (" + ", ".join(TASK_TYPES) + "); values in [0, 1] summing "
        "to 1. Task types left out count as 0."))
    prompt_tokens: TokenLengths = Field(description="Prompt length distribution.")
    output_tokens: TokenLengths = Field(description="Output length distribution.")
    concurrency: tuple[ConcurrencyBucket, ...] = Field(min_length=1, description=(
        "Distribution of the running batch size: buckets of {batch_size, weight} or {min, max, weight}, "
        "not overlapping, weights summing to 1."))
    temperature: tuple[TemperaturePoint, ...] = Field(min_length=1, description=(
        "Distribution of sampling temperatures: a list of {value, weight}, weights summing to 1."))

    @field_validator("task_mix")
    @classmethod
    def _mix_sums_to_one(cls, value: dict[str, float]) -> dict[str, float]:
        _check_weights(list(value.values()))
        return value

    @field_validator("temperature")
    @classmethod
    def _temperature_sums_to_one(
        cls, value: tuple[TemperaturePoint, ...]
    ) -> tuple[TemperaturePoint, ...]:
        _check_weights([p.weight for p in value])
        return value

    @field_validator("concurrency")
    @classmethod
    def _buckets_valid(cls, value: tuple[ConcurrencyBucket, ...]) -> tuple[ConcurrencyBucket, ...]:
        _check_weights([b.weight for b in value])
        ordered = sorted(value, key=lambda b: b.low)
        for prev, cur in zip(ordered, ordered[1:], strict=False):
            if cur.low <= prev.high:
                raise ValueError(f"buckets overlap: {prev.low}-{prev.high} and {cur.low}-{cur.high}")
        return value

    def task_weights(self) -> dict[str, float]:
        """Share of every task type, 0.0 for the ones the profile leaves out."""
        return {t: float(self.task_mix.get(t, 0.0)) for t in TASK_TYPES}  # type: ignore[call-overload]


# --------------------------------------------------------------------------- slo, drafters

class SloSpec(Section):
    """Latency targets; a recommendation that would break one is rejected. All optional."""

    ttft_ms: Millis | None = Field(None, description="Time to first token target, milliseconds.")
    itl_p50_ms: Millis | None = Field(None, description="Median inter-token latency target, ms.")
    itl_p99_ms: Millis | None = Field(None, description="99th-percentile inter-token latency target, ms.")

    @model_validator(mode="after")
    def _ordered(self) -> SloSpec:
        p50, p99 = self.itl_p50_ms, self.itl_p99_ms
        if p50 is not None and p99 is not None and p99 < p50:
            _fail_at(("itl_p99_ms",), f"must be >= itl_p50_ms ({p50}) (got {p99})", p99)
        return self


# --------------------------------------------------------------------------- the profile

@dataclass(frozen=True)
class ResolvedModelShape:
    """The target's numbers with every default applied; what a cost model needs."""

    name: str
    params: float                # parameter count (not billions)
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    intermediate_size: int | None
    dtype: str
    bytes_per_param: float
    params_estimated: bool       # True when params came from the shape, not from params_b

    def roofline_kwargs(self) -> dict[str, float | int]:
        """The fields ``policies.roofline.ModelShape`` takes, by its names."""
        return {"params": self.params, "num_layers": self.num_layers, "hidden_size": self.hidden_size,
                "num_kv_heads": self.num_kv_heads, "head_dim": self.head_dim,
                "vocab_size": self.vocab_size, "bytes_per_param": self.bytes_per_param}


class WorkloadProfile(Section):
    """A serving workload: model, hardware, engine, traffic, SLOs and available drafters."""

    name: Name = Field(description="Short identifier of this workload, for reports.")
    description: str = Field("", description="Free text: what is served, to whom.")
    model: ModelSpec = Field(description="The target model.")
    hardware: HardwareSpec = Field(description="Accelerators the target runs on.")
    engine: EngineSpec = Field(description="Serving engine and version.")
    traffic: TrafficSpec = Field(description="Request mix, lengths, concurrency and temperature.")
    # Frozen sections are safe to share as defaults.
    slo: SloSpec = Field(SloSpec.model_validate({}), description="Latency targets (optional).")
    drafters: DraftersSpec = Field(DraftersSpec.model_validate({}), description=(
        "Drafters available, or trainable within the budget."))
    memory_headroom_gib: NonNegFloat = Field(description=(
        "Free memory per accelerator, GiB, that drafts or heads may use (after weights and the KV "
        "cache you want to keep)."))

    def model_shape(self) -> ResolvedModelShape:
        """The target's resolved numbers (defaults applied, params estimated when not given)."""
        m = self.model
        layers, hidden, heads, vocab = m.num_layers, m.hidden_size, m.num_attention_heads, m.vocab_size
        assert layers and hidden and heads and vocab  # ModelSpec._check_shape guarantees them
        kv, head_dim = m.resolved_num_kv_heads, m.resolved_head_dim
        if m.params_b is not None:
            params = m.params_b * 1e9
        else:
            assert m.intermediate_size is not None  # likewise guaranteed
            params = float(estimate_params(layers, hidden, heads, kv, head_dim, vocab,
                                           m.intermediate_size, tied=bool(m.tie_word_embeddings)))
        return ResolvedModelShape(m.name, params, layers, hidden, heads, kv, head_dim, vocab,
                                  m.intermediate_size, m.dtype, BYTES_PER_PARAM[m.dtype],
                                  params_estimated=m.params_b is None)


def load_profile(path: str | os.PathLike[str]) -> WorkloadProfile:
    """Load and validate a profile; any problem raises one :class:`UserError` line naming the file."""
    name = str(path)
    data = load_yaml_mapping(path)
    context = {"base_dir": Path(path).parent, "file": name}
    try:
        return WorkloadProfile.model_validate(data, context=context)
    except ValidationError as exc:
        raise user_error_from_validation(exc, file=name, root=WorkloadProfile) from None


def workload_json_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of a profile, with every field's description."""
    schema = WorkloadProfile.model_json_schema(by_alias=True)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}

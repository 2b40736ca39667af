"""Workload profile: the YAML a user writes to describe what they serve, validated once at the edge.

A profile needs four things: the model, the hardware, the engine and the task mix. Everything
else has a stated default, and the loaded profile lists each one it used (``defaults_applied``):

    model: llama-3.1-8b-instruct        # a catalog name, a Hugging Face folder, or the shape
    hardware: H100                      # one accelerator; "4x H100" for four
    engine: vllm                        # version: the one specpick's configs are written for
    traffic:
      task_mix: {chat: 0.7, code: 0.3}
      concurrency: 32
      temperature: 0.7
    slo: {itl_p99_ms: 50}

    >>> from picker.inputs.workload import load_profile
    >>> p = load_profile("profiles/chat-70b-h100.yaml")            # doctest: +SKIP
    >>> p.hardware.gpu, p.hardware.count, p.engine.name              # doctest: +SKIP
    ('h100-sxm', 4, 'sglang')
    >>> p.model_shape().num_kv_heads, p.traffic.task_weights()["chat"]  # doctest: +SKIP
    (8, 0.6)
    >>> p.defaults_applied                                           # doctest: +SKIP
    ()

Every section forbids unknown keys and every loaded profile is frozen. Bad input raises
:class:`picker.errors.UserError` naming the file, the dotted field path and, for closed sets, the
allowed values, e.g. ``x.yaml: engine.name: must be one of sglang, vllm, tensorrt_llm, llama_cpp
(got 'tgi')``; a profile with several problems raises :class:`picker.errors.UserErrors`, one such
line per problem.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, PrivateAttr, ValidationError, ValidationInfo, field_validator, model_validator

from picker.inputs.drafters import DraftersSpec
from picker.inputs.fields import ASSUMED_KEY, AppliedDefault, Devices, Millis, Name, NonNegFloat, Section
from picker.inputs.fields import record_default as _record
from picker.inputs.hardware import CATALOG, Hardware, hardware_note, resolve_hardware_name
from picker.inputs.model import BYTES_PER_PARAM, Dtype, ModelSpec, estimate_params, shape_from_hf_config
from picker.inputs.traffic import TASK_TYPES, TaskType, TrafficSpec
from picker.inputs.yamlio import fail_at as _fail_at
from picker.inputs.yamlio import load_yaml_mapping, user_error_from_validation

__all__ = ["BYTES_PER_PARAM", "TASK_TYPES", "AppliedDefault", "Dtype", "EngineName", "ModelSpec", "TaskType",
           "WorkloadProfile", "estimate_params", "load_profile", "shape_from_hf_config", "workload_json_schema"]

EngineName = Literal["sglang", "vllm", "tensorrt_llm", "llama_cpp"]
# The engine version each engine's configs are written for: the same table as
# picker.recommend.engine_configs.ENGINE_VERSIONS (which says what was checked in each;
# tests/test_workload.py keeps the two equal). A profile that names no version gets this one.
PINNED_ENGINE_VERSIONS: dict[str, str] = {
    "sglang": "0.5.23",
    "vllm": "0.32.0",
    "tensorrt_llm": "1.4.0rc4",
    "llama_cpp": "llama.cpp vendored in llama-cpp-python 0.3.36",
}
_ENGINE_SPELLINGS = {"llamacpp": "llama_cpp", "llama.cpp": "llama_cpp", "llama-cpp": "llama_cpp",
                     "tensorrt-llm": "tensorrt_llm", "trt-llm": "tensorrt_llm", "trtllm": "tensorrt_llm"}
HEADROOM_SHARE = 0.10  # default memory headroom: this share of one accelerator's memory
_HARDWARE_COUNT = re.compile(r"\s*(\d+)\s*[x×*]\s*(\S.*)", re.IGNORECASE)


# --------------------------------------------------------------------------- hardware, engine

class HardwareSpec(Section):
    """Where the model runs; ``hardware: H100`` is short for ``{gpu: H100}``, ``4x H100`` for count 4."""

    gpu: Name = Field(description="Accelerator, a catalog name: " + ", ".join(CATALOG) +
                      " (case-insensitive; family names such as H100 or a100 resolve with a note).")
    count: Devices = Field(1, description="Accelerators the model is sharded over (tensor parallel). Default 1.")

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any, info: ValidationInfo) -> Any:
        if isinstance(data, str):
            m = _HARDWARE_COUNT.fullmatch(data)
            data = {"gpu": m.group(2), "count": int(m.group(1))} if m else {"gpu": data}
        if isinstance(data, dict):
            gpu = data.get("gpu")
            note = hardware_note(gpu) if isinstance(gpu, str) else None
            if note is not None:
                _record(info, "hardware.gpu", resolve_hardware_name(gpu) or gpu, note)
            if "count" not in data:
                _record(info, "hardware.count", 1, "one accelerator; for tensor parallelism give "
                        "hardware.count, or write `4x H100`")
        return data

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

    name: EngineName = Field(description=(
        "Serving engine: sglang, vllm, tensorrt_llm or llama_cpp. `engine: vllm` alone is short for "
        "{name: vllm} with the version below."))
    version: Name = Field(description=(
        "Engine version as a quoted string, e.g. \"0.5.23\"; flags change between versions. Default: "
        "the version specpick's configs are written for (" +
        ", ".join(f"{k} {v}" for k, v in PINNED_ENGINE_VERSIONS.items()) + ")."))

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any, info: ValidationInfo) -> Any:
        if isinstance(data, str):
            data = {"name": data}
        if not isinstance(data, dict) or not isinstance(data.get("name"), str):
            return data
        name = data["name"].strip().lower()
        name = _ENGINE_SPELLINGS.get(name, name)
        data = {**data, "name": name}
        if "version" not in data:
            # An unknown engine is reported on its name alone, not again for its missing version.
            data["version"] = PINNED_ENGINE_VERSIONS.get(name, "unknown")
            if name in PINNED_ENGINE_VERSIONS:
                _record(info, "engine.version", data["version"], "the version specpick's engine configs are "
                        "written for")
        return data

    @field_validator("version", mode="before")
    @classmethod
    def _version_is_text(cls, value: Any) -> Any:
        # An unquoted 0.10 is the float 0.1 to YAML: refuse rather than report the wrong version.
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            raise ValueError(f"must be a quoted string such as \"0.5.23\" (YAML read {value!r} as a "
                             "number)")
        return value


# --------------------------------------------------------------------------- slo

class SloSpec(Section):
    """Latency targets; a recommendation that would break one is rejected. All optional."""

    ttft_ms: Millis | None = Field(None, description="Time to first token target, milliseconds.")
    itl_p50_ms: Millis | None = Field(None, description="Median inter-token latency target, ms.")
    itl_p99_ms: Millis | None = Field(None, description="99th-percentile inter-token latency target, ms.")
    tpot_ms: Millis | None = Field(None, description=(
        "Mean time per output token target, ms: (e2e - TTFT) / (tokens - 1) of a request."))

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
    params: float                # parameter count (not billions), all experts of a MoE included
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
    num_experts: int | None = None          # routed experts per layer (MoE); None: dense
    num_experts_per_tok: int | None = None  # experts each token is routed to (MoE)

    def roofline_kwargs(self) -> dict[str, float | int]:
        """The fields ``policies.roofline.ModelShape`` takes, by its names."""
        return {"params": self.params, "num_layers": self.num_layers, "hidden_size": self.hidden_size,
                "num_kv_heads": self.num_kv_heads, "head_dim": self.head_dim,
                "vocab_size": self.vocab_size, "bytes_per_param": self.bytes_per_param}

    def weights_gib(self, devices: int = 1) -> float:
        """The weights' memory per accelerator when sharded over ``devices``, GiB."""
        return self.params * self.bytes_per_param / devices / 2**30


# Defaults of whole sections, and why: listed when the profile leaves the section out.
_SECTION_DEFAULTS = {
    "slo": ("none", "no latency targets; give slo.itl_p99_ms, ttft_ms, itl_p50_ms or tpot_ms to hold the plan to them"),
    "drafters": ("none", "no draft model and no trained heads, so only strategies that need none can be "
                 "chosen; list what you have under drafters"),
}
_ORDER = ("name", "model", "hardware", "engine", "traffic", "slo", "drafters", "memory_headroom_gib")


class WorkloadProfile(Section):
    """A serving workload: model, hardware, engine, traffic, SLOs and available drafters."""

    name: Name = Field(description="Short identifier of this workload, for reports. Default: the file's name.")
    description: str = Field("", description="Free text: what is served, to whom.")
    model: ModelSpec = Field(description="The target model: a catalog name, a Hugging Face folder, or its shape.")
    hardware: HardwareSpec = Field(description="Accelerators the target runs on, e.g. `H100` or `4x h100-sxm`.")
    engine: EngineSpec = Field(description="Serving engine and version, e.g. `vllm`.")
    traffic: TrafficSpec = Field(description="Request mix, lengths, concurrency and temperature.")
    # Frozen sections are safe to share as defaults.
    slo: SloSpec = Field(SloSpec.model_validate({}), description="Latency targets (optional).")
    drafters: DraftersSpec = Field(DraftersSpec.model_validate({}), description=(
        "Drafters available, or trainable within the budget."))
    memory_headroom_gib: NonNegFloat = Field(description=(
        "Free memory per accelerator, GiB, that drafts or heads may use (after weights and the KV "
        f"cache you want to keep). Default: {HEADROOM_SHARE:.0%} of one accelerator's memory, at most "
        "what the target's weights leave free."))
    _defaults: tuple[AppliedDefault, ...] = PrivateAttr(())

    @model_validator(mode="wrap")
    @classmethod
    def _apply_defaults(cls, data: Any, handler: Any, info: ValidationInfo) -> WorkloadProfile:
        """Fill the top-level defaults; collect every default the sections applied (through the
        validation context, when the caller passes one: ``load_profile`` does)."""
        if not isinstance(data, dict):
            return handler(data)  # type: ignore[no-any-return]
        ctx = info.context if isinstance(info.context, dict) else None
        if ctx is not None:
            ctx.setdefault(ASSUMED_KEY, [])
        data = dict(data)
        if "name" not in data:
            stem = Path(str(ctx.get("file"))).stem if ctx and ctx.get("file") else "workload"
            data["name"] = stem
            _record(info, "name", stem, "the profile file's name")
        for section, (value, why) in _SECTION_DEFAULTS.items():
            if section not in data:
                _record(info, section, value, why)
        headroom_missing = "memory_headroom_gib" not in data
        if headroom_missing:
            data["memory_headroom_gib"] = 0.0  # replaced below, once the model and hardware are known
        profile: WorkloadProfile = handler(data)
        if headroom_missing:
            weights = profile.model_shape().weights_gib(profile.hardware.count)
            memory = profile.hardware.spec.memory_gib
            headroom = round(max(0.0, min(HEADROOM_SHARE * memory, memory - weights)), 1)
            profile = profile.model_copy(update={"memory_headroom_gib": headroom})
            _record(info, "memory_headroom_gib", headroom,
                    f"{HEADROOM_SHARE:.0%} of one {profile.hardware.gpu}'s {memory:g} GiB, at most what the "
                    f"target's {weights:.1f} GiB of weights per accelerator leave; give memory_headroom_gib "
                    "for the room your KV cache really leaves")
        if ctx is not None:
            found = ctx[ASSUMED_KEY]
            profile._defaults = tuple(sorted(found, key=lambda d: _ORDER.index(d.field.split(".")[0])))
        return profile

    @property
    def defaults_applied(self) -> tuple[AppliedDefault, ...]:
        """Every value the profile left out and the loader supplied, in profile order (filled by
        :func:`load_profile`, or by ``model_validate(data, context={})``)."""
        return self._defaults

    def model_shape(self) -> ResolvedModelShape:
        """The target's resolved numbers (defaults applied, params estimated when not given)."""
        m = self.model
        layers, hidden, heads, vocab = m.num_layers, m.hidden_size, m.num_attention_heads, m.vocab_size
        assert layers and hidden and heads and vocab  # ModelSpec._check_shape guarantees them
        kv, head_dim = m.resolved_num_kv_heads, m.resolved_head_dim
        if m.params_b is not None:
            params = m.params_b * 1e9
        else:
            inner = m.intermediate_size or m.expert_intermediate_size
            assert inner is not None  # likewise guaranteed
            params = float(estimate_params(layers, hidden, heads, kv, head_dim, vocab, inner,
                                           tied=bool(m.tie_word_embeddings), num_experts=m.num_experts,
                                           expert_intermediate_size=m.expert_intermediate_size))
        return ResolvedModelShape(m.name, params, layers, hidden, heads, kv, head_dim, vocab,
                                  m.intermediate_size, m.dtype, BYTES_PER_PARAM[m.dtype],
                                  params_estimated=m.params_b is None, num_experts=m.num_experts,
                                  num_experts_per_tok=m.num_experts_per_tok)


def load_profile(path: str | os.PathLike[str]) -> WorkloadProfile:
    """Load and validate a profile; every problem is one :class:`UserError` line naming the file."""
    return profile_from_data(load_yaml_mapping(path), file=str(path))


def profile_from_data(data: dict[str, Any], *, file: str) -> WorkloadProfile:
    """Validate a profile's parsed YAML as the file ``file`` (paths in it are relative to its folder;
    errors name it; its defaults are recorded in ``defaults_applied``)."""
    context = {"base_dir": Path(file).parent, "file": file}
    try:
        return WorkloadProfile.model_validate(data, context=context)
    except ValidationError as exc:
        raise user_error_from_validation(exc, file=file, root=WorkloadProfile) from None


# Sections a profile may write as one string (`model: NAME`, `hardware: H100`, `engine: vllm`) and
# fields it may write as one number or name: the schema offers both forms.
_SHORT_SECTIONS = {"ModelSpec": "a catalog name or a Hugging Face folder / config.json path",
                   "HardwareSpec": "an accelerator name, optionally with a count: `H100`, `4x h100-sxm`",
                   "EngineSpec": "the engine's name, with the default version"}
_SHORT_FIELDS = {("TrafficSpec", "concurrency"): {"type": "integer", "minimum": 1, "maximum": 65536},
                 ("TrafficSpec", "temperature"): {"type": "number", "minimum": 0, "maximum": 2},
                 ("TrafficSpec", "task_mix"): {"enum": list(TASK_TYPES)},
                 ("TokenLengths", None): {"type": "number", "exclusiveMinimum": 0, "maximum": 10_000_000}}


def workload_json_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of a profile, with every field's description and short forms."""
    schema = WorkloadProfile.model_json_schema(by_alias=True)
    defs = schema["$defs"]
    for props in [schema["properties"], *(d.get("properties", {}) for d in defs.values())]:
        for key, prop in list(props.items()):
            ref = prop.get("$ref", "").removeprefix("#/$defs/")
            if ref in _SHORT_SECTIONS:
                props[key] = {"description": prop.get("description", ""), "anyOf": [
                    {"type": "string", "minLength": 1, "description": _SHORT_SECTIONS[ref]}, {"$ref": prop["$ref"]}]}
    for (model, field), short in _SHORT_FIELDS.items():
        if field is None:  # a whole model may be one number: offered where it is referenced
            continue
        prop = defs[model]["properties"][field]
        props_desc = prop.pop("description", "")
        defs[model]["properties"][field] = {"description": props_desc, "anyOf": [short, prop]}
    tokens = _SHORT_FIELDS[("TokenLengths", None)]
    for field in ("prompt_tokens", "output_tokens"):
        prop = defs["TrafficSpec"]["properties"][field]
        desc, default = prop.pop("description", ""), prop.pop("default", None)
        defs["TrafficSpec"]["properties"][field] = {"description": desc, "anyOf": [tokens, prop],
                                                   **({"default": default} if default is not None else {})}
    # Required to the model, filled by the loader when left out (see WorkloadProfile._apply_defaults).
    for node, keys in ((schema, ("name", "memory_headroom_gib")), (defs["EngineSpec"], ("version",))):
        node["required"] = [k for k in node.get("required", []) if k not in keys]
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}

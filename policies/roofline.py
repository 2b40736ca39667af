"""Roofline model of one target forward: B sequences × k new tokens each at context length L.

Decoding is memory-bound while the bytes read (weights + KV cache) outweigh the FLOPs, so a verify
forward over N+1 tokens costs about as much as a 1-token forward; at large B·k it turns
compute-bound and verification stops being free. That ratio is how batch size enters the speedup
(MagicDec, arXiv:2408.11049; docs/facts.md).

    >>> from types import SimpleNamespace
    >>> h100 = SimpleNamespace(memory_bandwidth_gbps=3350.0, bf16_tflops=989.0)
    >>> llama8b = ModelShape.from_params(8e9)
    >>> llama8b.name, llama8b.num_layers
    ('llama-3-8b-like', 32)
    >>> forward_time(llama8b, h100, batch=1, tokens_per_seq=1, context_len=1024).bound
    'memory'
    >>> round(verify_cost_ratio(llama8b, h100, batch=1, k=8, context_len=1024), 2)
    1.0

Hardware is anything with ``memory_bandwidth_gbps`` (GB/s, 1e9 bytes/s) and ``bf16_tflops``
(dense) attributes, e.g. ``picker.inputs.hardware.Hardware``; it is never imported here.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

Bound = Literal["memory", "compute", "overhead"]
Role = Literal["target", "draft"]

# Logits are written for every token of the forward (every verify position needs them); engines
# keep them in fp32. Counted because at B·k in the thousands a 128k vocabulary makes this GBs.
LOGIT_BYTES = 4.0


class HardwareLike(Protocol):
    """What the roofline reads from a hardware entry."""

    @property
    def memory_bandwidth_gbps(self) -> float: ...

    @property
    def bf16_tflops(self) -> float: ...


@dataclass(frozen=True)
class ModelShape:
    """The numbers of a decoder-only transformer that set its forward cost."""

    params: float  # total parameter count, embeddings included
    num_layers: int
    hidden_size: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    bytes_per_param: float  # 2 bf16/fp16, 1 fp8/int8, 0.5 int4
    kv_bytes_per_elem: float = 2.0
    name: str = "custom"

    def __post_init__(self) -> None:
        if self.params <= 0 or self.bytes_per_param <= 0 or self.kv_bytes_per_elem < 0:
            raise ValueError("params and bytes_per_param must be positive")
        if min(self.num_layers, self.hidden_size, self.num_kv_heads, self.head_dim) < 0:
            raise ValueError("shape fields must be non-negative")

    @property
    def weight_bytes(self) -> float:
        """Bytes of weights streamed per forward (embedding table included: an overcount of the
        few rows actually gathered, ≤ 7% of an 8B model, less for larger ones)."""
        return self.params * self.bytes_per_param

    @property
    def kv_bytes_per_token(self) -> float:
        """K and V for one token across all layers: 2 · layers · kv_heads · head_dim · bytes."""
        return 2.0 * self.num_layers * self.num_kv_heads * self.head_dim * self.kv_bytes_per_elem

    @property
    def params_per_layer(self) -> float:
        """Parameters in one decoder layer: total less input embedding and LM head (untied)."""
        if self.num_layers == 0:
            return 0.0
        body = self.params - 2.0 * self.vocab_size * self.hidden_size
        return max(body, 0.0) / self.num_layers

    @classmethod
    def from_params(
        cls, params: float, bytes_per_param: float = 2.0, kv_bytes_per_elem: float = 2.0
    ) -> ModelShape:
        """A plausible shape for a dense model of ``params`` parameters.

        Takes the published family in :data:`REFERENCE_SHAPES` nearest in log(params) and keeps
        the requested parameter count: weight bytes are exact, layer count, width and GQA layout
        (which set KV bytes and attention FLOPs) are the reference model's. Mixture-of-experts
        models are not covered (active ≠ total parameters).
        """
        if params <= 0:
            raise ValueError("params must be positive")
        ref = min(REFERENCE_SHAPES, key=lambda s: abs(math.log(params / s.params)))
        return dataclasses.replace(
            ref,
            params=float(params),
            bytes_per_param=bytes_per_param,
            kv_bytes_per_elem=kv_bytes_per_elem,
            name=f"{ref.name}-like",
        )


def _ref(name: str, params: float, layers: int, hidden: int, kv: int, hd: int, vocab: int) -> ModelShape:
    return ModelShape(params, layers, hidden, kv, hd, vocab, bytes_per_param=2.0, name=name)


# Published configurations (config.json of each model on the Hugging Face Hub; the Llama-3.2-1B
# one was re-checked here against a copy of its config). llama-68m is the JackFram draft used by
# SpecInfer and Sequoia, recalled from its model card (not re-checked here).
REFERENCE_SHAPES: tuple[ModelShape, ...] = (
    _ref("llama-68m", 68e6, 2, 768, 12, 64, 32000),
    _ref("llama-160m", 162e6, 12, 768, 12, 64, 32000),
    _ref("qwen2.5-0.5b", 494e6, 24, 896, 2, 64, 151936),
    _ref("llama-3.2-1b", 1.24e9, 16, 2048, 8, 64, 128256),
    _ref("llama-3.2-3b", 3.21e9, 28, 3072, 8, 128, 128256),
    _ref("llama-2-7b", 6.74e9, 32, 4096, 32, 128, 32000),
    _ref("llama-3-8b", 8.03e9, 32, 4096, 8, 128, 128256),
    _ref("llama-2-13b", 13.0e9, 40, 5120, 40, 128, 32000),
    _ref("qwen2.5-32b", 32.8e9, 64, 5120, 8, 128, 152064),
    _ref("llama-3-70b", 70.6e9, 80, 8192, 8, 128, 128256),
    _ref("llama-3.1-405b", 405.9e9, 126, 16384, 8, 128, 128256),
)


@dataclass(frozen=True)
class EngineProfile:
    """How close an engine gets to the roofline, and its fixed costs per forward."""

    name: str
    bw_efficiency: float  # achieved / peak memory bandwidth on weight + KV streaming
    flops_efficiency: float  # achieved / peak dense bf16 FLOP/s on large GEMMs (MFU)
    fixed_s: float  # per target forward: scheduling, sampling, host sync (adds to GPU time)
    draft_fixed_s: float  # the same for one draft step
    launch_s_per_layer: float  # host time to issue one decoder layer's kernels (overlaps the GPU)
    lookup_s_per_seq: float  # host-side n-gram / prompt lookup per sequence per step
    tp_efficiency: float  # fraction of linear scaling kept per device under tensor parallelism
    status: str  # where the numbers come from
    host_s_per_seq: float = 0.0  # host work of any decode step per sequence (policies.loadcurve)
    spec_host_s_per_seq: float = 0.0  # host work of a speculative step per sequence, beyond that
    draft_host_s_per_seq: float = 0.0  # a draft model's host work per sequence per draft forward
    layer_host_s_per_seq: float = 0.0  # the same for an EAGLE layer's drafter
    heads_host_s_per_seq: float = 0.0  # Medusa heads' host work per sequence per step
    # What sampling adds to each (policies.loadcurve prices it; this batch-1 roofline prices greedy steps).
    sampling_host_s_per_seq: float = 0.0
    sampling_spec_host_s_per_seq: float = 0.0
    sampling_draft_host_s_per_seq: float = 0.0
    sampling_layer_host_s_per_seq: float = 0.0
    sampling_heads_host_s_per_seq: float = 0.0


# One table for every engine constant. ALL values are ASSUMPTIONS to be calibrated from measured
# step times (a later issue); the only anchors are public rules of thumb: CUDA-graph engines
# reach roughly 80% of HBM bandwidth in batch-1 decode (e.g. ~6 ms per token for an 8B bf16 model on
# an H100 whose roofline is 4.8 ms); eager PyTorch issues tens of small kernels per decoder layer
# at several µs of Python and dispatcher time each, so small models are launch-bound.
_GRAPH = "assumption: CUDA-graph engine, calibrate against measured step times"
ENGINES: dict[str, EngineProfile] = {
    "sglang": EngineProfile("sglang", 0.80, 0.60, 3e-4, 5e-5, 0.0, 2e-5, 0.85, _GRAPH),
    "vllm": EngineProfile("vllm", 0.80, 0.60, 3e-4, 5e-5, 0.0, 2e-5, 0.85, _GRAPH),
    "tensorrt_llm": EngineProfile("tensorrt_llm", 0.85, 0.65, 2e-4, 4e-5, 0.0, 2e-5, 0.88, _GRAPH),
    "llama_cpp": EngineProfile(
        "llama_cpp", 0.70, 0.35, 5e-4, 3e-4, 1e-5, 1e-5, 0.75,
        "assumption: C++ host loop, CUDA graphs for decode, less tuned batched GEMMs",
    ),
    "hf": EngineProfile(
        "hf", 0.70, 0.50, 1.5e-3, 1.0e-3, 2.5e-4, 3e-4, 0.70,
        "assumption: eager PyTorch (papers' reference code), ~0.25 ms of launches per layer",
    ),
}


def resolve_engine(
    engine: str | EngineProfile, calibration: Mapping[str, float] | None = None
) -> EngineProfile:
    """The engine's profile, with ``calibration`` overriding any of its numeric fields."""
    if isinstance(engine, EngineProfile):
        profile = engine
    elif engine in ENGINES:
        profile = ENGINES[engine]
    else:
        raise ValueError(f"unknown engine {engine!r}; known: {', '.join(sorted(ENGINES))}")
    if calibration:
        numeric = {f.name for f in dataclasses.fields(EngineProfile)} - {"name", "status"}
        unknown = set(calibration) - numeric
        if unknown:
            raise ValueError(f"unknown calibration keys: {', '.join(sorted(unknown))}")
        overrides: dict[str, Any] = {**calibration, "status": "calibrated"}
        profile = dataclasses.replace(profile, **overrides)
    return profile


@dataclass(frozen=True)
class ForwardCost:
    """Time of one forward and what bounds it.

    ``seconds = max(memory, compute, launch) + fixed``: kernel launches are issued asynchronously,
    so they hide behind GPU work unless they take longer (then the forward is ``overhead``-bound).
    ``overhead_seconds`` is launch + fixed time, reported for inspection.
    """

    seconds: float
    memory_seconds: float
    compute_seconds: float
    overhead_seconds: float
    bound: Bound
    bytes_moved: float
    flops: float


def device_scale(num_devices: int, profile: EngineProfile) -> float:
    """Aggregate bandwidth / FLOP/s multiplier for tensor parallelism over ``num_devices``."""
    if num_devices < 1:
        raise ValueError("num_devices must be at least 1")
    return 1.0 if num_devices == 1 else num_devices * profile.tp_efficiency


def forward_time(
    model: ModelShape,
    hw: HardwareLike,
    batch: int,
    tokens_per_seq: int,
    context_len: int,
    engine: str | EngineProfile = "sglang",
    num_devices: int = 1,
    *,
    role: Role = "target",
    calibration: Mapping[str, float] | None = None,
) -> ForwardCost:
    """Roofline time of one forward over ``batch`` sequences × ``tokens_per_seq`` new tokens.

    bytes = weights + KV read (B · L · kv_bytes_per_token) + KV written (B · k · …) + logits.
    FLOPs = 2 · params · B · k (every weight multiplies every token) + attention
    4 · layers · hidden · B · k · (L + k) (QKᵀ and AV, 2 FLOPs per multiply-add each, with
    heads · head_dim = hidden; causal masking within the k new tokens ignored).
    ``role="draft"`` charges the engine's draft-step fixed cost instead of the target's.
    """
    if batch < 1 or tokens_per_seq < 1 or context_len < 0:
        raise ValueError("batch and tokens_per_seq must be >= 1, context_len >= 0")
    profile = resolve_engine(engine, calibration)
    scale = device_scale(num_devices, profile)
    tokens = float(batch) * tokens_per_seq
    bytes_moved = (
        model.weight_bytes
        + batch * context_len * model.kv_bytes_per_token
        + tokens * model.kv_bytes_per_token
        + tokens * model.vocab_size * LOGIT_BYTES
    )
    attention_flops = (
        4.0 * model.num_layers * model.hidden_size * tokens * (context_len + tokens_per_seq))
    flops = 2.0 * model.params * tokens + attention_flops
    memory_s = bytes_moved / (hw.memory_bandwidth_gbps * 1e9 * profile.bw_efficiency * scale)
    compute_s = flops / (hw.bf16_tflops * 1e12 * profile.flops_efficiency * scale)
    launch_s = model.num_layers * profile.launch_s_per_layer
    fixed_s = profile.fixed_s if role == "target" else profile.draft_fixed_s
    parts: dict[Bound, float] = {"memory": memory_s, "compute": compute_s, "overhead": launch_s}
    bound = max(parts, key=lambda k: parts[k])
    return ForwardCost(
        seconds=parts[bound] + fixed_s,
        memory_seconds=memory_s,
        compute_seconds=compute_s,
        overhead_seconds=launch_s + fixed_s,
        bound=bound,
        bytes_moved=bytes_moved,
        flops=flops,
    )


def verify_cost_ratio(
    model: ModelShape,
    hw: HardwareLike,
    batch: int,
    k: int,
    context_len: int,
    engine: str | EngineProfile = "sglang",
    num_devices: int = 1,
    *,
    calibration: Mapping[str, float] | None = None,
) -> float:
    """v = time(B sequences × k tokens) / time(B × 1 token): ≈ 1 while memory-bound, → k once
    compute-bound. This is the batch-size term of S = E[L] / (N·c + v)."""
    verify = forward_time(model, hw, batch, k, context_len, engine, num_devices, calibration=calibration)
    plain = forward_time(model, hw, batch, 1, context_len, engine, num_devices, calibration=calibration)
    return verify.seconds / plain.seconds

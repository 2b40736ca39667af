"""Forward-time curve under load: t(tokens in flight, sequences, context) per engine and hardware.

The roofline (``policies.roofline``) takes max(memory, compute) with constant efficiencies, so a
verify forward stays free until the ridge point and then jumps. Measured engines do not behave like
that (``policies/data/forward_time_facts.md``): GEMM time bends upward well before the ridge (a knee
between 128 and 256 tokens on H100, vLLM PR #49363), graph engines pad to the next captured size
(a staircase), the speculative path costs more as concurrency grows (vLLM issue #49548), and a
draft costs per request, not per token. Timed on one H200 under CUDA graphs
(``policies/data/h200_forward/``), a forward also pays a latency per decoder layer beside its bytes,
and a little more per layer once its sequences carry more than one new token (a verify forward).
This module models each of those parts:

    t = fixed + softmax_p(weight_stream, gemm) + softmax_p(kv_stream, attention) + activations
              + layers · (layer latency [+ verify latency when k > 1]) [+ allreduce latency under TP]
    (graph engines: GEMM tokens padded to the next captured size; beyond it, launches exposed)

where ``softmax_p(a, b) = (a^p + b^p)^(1/p)`` is the smooth knee (p → ∞ is the roofline's max).
Every constant comes from ``policies/data/loadcurve.json``, which says for each whether it was
fitted (to what) or is an assumption, with its source.

    >>> from types import SimpleNamespace
    >>> from policies.roofline import ModelShape
    >>> h100 = SimpleNamespace(memory_bandwidth_gbps=3350.0, bf16_tflops=989.0)
    >>> llama8b = ModelShape.from_params(8.03e9)
    >>> padded = forward(llama8b, h100, tokens=121, seqs=121, context_len=512, engine="vllm")
    >>> padded.padded_tokens  # vLLM pads 121 tokens to its 128-token CUDA graph
    128
    >>> one = load_step_cost("target_layer", llama8b, h100, 1, 3, 4, 512, "vllm")
    >>> many = load_step_cost("target_layer", llama8b, h100, 128, 3, 4, 512, "vllm")
    >>> many.step_ratio > one.step_ratio  # verification stops being free under load
    True
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from picker.engine.plugins import DraftCost
from policies.costmodel import (
    CATCH_UP_FORWARDS,
    DEFAULT_DRAFT_FRACTION,
    DRAFT_HOST_TERMS,
    StepCost,
    eagle_layer_shape,
    medusa_heads_shape,
)
from policies.roofline import LOGIT_BYTES, HardwareLike, ModelShape

CONSTANTS_PATH = Path(__file__).parent / "data" / "loadcurve.json"
Regime = Literal["overhead", "memory", "knee", "compute", "kv", "eager"]
Role = Literal["target", "draft"]


@dataclass(frozen=True)
class EngineCurve:
    """The constants of one engine's forward-time curve (values from ``loadcurve.json``)."""

    name: str
    bw_efficiency: float  # achieved / peak bandwidth when streaming weights and KV
    gemm_efficiency: float  # achieved / peak dense FLOP/s of large GEMMs (the curve's asymptote)
    knee_p: float  # sharpness of the memory → compute knee (softmax exponent)
    fixed_s: float  # per target forward: scheduling, sampling, host sync
    draft_fixed_s: float  # per draft forward
    launch_s_per_layer: float  # host time to issue one layer's kernels when not in a CUDA graph
    layer_latency_s: float  # GPU time a decoder layer adds to its bytes and FLOPs (its kernels' latency)
    verify_layer_s: float  # what a layer adds when its sequences carry more than one new token each
    lookup_s_per_seq: float  # host-side n-gram lookup per sequence per step
    tp_efficiency: float  # bandwidth / FLOP/s kept per device under tensor parallelism
    allreduce_s: float  # latency of one allreduce (two per decoder layer under TP)
    spec_overhead_base: float  # speculative path overhead at concurrency 1, fraction of a plain step
    spec_overhead_per_log_c: float  # its growth per e-fold of concurrency
    host_s_per_seq: float  # host work of every decode step per sequence (sampling, emitting), outside the forward
    spec_host_s_per_seq: float  # host work of a speculative step per sequence (verify, rollback), beyond plain's
    draft_host_s_per_seq: float  # a draft model's host work per sequence per draft forward (choose, plan)
    layer_host_s_per_seq: float  # the same for an EAGLE layer's drafter (its tree's bookkeeping)
    heads_host_s_per_seq: float  # Medusa heads' host work per sequence per step (filling the tree)
    # What sampling (temperature > 0) adds to each on an eager loop: the warp of every distribution,
    # the rejection test and residual of every node, each drafter's own draws.
    sampling_host_s_per_seq: float
    sampling_spec_host_s_per_seq: float
    sampling_draft_host_s_per_seq: float
    sampling_layer_host_s_per_seq: float
    sampling_heads_host_s_per_seq: float
    capture: tuple[int, ...]  # CUDA-graph sizes (empty: eager engine)
    pad_on: Literal["tokens", "batch"]  # what the graph sizes count
    provenance: tuple[tuple[str, str], ...]  # (constant, "fitted: ... | assumption: ...")

    def describe(self) -> dict[str, dict[str, Any]]:
        """Every numeric constant with its value and where it comes from (for reports)."""
        prov = dict(self.provenance)
        return {f.name: {"value": getattr(self, f.name), "from": prov.get(f.name, "unknown")}
                for f in dataclasses.fields(self) if f.type in ("float", float)}


def _capture(rule: Mapping[str, Any]) -> tuple[int, ...]:
    """Graph sizes from a rule in the constants file: explicit ``sizes`` plus ``range`` [lo, hi, step]."""
    sizes = {int(s) for s in rule.get("sizes", ())}
    if "range" in rule:
        lo, hi, step = (int(v) for v in rule["range"])
        sizes.update(range(lo, hi + 1, step))
    return tuple(sorted(sizes))


@functools.lru_cache(maxsize=8)
def _load(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        data: dict[str, Any] = json.load(fh)
    return data


# A calibration file (``policies.calibration``, roofline field names) maps onto the curve's names.
CALIBRATION_NAMES = {"flops_efficiency": "gemm_efficiency"}


def engine_curve(
    engine: str, overrides: Mapping[str, float] | None = None, path: Path = CONSTANTS_PATH,
    *, label: str = "override (calibration fit)",
) -> EngineCurve:
    """The curve of ``engine``: the file's ``default`` constants, its engine section on top, then
    ``overrides`` (numeric constants, recorded as ``label`` in the provenance; roofline calibration
    names such as ``flops_efficiency`` are accepted, see :data:`CALIBRATION_NAMES`)."""
    if not overrides:
        return _shipped_curve(engine, str(path))  # the scorer asks thousands of times per decision
    return _build_curve(engine, overrides, path, label)


@functools.lru_cache(maxsize=32)
def _shipped_curve(engine: str, path: str) -> EngineCurve:
    """The file's curve for ``engine``, built once (``_load`` caches the file itself)."""
    return _build_curve(engine, None, Path(path), "")


def _build_curve(
    engine: str, overrides: Mapping[str, float] | None, path: Path, label: str
) -> EngineCurve:
    data = _load(str(path))
    if engine not in data["engines"]:
        raise ValueError(f"unknown engine {engine!r}; known: {', '.join(sorted(data['engines']))}")
    merged: dict[str, dict[str, Any]] = {**data["default"], **data["engines"][engine]["constants"]}
    values = {k: float(v["value"]) for k, v in merged.items()}
    prov = {k: f"{v['kind']}: {v['source']}" for k, v in merged.items()}
    for name, value in (overrides or {}).items():
        key = CALIBRATION_NAMES.get(name, name)
        if key not in values:
            raise ValueError(f"unknown curve constant {name!r}; known: {', '.join(sorted(values))}")
        values[key] = float(value)
        prov[key] = label
    graphs = data["engines"][engine].get("graphs", {})
    return EngineCurve(
        name=engine, capture=_capture(graphs), pad_on=graphs.get("pad_on", "tokens"),
        provenance=tuple(sorted(prov.items())), **values,
    )


def engine_defines(engine: str, path: Path = CONSTANTS_PATH) -> frozenset[str]:
    """Constants ``engine``'s own section sets (the rest come from the file's defaults)."""
    return frozenset(_load(str(path))["engines"][engine]["constants"])


def engines(path: Path = CONSTANTS_PATH) -> tuple[str, ...]:
    """Engine sections in the constants file."""
    return tuple(sorted(_load(str(path))["engines"]))


@dataclass(frozen=True)
class ForwardTime:
    """One forward's seconds, its parts, and the regime it is in."""

    seconds: float
    weight_seconds: float  # streaming the weights once
    gemm_seconds: float  # dense FLOPs of the (padded) tokens at the GEMM asymptote
    kv_seconds: float  # streaming the KV cache of every sequence
    overhead_seconds: float  # fixed + launch
    padded_tokens: int
    regime: Regime
    layer_seconds: float = 0.0  # the layers' own latency (kernel latency, the verify path's extra)

    @property
    def bound(self) -> Literal["memory", "compute", "overhead"]:
        """The roofline's coarser label: compute once GEMM time exceeds weight + KV streaming."""
        if self.overhead_seconds > 0.5 * self.seconds:
            return "overhead"
        return "compute" if self.gemm_seconds > self.weight_seconds + self.kv_seconds else "memory"


def softmax_p(a: float, b: float, p: float) -> float:
    """(a^p + b^p)^(1/p): equals max(a, b) as p → ∞; at a = b it is 2^(1/p)·a, a smooth knee."""
    top = max(a, b)
    if top <= 0.0:
        return 0.0
    return top * ((a / top) ** p + (b / top) ** p) ** (1.0 / p)


def pad(curve: EngineCurve, tokens: int, seqs: int) -> tuple[int, bool]:
    """Tokens the GEMMs run over after CUDA-graph padding, and whether a graph was used.

    Graph engines capture fixed sizes and pad to the next one up (121 tokens pay for 128); above
    the largest captured size they run eagerly (no padding, but kernel launches are exposed).
    """
    if not curve.capture:
        return tokens, False
    count = tokens if curve.pad_on == "tokens" else seqs
    i = bisect.bisect_left(curve.capture, count)
    if i == len(curve.capture):
        return tokens, False
    if curve.pad_on == "tokens":
        return curve.capture[i], True
    return curve.capture[i] * max(1, tokens // max(seqs, 1)), True


def forward(
    model: ModelShape, hw: HardwareLike, tokens: int, seqs: int, context_len: int,
    engine: str | EngineCurve = "vllm", num_devices: int = 1, *, role: Role = "target",
) -> ForwardTime:
    """Seconds of one forward over ``tokens`` new tokens of ``seqs`` sequences at ``context_len``.

    GEMMs and attention run as separate kernels, so their two knees add rather than take a max
    (the additive KV term of the SmartSpec / SpecDecode-Bench linear models); each knee is the
    smooth ``softmax_p`` of streaming time and compute time.
    """
    if tokens < 1 or seqs < 1 or context_len < 0 or num_devices < 1:
        raise ValueError("tokens, seqs and num_devices must be >= 1, context_len >= 0")
    curve = engine if isinstance(engine, EngineCurve) else engine_curve(engine)
    scale = 1.0 if num_devices == 1 else num_devices * curve.tp_efficiency
    bandwidth = hw.memory_bandwidth_gbps * 1e9 * curve.bw_efficiency * scale
    flops = hw.bf16_tflops * 1e12 * curve.gemm_efficiency * scale
    padded, graphed = pad(curve, tokens, seqs)
    weight_s = model.weight_bytes / bandwidth
    gemm_s = 2.0 * model.params * padded / flops
    kv_s = seqs * context_len * model.kv_bytes_per_token / bandwidth
    per_seq = max(1.0, tokens / seqs)
    attention_s = 4.0 * model.num_layers * model.hidden_size * tokens * (context_len + per_seq) / flops
    # Logits (fp32) and new KV entries are written once per token, never reused: pure streaming.
    act_s = tokens * (model.vocab_size * LOGIT_BYTES + model.kv_bytes_per_token) / bandwidth
    # A layer's kernels each take some microseconds beside what they read, one after another, so a
    # deep small draft (Llama-3.2-1B: 16 layers) costs more than its bytes say (H200: 0.28 of an 8B
    # step, not its 0.15 of the bytes); a forward whose sequences carry several new tokens runs the
    # multi-token attention and GEMM path, a little dearer per layer even at batch 1 (H200: +4-8%).
    per_layer = curve.layer_latency_s + (curve.verify_layer_s if tokens > seqs else 0.0)
    layer_s = model.num_layers * per_layer
    gpu_s = (softmax_p(weight_s, gemm_s, curve.knee_p) + softmax_p(kv_s, attention_s, curve.knee_p)
             + act_s + layer_s)
    if num_devices > 1:
        gpu_s += 2.0 * model.num_layers * curve.allreduce_s  # two allreduces per decoder layer
    launch_s = 0.0 if graphed else model.num_layers * curve.launch_s_per_layer
    fixed_s = curve.fixed_s if role == "target" else curve.draft_fixed_s
    seconds = max(gpu_s, launch_s) + fixed_s  # launches are asynchronous: hidden unless longer
    # A forward whose layers' latency outweighs its bytes is latency-bound: overhead for its regime.
    overhead_s = launch_s + fixed_s + layer_s
    regime = _regime(weight_s, gemm_s, kv_s + attention_s, overhead_s, seconds, graphed, curve)
    return ForwardTime(seconds, weight_s, gemm_s, kv_s, fixed_s + launch_s, padded, regime, layer_s)


def _regime(
    weight_s: float, gemm_s: float, kv_s: float, overhead_s: float, seconds: float, graphed: bool,
    curve: EngineCurve,
) -> Regime:
    """Name the part that sets the time; the knee is where GEMM time is within 2x of streaming."""
    if overhead_s > 0.5 * seconds:
        return "overhead"
    if curve.capture and not graphed:
        return "eager"
    if kv_s > max(weight_s, gemm_s):
        return "kv"
    ratio = gemm_s / weight_s if weight_s > 0 else math.inf
    if ratio < 0.5:
        return "memory"
    return "knee" if ratio < 2.0 else "compute"


def spec_overhead_fraction(curve: EngineCurve, concurrency: int) -> float:
    """The speculative path's own cost as a fraction of a plain step at ``concurrency``.

    Grows with log concurrency: fitted to vLLM issue #49548 (+6.6% TPOT at concurrency 2, +21.6% at
    189, drafting disabled: scheduling, metadata and rejection-sampler work per request).
    """
    return max(0.0, curve.spec_overhead_base + curve.spec_overhead_per_log_c * math.log(max(concurrency, 1)))


@dataclass(frozen=True)
class LoadStepCost(StepCost):
    """A :class:`StepCost` from the load curve; ``verify_seconds`` includes the speculative path's
    overhead, so ``step_ratio`` and ``predict_speedup`` need no change."""

    regime: Regime = "memory"
    plain_regime: Regime = "memory"
    padded_tokens: int = 0
    spec_overhead_seconds: float = 0.0
    engine: str = ""
    constants: tuple[tuple[str, str], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out["constants"] = dict(self.constants)
        return out


def host_per_seq(curve: EngineCurve, name: str, sampled: bool) -> float:
    """Host constant ``name`` of ``curve``, plus its ``sampling_`` twin when ``sampled``."""
    return getattr(curve, name) + (getattr(curve, f"sampling_{name}") if sampled else 0.0)


def draft_seconds(
    kind: DraftCost, target: ModelShape, hw: HardwareLike, batch: int, n_draft: int, steps: int,
    context_len: int, curve: EngineCurve, draft: ModelShape | None = None, num_devices: int = 1,
    draft_context_len: int | None = None, sampled: bool = False,
) -> float:
    """Draft time of one step for ``batch`` requests: a draft model's or EAGLE layer's own curve
    (``steps`` sequential forwards plus a catch-up forward), Medusa heads once, host-side lookup
    per sequence, nothing for lookahead (its guesses ride in the verify forward). A model drafter
    pays its host work per sequence per forward, more when ``sampled`` (temperature > 0)."""
    if n_draft <= 0 or kind == "in_forward":
        return 0.0
    if kind == "cpu_lookup":
        return batch * curve.lookup_s_per_seq
    ctx = context_len if draft_context_len is None else draft_context_len
    # An eager drafter picks each sequence's tokens on the host (and, sampling, warps and draws them);
    # what that costs depends on the drafter, so each kind has its own term.
    host = batch * host_per_seq(curve, DRAFT_HOST_TERMS[kind], sampled)
    if kind == "heads":
        heads = medusa_heads_shape(target, steps)
        return forward(heads, hw, batch, batch, 0, curve, num_devices, role="draft").seconds + host
    if kind == "draft_model":
        shape = draft if draft is not None else ModelShape.from_params(
            target.params * DEFAULT_DRAFT_FRACTION, target.bytes_per_param)
    else:
        shape = eagle_layer_shape(target)
    per_step = max(1, math.ceil(n_draft / max(steps, 1)))
    step = forward(shape, hw, batch * per_step, batch, ctx, curve, num_devices, role="draft").seconds
    catch_up = forward(shape, hw, batch, batch, ctx, curve, num_devices, role="draft").seconds
    return steps * (step + host) + CATCH_UP_FORWARDS * (catch_up + host)


def load_step_cost(
    kind: DraftCost, target: ModelShape, hw: HardwareLike, batch: int, n_draft: int,
    num_verify_tokens: int, context_len: int, engine: str | EngineCurve = "vllm",
    draft: ModelShape | None = None, tree_depth: int | None = None, num_devices: int = 1,
    *, draft_context_len: int | None = None, sampled: bool = False,
) -> LoadStepCost:
    """One speculative step for ``batch`` sequences on the load curve (same arguments and meaning
    as :func:`policies.costmodel.step_cost`, which it replaces under load).

    ``plain_seconds`` is one plain decode step (``batch`` tokens); ``verify_seconds`` is the verify
    forward over ``batch × num_verify_tokens`` tokens plus the speculative path's overhead at this
    concurrency; ``draft_context_len`` is the draft's own KV length (e.g. a StreamingLLM window);
    ``sampled`` (temperature > 0) adds the ``sampling_*`` host terms, which only an eager loop has.
    """
    if n_draft < 0 or num_verify_tokens < 1 or batch < 1:
        raise ValueError("n_draft must be >= 0, num_verify_tokens and batch >= 1")
    curve = engine if isinstance(engine, EngineCurve) else engine_curve(engine)
    plain = forward(target, hw, batch, batch, context_len, curve, num_devices)
    verify = forward(target, hw, batch * num_verify_tokens, batch, context_len, curve, num_devices)
    overhead = spec_overhead_fraction(curve, batch) * plain.seconds
    if n_draft:  # an eager loop verifies and rolls back sequence by sequence on the host
        overhead += batch * host_per_seq(curve, "spec_host_s_per_seq", sampled)
    host = batch * host_per_seq(curve, "host_s_per_seq", sampled)  # every step, plain or speculative, pays it
    steps = tree_depth if tree_depth is not None else n_draft
    if kind in ("heads", "cpu_lookup"):
        steps = 1 if n_draft else 0
    elif kind == "in_forward":
        steps = 0
    draft_s = draft_seconds(kind, target, hw, batch, n_draft, steps, context_len, curve, draft,
                            num_devices, draft_context_len, sampled)
    return LoadStepCost(
        kind, draft_s, verify.seconds + overhead + host, plain.seconds + host, n_draft, num_verify_tokens, steps,
        bound=verify.bound,
        regime=verify.regime, plain_regime=plain.regime, padded_tokens=verify.padded_tokens,
        spec_overhead_seconds=overhead, engine=curve.name, constants=curve.provenance,
    )


def with_constants(curve: EngineCurve, **values: float) -> EngineCurve:
    """A copy of ``curve`` with some numeric constants replaced (marked as overrides)."""
    prov = dict(curve.provenance)
    prov.update(dict.fromkeys(values, "override (calibration fit)"))
    return dataclasses.replace(curve, provenance=tuple(sorted(prov.items())), **values)

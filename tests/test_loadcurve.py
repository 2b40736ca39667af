"""The load curve: shapes the sources report (knee, staircase, overhead, draft per request), the
provenance of every constant, and the published-curve bench's protocol (SGLang never fitted)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import pytest

from policies.loadcurve import (
    CONSTANTS_PATH,
    engine_curve,
    engines,
    forward,
    load_step_cost,
    softmax_p,
    spec_overhead_fraction,
)
from policies.roofline import ModelShape


@dataclass(frozen=True)
class FakeHardware:
    memory_bandwidth_gbps: float = 3350.0  # H100 SXM datasheet
    bf16_tflops: float = 989.0


H100 = FakeHardware()
LLAMA8B = ModelShape.from_params(8.03e9)
LLAMA70B = ModelShape.from_params(70.6e9)


def _t(tokens: int, engine: str = "vllm", seqs: int | None = None, ctx: int = 0) -> float:
    return forward(LLAMA8B, H100, tokens, seqs or tokens, ctx, engine).seconds


def test_softmax_is_a_smooth_max() -> None:
    assert softmax_p(3.0, 1.0, 200.0) == pytest.approx(3.0, rel=1e-3)
    assert softmax_p(2.0, 2.0, 3.0) == pytest.approx(2.0 * 2 ** (1 / 3))
    assert softmax_p(0.0, 0.0, 3.0) == 0.0
    assert max(2.0, 1.0) < softmax_p(2.0, 1.0, 3.0) < 2.0 + 1.0


def test_knee_flat_then_rising_without_a_jump() -> None:
    # vLLM PR #49363: flat to ~128 tokens on H100, bending upward by 256; no step from a hard max.
    # gpt_fast: graphs captured for the exact shape (no padding, no exposed launches): the bare knee.
    times = {n: _t(n, "gpt_fast") for n in (1, 16, 64, 128, 256, 512, 1024, 2048)}
    assert times[64] < 1.10 * times[1]
    assert times[512] > 1.5 * times[1]
    ns = sorted(times)
    for a, b in zip(ns, ns[1:]):
        assert times[a] <= times[b] <= 2.0 * times[a]  # doubling tokens at most doubles time
    # Not a hard max: where GEMM time meets weight streaming, the forward costs clearly more than either.
    ridge = min((forward(LLAMA8B, H100, n, n, 0, "gpt_fast") for n in range(100, 1000, 4)),
                key=lambda f: abs(math.log(f.gemm_seconds / f.weight_seconds)))
    assert ridge.seconds > 1.15 * max(ridge.weight_seconds, ridge.gemm_seconds)


def test_graph_engine_pads_to_the_next_captured_size() -> None:
    # DSpark blog: inside the captured range cost is a staircase; 121 tokens pay for 128.
    assert forward(LLAMA8B, H100, 121, 121, 0, "vllm").padded_tokens == 128
    at = {n: forward(LLAMA8B, H100, n, n, 0, "vllm") for n in (121, 128, 129)}
    assert at[121].gemm_seconds == at[128].gemm_seconds  # padded rows cost full GEMM time
    assert _t(121) == pytest.approx(_t(128), rel=1e-3)  # only logits of real rows differ
    assert _t(129) > _t(128)
    beyond = forward(LLAMA8B, H100, 2048, 512, 0, "vllm")
    assert beyond.padded_tokens == 2048 and beyond.regime == "eager"


def test_regimes_follow_tokens_and_context() -> None:
    assert forward(LLAMA8B, H100, 1, 1, 512, "vllm").regime == "memory"
    assert forward(LLAMA8B, H100, 512, 128, 512, "vllm").regime in ("knee", "compute")
    assert forward(LLAMA8B, H100, 64, 64, 32000, "vllm").regime == "kv"


def test_spec_overhead_matches_its_source_and_grows() -> None:
    vllm = engine_curve("vllm")
    # vLLM issue #49548: +6.56% TPOT at concurrency 2, +21.58% at 189 (K=0).
    assert spec_overhead_fraction(vllm, 2) == pytest.approx(0.0656, abs=2e-3)
    assert spec_overhead_fraction(vllm, 189) == pytest.approx(0.2158, abs=2e-3)
    assert spec_overhead_fraction(engine_curve("hf"), 128) == 0.0


def test_draft_cost_by_strategy_against_requests() -> None:
    def cost(kind: str, batch: int) -> float:
        return load_step_cost(kind, LLAMA8B, H100, batch, 3, 4, 512, "vllm").draft_seconds  # type: ignore[arg-type]
    # Host-side n-gram lookup: linear in requests, far below a forward.
    assert cost("cpu_lookup", 128) == pytest.approx(128 * cost("cpu_lookup", 1))
    assert cost("cpu_lookup", 128) < 0.1 * _t(1)
    # EAGLE layer and draft model: per-request cost falls with batch (fixed costs amortise) ...
    for kind in ("target_layer", "draft_model"):
        assert cost(kind, 256) / 256 < 0.2 * cost(kind, 1)
    # ... and EAGLE's share of the step shrinks with batch (arXiv:2601.11580 Fig. 4: ~25% -> ~10%).
    share = [load_step_cost("target_layer", LLAMA8B, H100, b, 3, 4, 512, "vllm") for b in (1, 128)]
    assert (share[1].draft_seconds / (share[1].draft_seconds + share[1].verify_seconds)
            < share[0].draft_seconds / (share[0].draft_seconds + share[0].verify_seconds))
    assert cost("in_forward", 64) == 0.0


def test_tensor_parallel_pays_allreduce_latency() -> None:
    one = forward(LLAMA70B, H100, 1, 1, 512, "vllm")
    four = forward(LLAMA70B, H100, 1, 1, 512, "vllm", num_devices=4)
    assert one.seconds / 4 < four.seconds < one.seconds


def test_every_constant_says_where_it_comes_from() -> None:
    data = json.loads(CONSTANTS_PATH.read_text())
    sections = [data["default"]] + [e["constants"] for e in data["engines"].values()]
    for section in sections:
        for name, entry in section.items():
            assert entry["kind"] in ("fitted", "assumption"), name
            assert len(entry["source"]) > 20 and "PLACEHOLDER" not in entry["source"], name
    for engine in engines():
        curve = engine_curve(engine)
        assert all(v["from"] != "unknown" for v in curve.describe().values())


def test_overrides_map_calibration_names_and_reject_unknown() -> None:
    curve = engine_curve("hf", {"flops_efficiency": 0.3}, label="calibrated")
    assert curve.gemm_efficiency == 0.3 and dict(curve.provenance)["gemm_efficiency"] == "calibrated"
    with pytest.raises(ValueError, match="unknown curve constant"):
        engine_curve("vllm", {"warp_speed": 9.0})
    with pytest.raises(ValueError, match="unknown engine"):
        engine_curve("tgi")


def test_estimate_falls_with_batch_on_the_issue_example() -> None:
    from policies.estimation import estimate

    runs = [estimate("target_layer", model_params=8.03e9, hardware=H100, alpha=0.7, num_draft_tokens=3,
                     engine="vllm", batch_size=b) for b in (1, 16, 64, 128)]
    speed = [r["speedup"] for r in runs]
    assert speed[0] > speed[1] > speed[2] > speed[3]  # the roofline had 1.83 < 1.86 < 1.94
    assert speed[3] < 0.9 * speed[0]
    assert runs[0]["regime"] == "memory" and runs[3]["regime"] in ("knee", "compute")
    assert runs[3]["break_even_alpha"] > runs[0]["break_even_alpha"]
    assert set(runs[0]["curve_constants"]) >= {"gemm_efficiency", "knee_p", "spec_overhead_base"}


def test_deep_small_draft_pays_a_per_layer_latency() -> None:
    # arXiv:2601.11580 Fig. 4: a Qwen3-0.6B draft is ~47% of a Qwen3-8B step at batch 1, far more
    # than its bytes (~7% of the target's) explain: its 28 layers' latency is most of its time.
    small = ModelShape.from_params(0.6e9)
    ft = forward(small, H100, 1, 1, 512, "vllm", role="draft")
    assert ft.seconds - ft.overhead_seconds > 2.0 * ft.weight_seconds
    assert ft.layer_seconds > 0.5 * ft.seconds and ft.regime == "overhead"
    assert ft.seconds > 0.15 * forward(ModelShape.from_params(8.19e9), H100, 1, 1, 512, "vllm").seconds


def test_verifying_several_tokens_per_sequence_is_not_free_at_small_batch() -> None:
    # H200 timings: t(B, 4) / t(B, 1) is 1.08 at B = 1, 1.06 at 4, 1.05 at 8 (the multi-token kernels);
    # one token per sequence at a larger batch (the same tokens in flight) pays no such term.
    gpt = "gpt_fast"  # graphs for the exact shape: no padding in the way
    for batch in (1, 4, 8):
        v = forward(LLAMA8B, H100, 4 * batch, batch, 1024, gpt).seconds / forward(LLAMA8B, H100, batch, batch, 1024,
                                                                                    gpt).seconds
        assert 1.03 < v < 1.12, batch
    wide = forward(LLAMA8B, H100, 4, 4, 0, gpt)
    assert wide.layer_seconds == forward(LLAMA8B, H100, 1, 1, 0, gpt).layer_seconds
    assert forward(LLAMA8B, H100, 4, 1, 0, gpt).layer_seconds > wide.layer_seconds


def test_host_work_per_sequence_is_paid_by_every_step_and_the_speculative_path() -> None:
    """An eager loop's host work: ``host_s_per_seq`` on plain and speculative steps alike (so it
    dilutes the verify forward's rise), ``spec_host_s_per_seq`` only where something was drafted."""
    from policies.loadcurve import with_constants

    base = engine_curve("hf")
    loop = with_constants(base, host_s_per_seq=1e-4, spec_host_s_per_seq=5e-5)
    for batch in (1, 16):
        a = load_step_cost("cpu_lookup", LLAMA8B, H100, batch, 4, 5, 512, base)
        b = load_step_cost("cpu_lookup", LLAMA8B, H100, batch, 4, 5, 512, loop)
        assert b.plain_seconds - a.plain_seconds == pytest.approx(batch * 1e-4)
        assert b.verify_seconds - a.verify_seconds == pytest.approx(batch * 1.5e-4)
    off = load_step_cost("cpu_lookup", LLAMA8B, H100, 16, 0, 1, 512, loop)
    assert off.verify_seconds == pytest.approx(off.plain_seconds)  # nothing drafted: a plain step
    assert base.host_s_per_seq == base.spec_host_s_per_seq == 0.0  # assumptions until calibrated


def test_a_model_drafter_pays_its_host_work_per_sequence_per_draft_forward() -> None:
    """An eager drafter chooses every sequence's draft tokens on the host, once per draft forward
    (each depth of the chain and the catch-up; Medusa's one head pass), at a cost of its own: a draft
    model pays ``draft_host_s_per_seq``, an EAGLE layer ``layer_host_s_per_seq``, Medusa heads
    ``heads_host_s_per_seq``, each only its own; the n-gram lookup and lookahead have no draft forward."""
    from policies.costmodel import CATCH_UP_FORWARDS, DRAFT_HOST_TERMS, step_cost
    from policies.loadcurve import draft_seconds, with_constants

    base = engine_curve("hf")
    for batch in (1, 16):
        for kind, forwards in (("draft_model", 4 + CATCH_UP_FORWARDS), ("target_layer", 4 + CATCH_UP_FORWARDS),
                               ("heads", 1)):
            own = DRAFT_HOST_TERMS[kind]
            others = {DRAFT_HOST_TERMS[k]: 1.0 for k in DRAFT_HOST_TERMS if k != kind}
            eager = with_constants(base, **{own: 1e-4}, **others)
            extra = (draft_seconds(kind, LLAMA8B, H100, batch, 4, 4, 512, eager)
                     - draft_seconds(kind, LLAMA8B, H100, batch, 4, 4, 512, with_constants(base, **others)))
            assert extra == pytest.approx(batch * forwards * 1e-4), kind
            # the batch-1 cost model charges the same, and another drafter's term not at all
            before = step_cost(kind, LLAMA8B, H100, batch, 4, 5, 512, "hf", calibration=others).draft_seconds
            after = step_cost(kind, LLAMA8B, H100, batch, 4, 5, 512, "hf",
                              calibration={own: 1e-4, **others}).draft_seconds
            assert after - before == pytest.approx(batch * forwards * 1e-4), kind
            assert before == step_cost(kind, LLAMA8B, H100, batch, 4, 5, 512, "hf").draft_seconds, kind
        terms = [n for name in DRAFT_HOST_TERMS.values() for n in (name, f"sampling_{name}")]
        eager = with_constants(base, **dict.fromkeys(terms, 1e-4))
        for kind in ("cpu_lookup", "in_forward"):
            assert (draft_seconds(kind, LLAMA8B, H100, batch, 4, 1, 512, eager, sampled=True)
                    == draft_seconds(kind, LLAMA8B, H100, batch, 4, 1, 512, base))
    assert all(getattr(base, n) == 0.0 for name in DRAFT_HOST_TERMS.values() for n in (name, f"sampling_{name}"))


def test_sampling_adds_its_host_terms_only_when_sampled() -> None:
    """At temperature > 0 an eager loop warps every distribution and draws on the host: the
    ``sampling_*`` terms add to plain steps, speculative steps and draft forwards, and only then."""
    from policies.costmodel import CATCH_UP_FORWARDS
    from policies.loadcurve import with_constants

    base = engine_curve("hf")
    loop = with_constants(base, sampling_host_s_per_seq=1e-4, sampling_spec_host_s_per_seq=2e-4,
                          sampling_draft_host_s_per_seq=3e-4)
    for batch in (1, 16):
        greedy = load_step_cost("draft_model", LLAMA8B, H100, batch, 4, 5, 512, loop)
        plain = load_step_cost("draft_model", LLAMA8B, H100, batch, 4, 5, 512, base)
        # the curves' provenance differs; their seconds may not
        assert (greedy.plain_seconds, greedy.verify_seconds, greedy.draft_seconds) == (
            plain.plain_seconds, plain.verify_seconds, plain.draft_seconds)
        sampled = load_step_cost("draft_model", LLAMA8B, H100, batch, 4, 5, 512, loop, sampled=True)
        assert sampled.plain_seconds - greedy.plain_seconds == pytest.approx(batch * 1e-4)
        assert sampled.verify_seconds - greedy.verify_seconds == pytest.approx(batch * 3e-4)
        assert sampled.draft_seconds - greedy.draft_seconds == pytest.approx(batch * (4 + CATCH_UP_FORWARDS) * 3e-4)
    heads = with_constants(base, sampling_heads_host_s_per_seq=5e-4, sampling_draft_host_s_per_seq=1.0)
    for batch in (1, 16):  # Medusa's draws: once per step, its own term
        greedy = load_step_cost("heads", LLAMA8B, H100, batch, 4, 5, 512, heads)
        sampled = load_step_cost("heads", LLAMA8B, H100, batch, 4, 5, 512, heads, sampled=True)
        assert sampled.draft_seconds - greedy.draft_seconds == pytest.approx(batch * 5e-4)
    assert base.sampling_host_s_per_seq == base.sampling_spec_host_s_per_seq == 0.0  # assumptions until calibrated

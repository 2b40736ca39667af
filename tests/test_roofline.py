"""Roofline model of one forward: behaviour checks, not magic numbers."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from policies.roofline import (
    ENGINES,
    ModelShape,
    forward_time,
    resolve_engine,
    verify_cost_ratio,
)


@dataclass(frozen=True)
class FakeHardware:
    """Stand-in with the two fields the roofline reads (H100 SXM datasheet figures)."""

    memory_bandwidth_gbps: float = 3350.0
    bf16_tflops: float = 989.0


H100 = FakeHardware()
LLAMA8B = ModelShape.from_params(8e9)
LLAMA70B = ModelShape.from_params(70e9)


def test_kv_bytes_per_token_of_llama3_8b() -> None:
    assert LLAMA8B.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2  # 128 KiB per token in bf16


@pytest.mark.parametrize("params, family, layers", [
    (68e6, "llama-68m", 2), (1.2e9, "llama-3.2-1b", 16), (7e9, "llama-2-7b", 32),
    (8e9, "llama-3-8b", 32), (70e9, "llama-3-70b", 80), (400e9, "llama-3.1-405b", 126),
])
def test_from_params_picks_nearest_family_and_keeps_params(
    params: float, family: str, layers: int
) -> None:
    shape = ModelShape.from_params(params, bytes_per_param=1.0)
    assert shape.name == f"{family}-like" and shape.num_layers == layers
    assert shape.params == params and shape.weight_bytes == params


def test_invalid_shapes_rejected() -> None:
    with pytest.raises(ValueError):
        ModelShape(0.0, 1, 8, 1, 8, 10, 2.0)
    with pytest.raises(ValueError):
        ModelShape.from_params(-1.0)


def test_8b_batch1_is_memory_bound_and_verify_is_free() -> None:
    cost = forward_time(LLAMA8B, H100, batch=1, tokens_per_seq=8, context_len=1024)
    assert cost.bound == "memory" and cost.memory_seconds > 10 * cost.compute_seconds
    assert 1.0 <= verify_cost_ratio(LLAMA8B, H100, 1, 8, 1024) < 1.05


def test_8b_batch256_turns_compute_bound_and_ratio_grows() -> None:
    cost = forward_time(LLAMA8B, H100, batch=256, tokens_per_seq=8, context_len=1024)
    assert cost.bound == "compute"
    ratios = [verify_cost_ratio(LLAMA8B, H100, 256, k, 1024) for k in (1, 2, 4, 8, 16)]
    assert ratios[0] == pytest.approx(1.0)
    assert ratios == sorted(ratios) and ratios[-1] > 3.0
    batch1 = verify_cost_ratio(LLAMA8B, H100, 1, 8, 1024)
    assert verify_cost_ratio(LLAMA8B, H100, 256, 8, 1024) > batch1 + 1


def test_70b_decode_on_one_h100_is_about_42ms_of_memory() -> None:
    # 70.6e9 params x 2 bytes ≈ 141 GB; at 3.35 TB/s that is ≈ 42 ms (the page a decode step reads).
    ideal = forward_time(LLAMA70B, H100, 1, 1, 1024, calibration={"bw_efficiency": 1.0})
    assert ideal.memory_seconds == pytest.approx(140e9 / 3.35e12, rel=0.05)
    real = forward_time(LLAMA70B, H100, 1, 1, 1024)
    assert 0.03 < real.seconds < 0.08 and real.bound == "memory"


def test_longer_context_keeps_verification_cheap() -> None:
    # MagicDec: KV reads grow with context, pushing the compute ridge to larger batches.
    short = verify_cost_ratio(LLAMA8B, H100, 64, 8, 512)
    long = verify_cost_ratio(LLAMA8B, H100, 64, 8, 32768)
    assert long < short


@pytest.mark.parametrize("grid", [
    [(1, 2, 1024), (8, 2, 1024), (64, 2, 1024)],        # batch
    [(4, 1, 1024), (4, 4, 1024), (4, 32, 1024)],        # tokens per sequence
    [(4, 2, 0), (4, 2, 4096), (4, 2, 65536)],           # context length
])
def test_time_grows_with_batch_tokens_and_context(grid: list[tuple[int, int, int]]) -> None:
    times = [forward_time(LLAMA8B, H100, b, k, ctx).seconds for b, k, ctx in grid]
    assert times == sorted(times) and times[0] < times[-1]


def test_tensor_parallel_helps_but_sublinearly() -> None:
    one = forward_time(LLAMA70B, H100, 1, 1, 1024)
    four = forward_time(LLAMA70B, H100, 1, 1, 1024, num_devices=4)
    assert four.memory_seconds < one.memory_seconds / 2
    assert four.memory_seconds > one.memory_seconds / 4
    with pytest.raises(ValueError):
        forward_time(LLAMA70B, H100, 1, 1, 1024, num_devices=0)


def test_hf_eager_makes_small_models_overhead_bound() -> None:
    tiny = ModelShape.from_params(68e6)
    eager = forward_time(tiny, H100, 1, 1, 1024, engine="hf", role="draft")
    graphs = forward_time(tiny, H100, 1, 1, 1024, engine="sglang", role="draft")
    assert eager.seconds > 5 * graphs.seconds
    assert eager.overhead_seconds > eager.memory_seconds


def test_every_engine_gives_a_sane_decode_time() -> None:
    for name in ENGINES:
        cost = forward_time(LLAMA8B, H100, 1, 1, 1024, engine=name)
        # Ideal roofline 16 GB / 3.35 TB/s ≈ 4.8 ms; engines derate, none is 10x off.
        assert 0.0048 < cost.seconds < 0.05, name


def test_engine_resolution_and_calibration() -> None:
    with pytest.raises(ValueError, match="unknown engine"):
        resolve_engine("tgi")
    with pytest.raises(ValueError, match="calibration"):
        resolve_engine("sglang", {"warp_speed": 2.0})
    tuned = resolve_engine("sglang", {"fixed_s": 0.0, "bw_efficiency": 1.0})
    assert tuned.status == "calibrated" and tuned.fixed_s == 0.0
    fast = forward_time(LLAMA8B, H100, 1, 1, 1024, engine=tuned)
    slow = forward_time(LLAMA8B, H100, 1, 1, 1024, engine="sglang")
    assert fast.seconds < slow.seconds


def test_accepts_the_hardware_catalog_entry() -> None:
    hardware = pytest.importorskip("picker.inputs.hardware")
    hw = hardware.get_hardware("H100")
    via_catalog = forward_time(LLAMA8B, hw, 1, 1, 1024).seconds
    assert via_catalog == pytest.approx(forward_time(LLAMA8B, H100, 1, 1, 1024).seconds)

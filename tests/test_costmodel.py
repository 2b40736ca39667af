"""Per-strategy step costs and `estimate`: behaviour the literature reports, not magic numbers."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import cast

import pytest

from picker.engine.plugins import DraftCost
from policies import theory
from policies.costmodel import (
    DRAFT_COSTS,
    StepCost,
    predict_speedup,
    step_cost,
    tree_for_alpha,
)
from policies.estimation import estimate
from policies.roofline import ModelShape


@dataclass(frozen=True)
class FakeHardware:
    memory_bandwidth_gbps: float = 3350.0  # H100 SXM datasheet
    bf16_tflops: float = 989.0


H100 = FakeHardware()
TARGET_8B = ModelShape.from_params(8e9)
TARGET_7B = ModelShape.from_params(7e9)
DRAFT_68M = ModelShape.from_params(68e6)
BATCHES = (1, 8, 64, 128, 256, 512)


def _cost(kind: str, batch: int = 1, n: int = 4, num_verify_tokens: int | None = None) -> StepCost:
    verify = n + 1 if num_verify_tokens is None else num_verify_tokens
    # Unknown kinds must reach step_cost to be rejected, hence the cast rather than a Literal.
    return step_cost(cast(DraftCost, kind), TARGET_8B, H100, batch, n, verify, 1024, draft=DRAFT_68M)


@pytest.mark.parametrize("kind", DRAFT_COSTS)
def test_step_cost_identity_with_theory(kind: str) -> None:
    cost = _cost(kind)
    assert cost.plain_seconds > 0 and cost.verify_seconds >= cost.plain_seconds
    length = float(theory.expected_length_iid(0.7, 4))
    assert predict_speedup(length, cost) == pytest.approx(
        theory.speedup(length, cost.n_draft, cost.cost_ratio, cost.verify_ratio))
    json.dumps(cost.to_dict())


def test_draft_cost_kinds_order_as_expected() -> None:
    assert _cost("in_forward").draft_seconds == 0.0
    lookup, heads, model = _cost("cpu_lookup"), _cost("heads"), _cost("draft_model")
    assert lookup.cost_ratio < 0.01  # a host-side table lookup is nearly free
    assert heads.draft_steps == 1 and heads.draft_seconds < heads.plain_seconds
    assert model.draft_steps == 4 and model.draft_seconds > 4 * lookup.draft_seconds


def test_lookahead_tokens_ride_in_the_verify_forward() -> None:
    small = _cost("in_forward", batch=32, num_verify_tokens=5)
    wide = _cost("in_forward", batch=32, num_verify_tokens=57)
    assert wide.verify_ratio > small.verify_ratio


def test_unknown_kind_rejected() -> None:
    with pytest.raises(ValueError, match="draft cost kind"):
        _cost("telepathy")


def test_hf_draft_cost_far_exceeds_parameter_ratio() -> None:
    # Eager PyTorch: a 2-layer 68M draft is launch/overhead-bound, so c ≫ 68M / 7B.
    eager = step_cost("draft_model", TARGET_7B, H100, 1, 4, 5, 1024, "hf", draft=DRAFT_68M)
    graphs = step_cost("draft_model", TARGET_7B, H100, 1, 4, 5, 1024, "sglang", draft=DRAFT_68M)
    param_ratio = DRAFT_68M.params / TARGET_7B.params
    assert eager.cost_ratio > 5 * param_ratio
    assert eager.cost_ratio > graphs.cost_ratio


@pytest.mark.parametrize("kind", ["draft_model", "target_layer", "heads", "cpu_lookup"])
def test_speedup_falls_and_break_even_rises_with_batch(kind: str) -> None:
    runs = [estimate(kind, model_params=8e9, hardware=H100, alpha=0.7, num_draft_tokens=4,
                     draft_params=68e6, batch_size=b) for b in BATCHES]
    speed = [r["speedup"] for r in runs]
    even = [r["break_even_alpha"] for r in runs]
    # Past the compute ridge (B·(N+1) ≳ a few hundred tokens) verification stops being free.
    assert speed[0] > speed[3] > speed[4] > speed[5]
    assert even[0] < even[3] < even[4] < even[5]
    assert runs[0]["breakdown"]["bound"] == "memory" and runs[-1]["breakdown"]["bound"] == "compute"


def test_lookahead_collapses_first_under_batching() -> None:
    def speed(kind: str, batch: int) -> float:
        out = estimate(kind, model_params=8e9, hardware=H100, alpha=0.6, num_draft_tokens=4,
                       batch_size=batch)
        return float(out["speedup"])
    assert speed("in_forward", 1) > 1.5
    assert speed("in_forward", 64) < 1.0 < speed("cpu_lookup", 64)


def test_long_context_helps_at_large_batch() -> None:
    # MagicDec (arXiv:2408.11049): KV reads make long-context batches memory-bound again.
    def speed(ctx: int) -> float:
        out = estimate("draft_model", model_params=8e9, hardware=H100, alpha=0.7,
                       num_draft_tokens=4, draft_params=68e6, batch_size=128, context_len=ctx)
        return float(out["speedup"])
    assert speed(16384) > speed(512)


def test_estimate_is_json_and_self_consistent() -> None:
    out = estimate("target_layer", model_params=8e9, hardware=H100, alpha=0.75, num_draft_tokens=5)
    text = json.dumps(out, allow_nan=False)
    assert json.loads(text) == out
    for key in ("expected_tokens_per_verify", "cost_ratio", "speedup", "break_even_alpha"):
        assert isinstance(out[key], float)
    assert set(out["breakdown"]) >= {"verify_seconds", "draft_seconds", "plain_seconds", "bound"}
    assert out["expected_tokens_per_verify"] == pytest.approx(theory.expected_length_iid(0.75, 5))
    b = out["breakdown"]
    step = b["draft_seconds"] + b["verify_seconds"]
    assert out["speedup"] == pytest.approx(out["expected_tokens_per_verify"] * b["plain_seconds"] / step)
    assert 0.0 < out["break_even_alpha"] < 0.75 and out["speedup"] > 1.0


def test_mean_accepted_tokens_round_trips_to_alpha() -> None:
    by_alpha = estimate("draft_model", model_params=70e9, hardware=H100, alpha=0.66,
                        num_draft_tokens=5, draft_params=1e9)
    tau = by_alpha["expected_tokens_per_verify"]
    by_tau = estimate("draft_model", model_params=70e9, hardware=H100, mean_accepted_tokens=tau,
                      num_draft_tokens=5, draft_params=1e9)
    assert by_tau["alpha"] == pytest.approx(0.66, abs=1e-9)
    assert by_tau["speedup"] == pytest.approx(by_alpha["speedup"])


def test_estimate_argument_errors() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        estimate("heads", model_params=8e9, hardware=H100)
    with pytest.raises(ValueError, match="exactly one"):
        estimate("heads", model_params=8e9, hardware=H100, alpha=0.5, mean_accepted_tokens=2.0)
    with pytest.raises(ValueError, match="measured at"):
        estimate("heads", model_params=8e9, hardware=H100, mean_accepted_tokens=2.0)


def test_searched_n_is_at_least_as_good_as_any_fixed_n() -> None:
    searched = estimate("draft_model", model_params=8e9, hardware=H100, alpha=0.8, draft_params=68e6)
    for n in (1, 3, 6, 10, 16):
        fixed = estimate("draft_model", model_params=8e9, hardware=H100, alpha=0.8,
                         draft_params=68e6, num_draft_tokens=n)
        assert searched["speedup"] >= fixed["speedup"] - 1e-12
    assert searched["tree"] is None


def test_tree_estimate() -> None:
    chain = estimate("target_layer", model_params=8e9, hardware=H100, alpha=0.6, num_draft_tokens=16)
    tree = estimate("target_layer", model_params=8e9, hardware=H100, alpha=0.6, num_draft_tokens=16,
                    tree_topk=4)
    assert tree["expected_tokens_per_verify"] > chain["expected_tokens_per_verify"]
    assert tree["tree"]["topk"] == 4 and tree["tree"]["num_draft_tokens"] == 16
    assert 1 <= tree["tree"]["depth"] < 16
    parents, _ = tree_for_alpha(0.6, 4, 16)
    assert tree["tree"]["depth"] == theory.tree_depths(parents).max()


def test_default_draft_is_two_orders_smaller() -> None:
    out = estimate("draft_model", model_params=70e9, hardware=H100, alpha=0.7, num_draft_tokens=4)
    assert out["draft_shape"] is not None and any("assumed" in a for a in out["assumptions"])


def test_hardware_by_catalog_name() -> None:
    pytest.importorskip("picker.inputs.hardware")
    by_name = estimate("cpu_lookup", model_params=8e9, hardware="h100", alpha=0.5, num_draft_tokens=3)
    by_obj = estimate("cpu_lookup", model_params=8e9, hardware=H100, alpha=0.5, num_draft_tokens=3)
    assert by_name["speedup"] == pytest.approx(by_obj["speedup"])

"""The canary's greedy gate: the check a user runs (``picker.tasks.agreement.greedy_gate``) and the
rollout text per engine, from each engine's declared greedy exactness (``ENGINE_GREEDY``)."""

from __future__ import annotations

import html
from pathlib import Path
from typing import get_args

import pytest

from picker.inputs.workload import EngineName, load_profile
from picker.recommend import decide, engine_configs
from picker.recommend.engine_configs import ENGINE_GREEDY, NEAR_TIE_NATS, GreedyExactness
from picker.recommend.pipeline import recommend
from picker.recommend.render import render
from picker.recommend.report import html_page
from picker.tasks.agreement import greedy_gate, near_tie

ROOT = Path(__file__).resolve().parents[1]

# A baseline of 4 greedy tokens with its top-2 per position: position 2 is a near tie (0.02 nats),
# the others are confident (2+ nats).
BASE = [11, 12, 13, 14]
TOP2 = [((11, -0.05), (40, -3.0)), ((12, -0.3), (41, -2.4)), ((13, -0.68), (42, -0.70)), ((14, -0.1), (43, -2.9))]


def test_identical_outputs_pass() -> None:
    result = greedy_gate(BASE, TOP2, list(BASE), tolerance=0.1)
    assert result.passed and result.position is None and not result.near_tie
    assert result.describe() == "identical to the baseline"


def test_a_divergence_at_a_confident_token_fails() -> None:
    result = greedy_gate(BASE, TOP2, [11, 41, 13, 14], tolerance=0.1)  # 41 is second, but 2.1 nats behind
    assert not result.passed and not result.near_tie
    assert (result.position, result.baseline_token, result.speculative_token) == (1, 12, 41)
    assert result.baseline_top2 == TOP2[1]
    assert "FAIL" in result.describe() and "position 1" in result.describe()


def test_a_divergence_at_a_near_tie_passes_and_nothing_after_it_counts() -> None:
    # After the tie the runs continue from different prefixes: position 3 differing says nothing.
    result = greedy_gate(BASE, TOP2, [11, 12, 42, 99], tolerance=0.1)
    assert result.passed and result.near_tie and result.position == 2
    assert "pass (near tie within 0.1 nats)" in result.describe()


@pytest.mark.parametrize(("other", "tolerance"), [
    ([11, 12, 77, 14], 0.1),   # a third token at the tie position: no tie excuses it
    ([11, 12, 42, 14], 0.01),  # the tie is wider than the tolerance
    ([11, 12, 42, 14], None),  # token identity demanded
    ([11, 12], 0.1),           # the speculative run ended early
    ([*BASE, 15], 0.1),        # ... or ran longer
])
def test_everything_else_fails(other: list[int], tolerance: float | None) -> None:
    result = greedy_gate(BASE, TOP2, other, tolerance=tolerance)
    assert not result.passed and result.position is not None


def test_inconsistent_input_is_refused() -> None:
    with pytest.raises(ValueError, match="3 positions for 4"):
        greedy_gate(BASE, TOP2[:3], BASE, tolerance=0.1)
    with pytest.raises(ValueError, match="not among its top-2"):
        greedy_gate([11, 99, 13, 14], TOP2, BASE, tolerance=0.1)
    with pytest.raises(ValueError, match=">= 0"):
        greedy_gate(BASE, TOP2, BASE, tolerance=-1.0)


def test_near_tie_is_order_free_and_needs_both_tokens() -> None:
    assert near_tie(((5, -0.70), (7, -0.69)), 7, 5, 0.02)  # listed worst first: still the same tie
    assert not near_tie(((5, -0.69), (7, -0.70)), 5, 5, 0.02)
    assert not near_tie(((5, -0.69), (5, -0.69)), 5, 7, 0.02)


# ---- the rollout text ----------------------------------------------------------------------------

def _canary(engine: str) -> str:
    steps = decide.rollout("vanilla", 0.4, 1.8, None, engine)
    (step,) = [s for s in steps if s.name == "enable on a canary"]
    return step.gate


def test_every_profile_engine_declares_its_greedy_exactness() -> None:
    assert set(ENGINE_GREEDY) == set(get_args(EngineName)) == set(engine_configs.ENGINE_VERSIONS)
    for g in ENGINE_GREEDY.values():
        assert g.why and (g.tolerance_nats is None) == g.identical


@pytest.mark.parametrize("engine", sorted(ENGINE_GREEDY))
def test_engines_that_change_the_numerics_get_the_near_tie_gate(engine: str) -> None:
    gate = _canary(engine)
    assert not ENGINE_GREEDY[engine].identical
    assert "identical to the baseline" not in gate
    assert f"within {NEAR_TIE_NATS:g} nats" in gate and "greedy_gate" in gate
    assert ENGINE_GREEDY[engine].why in gate  # says why identity is not asked
    baseline = decide.rollout("vanilla", 0.4, 1.8, None, engine)[0]
    assert "top-2 log-probs" in baseline.action  # the baseline records what the gate needs


def test_llama_cpp_gate_cites_the_measurement() -> None:
    assert "5 of 10 prompts" in _canary("llama_cpp")


def test_an_engine_shown_identical_keeps_the_identity_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(ENGINE_GREEDY, "vllm", GreedyExactness(True, None, "shown identical in a test"))
    gate = _canary("vllm")
    assert gate.startswith("no errors; greedy (T=0) outputs identical to the baseline") and "nats" not in gate
    assert "top-2" not in decide.rollout("vanilla", 0.4, 1.8, None, "vllm")[0].action
    assert "nats" in _canary("llama_cpp")  # the others keep theirs


@pytest.mark.parametrize(("name", "engine"), [("code-assistant-8b-a100.yaml", "vllm")])
def test_the_plan_and_its_page_carry_the_engines_gate(name: str, engine: str) -> None:
    rec = recommend(load_profile(ROOT / "profiles" / name)).recommendation
    assert rec.engine == engine
    gate = _canary(engine)
    assert [s.gate for s in rec.rollout if s.name == "enable on a canary"] == [gate]
    assert f"*Gate:* {gate}." in render(rec, "md")
    assert ENGINE_GREEDY[engine].why in render(rec, "json")
    page = html_page(recommend(load_profile(ROOT / "profiles" / name)))
    assert html.escape(gate, quote=True) in page


def test_an_off_plan_has_no_canary_to_gate() -> None:
    """creative-writing (llama.cpp) leaves speculation off under the never-slower rule (as every
    shipped llama.cpp profile does now): nothing is enabled, so its plan carries no rollout and no
    gate, in the JSON, the markdown or the page. Where a llama.cpp plan enables speculation, its
    canary gets the engine's near-tie gate."""
    assert [s.gate for s in decide.rollout("ngram", 0.3, 1.4, None, "llama_cpp")
            if s.name == "enable on a canary"] == [_canary("llama_cpp")]
    result = recommend(load_profile(ROOT / "profiles" / "creative-writing.yaml"))
    rec = result.recommendation
    assert rec.decision.strategy == "none" and rec.rollout == []
    gate = _canary("llama_cpp")
    assert gate not in render(rec, "md") and html.escape(gate, quote=True) not in html_page(result)

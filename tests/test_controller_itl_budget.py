"""The SDK Controller's p99 ITL budget: a speculative step is one inter-token gap, so once the live
step time is known the Controller drafts the longest N whose step fits the budget, or none."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from picker.sdk.controller import Controller
from picker.sdk.plan import ControllerPlan, flat_step_ratio

ROOT = Path(__file__).resolve().parents[1]


def _plan(n: int = 4) -> ControllerPlan:  # R(k) = 1 + 0.1 k at every batch
    return ControllerPlan(strategy="vanilla", num_speculative_tokens=n, tree=None, schedule=((1, None, n),),
                          temperature_above=None, step_ratio=flat_step_ratio(1.0 + 0.1 * n, n))


def _time(ctl: Controller, plain: float, spec: float, times: int = 50) -> None:
    for _ in range(times):
        ctl.observe(0, 0, step_time=plain, task="code", batch_size=8)
        ctl.observe(4, 3, step_time=spec, task="code", batch_size=8)


def test_budget_shortens_then_switches_off_then_recovers() -> None:
    ctl = Controller(_plan(), itl_p99_budget=0.0125)
    assert ctl.choose(8, 0.0, "code").reason == "speculate"  # nothing timed yet: the plan holds
    _time(ctl, plain=0.010, spec=0.014)  # a 4-draft step costs 1.4 plain ones, as planned
    assert ctl.step_estimate(8, 2) == pytest.approx(0.012) and ctl.step_estimate(8, 3) == pytest.approx(0.013)
    cfg = ctl.choose(8, 0.0, "code")
    assert (cfg.reason, cfg.num_speculative_tokens) == ("short_itl_budget", 2)
    assert ctl.choose(64, 0.0, "code").reason == "speculate"  # another batch cell: not timed, not capped

    tight = Controller(_plan(), itl_p99_budget=0.0105)  # not even one draft token fits
    _time(tight, plain=0.010, spec=0.014)
    assert tight.choose(8, 0.0, "code").reason == "off_itl_budget"
    for _ in range(200):  # the load eases: plain steps alone bring the estimate down
        tight.observe(0, 0, step_time=0.005, task="code", batch_size=8)
    assert tight.choose(8, 0.0, "code").reason == "speculate"
    again = Controller.from_state(tight.state())
    assert again.itl_p99_budget == 0.0105 and again.choose(8, 0.0, "code").reason == "speculate"


def test_budget_must_be_positive() -> None:
    with pytest.raises(ValueError, match="itl_p99_budget"):
        Controller(_plan(), itl_p99_budget=0.0)


def _serving_example():
    if "serving_loop" not in sys.modules:
        spec = importlib.util.spec_from_file_location("serving_loop", ROOT / "examples" / "serving_loop.py")
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        sys.modules["serving_loop"] = module
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    return sys.modules["serving_loop"]


@pytest.mark.parametrize("budget", [1e-6, 3600.0])
def test_reference_loop_step_times_drive_the_budget(budget: float) -> None:
    """The reference loop's own step timings (ControlledDrafter times each step, draft to rollback):
    a budget no step can meet switches speculation off after the first timed speculative step; a
    budget every step meets never touches it. Outputs stay the target's greedy output either way."""
    import torch

    from picker.engine.loop import generate
    from strategies.vanilla.drafter import DraftModelDrafter

    torch.set_num_threads(1)
    serving = _serving_example()
    target, draft = serving.tiny_engine(eps=0.02)
    reqs = serving.make_requests(3, target.vocab_size, max_new_tokens=24, tasks=("code",))
    ctl = Controller(serving.demo_plan(n=3), itl_p99_budget=budget)
    served = serving.serve(reqs, target, DraftModelDrafter(draft, num_draft_tokens=3), ctl, report_step_time=True)
    for s in served:
        assert s.generation.tokens == generate(target, s.request.prompt, None,
                                               max_new_tokens=s.request.max_new_tokens).tokens
    reasons = [r for s in served for r, n in s.decisions.items() for _ in range(n)]
    estimate = ctl.step_estimate(1, 3)
    assert estimate is not None and estimate > 0  # the live timings reached the Controller
    if budget < 1.0:
        assert served[0].decisions["speculate"] == 1  # the first step speculates, and is timed
        assert sum(s.decisions["off_itl_budget"] for s in served) == len(reasons) - 1
    else:
        assert all(r == "speculate" for r in reasons)

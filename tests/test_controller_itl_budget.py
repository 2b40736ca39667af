"""The SDK Controller's p99 ITL budget: a speculative step is one inter-token gap, so once the live
step time is known the Controller drafts the longest N whose step fits the budget, or none."""

from __future__ import annotations

import pytest

from picker.sdk.controller import Controller
from picker.sdk.plan import ControllerPlan, flat_step_ratio


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

"""Drive the reference loop with the Controller: a drafter wrapper that asks before each step.

``picker.engine.loop.generate`` asks its drafter for a proposal once per step and reports the outcome
back through the drafter's optional ``observe`` hook, so a wrapper around any drafter is all the
integration needs — the loop itself stays the one loop (STYLE.md, habit 1):

1. ``propose``: ``Controller.choose(batch, temperature, task)`` → N; N = 0 returns an empty draft (the
   loop then does a plain step), else the inner drafter proposes with ``max_draft`` capped at N (tree
   drafters get the chosen tree's node budget).
2. ``observe``: feeds ``Controller.observe`` the step's drafted / accepted counts (for a tree: its
   depth and the accepted path length) and the step's wall time (propose start → observe, which
   spans draft, verify and cache rollback), then forwards the outcome to the inner drafter on every
   step, plain ones included, so n-gram pools and hidden-state drafters stay in sync.

    >>> from picker.sdk.controller import Controller
    >>> ctl = Controller.from_profile("profiles/code-assistant-8b-a100.yaml")   # doctest: +SKIP
    >>> drafter = ControlledDrafter(inner, ctl, task="code")                      # doctest: +SKIP
    >>> out = generate(target, prompt, bind(drafter, caps), max_new_tokens=64)    # doctest: +SKIP
    >>> drafter.decisions["speculate"], drafter.decisions.get("off_below_break_even", 0)  # doctest: +SKIP
    (62, 0)

Verification is exact whatever the drafter proposes, so the wrapper changes speed, never output.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Callable, Sequence

from picker.engine.drafting import EMPTY_DRAFT, Draft, DraftContext, Drafter, StepOutcome, call_observe, call_reset
from picker.sdk.controller import Controller, SpecConfig


class ControlledDrafter:
    """Wraps ``inner`` so that every step's draft length comes from ``controller``.

    ``batch_size`` is the concurrency the step runs at (an int, or a callable read each step, for
    a server whose load changes); ``task`` keys the controller's per-task statistics. Build the
    inner drafter with a draft length at least the plan's largest N: the wrapper only caps it.
    ``report_step_time=False`` keeps wall times out of the controller, so the plan's cost model
    alone sets break-even (deterministic tests; demos whose toy draft costs as much as its target).
    ``decisions`` counts the reasons of the configs chosen (a ``Counter``), ``last`` is the latest.
    """

    def __init__(self, inner: Drafter, controller: Controller, *, task: str | None = None,
                 batch_size: int | Callable[[], int] = 1, report_step_time: bool = True) -> None:
        self.inner = inner
        self.controller = controller
        self.task = task
        self.batch_size = batch_size
        self.report_step_time = report_step_time
        self.decisions: Counter[str] = Counter()
        self.last: SpecConfig | None = None
        self._started: float | None = None  # set by propose; the prefill step has none
        self._batch = 1
        self._temperature = 0.0
        # EAGLE-3 style drafters name the target layers they need; the loop reads it from us.
        layers = getattr(inner, "hidden_layers", None)
        if layers is not None:
            self.hidden_layers = layers

    def reset(self, prompt_ids: Sequence[int]) -> None:
        call_reset(self.inner, prompt_ids)

    def propose(self, ctx: DraftContext) -> Draft:
        self._started = time.perf_counter()
        self._batch = self.batch_size() if callable(self.batch_size) else self.batch_size
        self._temperature = ctx.sampling.temperature
        cfg = self.controller.choose(self._batch, self._temperature, self.task)
        self.last = cfg
        self.decisions[cfg.reason] += 1
        if not cfg.num_speculative_tokens:
            return EMPTY_DRAFT
        budget = cfg.tree.num_draft_tokens - 1 if cfg.tree is not None else cfg.num_speculative_tokens
        return self.inner.propose(dataclasses.replace(ctx, max_draft=min(ctx.max_draft, budget)))

    def observe(self, outcome: StepOutcome) -> None:
        if self._started is not None:  # the prefill step was no decision: nothing to report
            seconds = time.perf_counter() - self._started
            self._started = None
            tree = outcome.draft.tree
            drafted = len(tree) if outcome.draft.is_chain else tree.max_depth
            self.controller.observe(drafted, len(outcome.accepted_nodes),
                                    step_time=seconds if self.report_step_time else None, task=self.task,
                                    temperature=self._temperature, batch_size=self._batch)
        call_observe(self.inner, outcome)

"""Hugging Face assisted generation's draft-length rules, on our draft-model drafter (baselines only).

transformers 5.x reads them from the assistant's generation config (research/engines.md):
``num_assistant_tokens`` = 20, ``assistant_confidence_threshold`` = 0.4 (drafting stops once the
assistant's probability of the token it just drafted falls below it), and
``num_assistant_tokens_schedule`` = ``"constant"`` (keep N) or ``"heuristic"`` (N += 2 when every
draft was accepted, else N = max(1, N - 1)). The drafts themselves are the draft model's, exactly
as ``strategies.vanilla`` proposes them; only the stopping rule and the schedule differ.

    >>> rule = Schedule("heuristic", 20)
    >>> rule.update(drafted=20, accepted=20); rule.n
    22
    >>> rule.update(drafted=22, accepted=3); rule.n
    21
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from picker.engine.drafting import DraftContext, StepOutcome
from picker.engine.sampling import warp
from strategies.vanilla.drafter import DraftModelDrafter

HF_NUM_ASSISTANT_TOKENS = 20
HF_CONFIDENCE_THRESHOLD = 0.4


@dataclass
class Schedule:
    """HF's draft-length schedule: ``constant`` keeps N; ``heuristic`` moves it by acceptance."""

    kind: str
    n: int

    def update(self, drafted: int, accepted: int) -> None:
        if self.kind != "heuristic" or drafted == 0:
            return
        self.n = self.n + 2 if accepted == drafted else max(1, self.n - 1)


class AssistedDrafter(DraftModelDrafter):
    """Draft-model chains cut at the first token whose draft probability is below the threshold."""

    def __init__(self, base: DraftModelDrafter, schedule: Schedule, threshold: float = HF_CONFIDENCE_THRESHOLD) -> None:
        super().__init__(base.draft, num_draft_tokens=schedule.n)
        self.schedule = schedule
        self.start = schedule.n
        self.threshold = threshold

    def reset(self, prompt_ids: Sequence[int]) -> None:
        super().reset(prompt_ids)
        self.schedule.n = self.start  # HF keeps the schedule per generate() call

    def draft_length(self, ctx: DraftContext) -> int:
        return min(self.schedule.n, ctx.max_draft)

    def stop_after(self, logits: Any, token: int, ctx: DraftContext) -> bool:
        """HF's AssistantConfidenceCriteria: stop once the drafted token's probability < threshold."""
        s = ctx.sampling
        raw = logits.float().numpy()
        probs = _softmax(raw) if s.greedy else warp(raw, s.temperature, s.top_k, s.top_p)
        return bool(probs[token] < self.threshold)

    def observe(self, outcome: StepOutcome) -> None:
        self.schedule.update(len(outcome.draft), len(outcome.accepted_nodes))


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()

"""Greedy agreement between the reference engine and another backend, token id by token id.

Shared by the default suite (reference vs transformers' ``generate``, ``tests/test_agreement.py``)
and the engine tier (vLLM, llama.cpp: ``tests/engines/test_agreement_engines.py``).

The comparison: both decode ``MAX_NEW`` greedy tokens after the same prompt ids (encoded once by
``picker.tasks.encoding.encode_prompt``). Where the ids differ, the report names the first diverging
position with each side's top-2 log-probabilities there. A divergence is *tolerated* only when it
is a near tie that float order can flip: both sides rank the same two tokens first and second (in
either order) and each side's gap between them is at most the backend's stated tolerance
(``picker.tasks.agreement.near_tie``, the rule the rollout gate applies to the baseline alone). Past
a divergence the two continue from different prefixes, so nothing after it is compared.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from picker.engine.backend import TorchBackend
from picker.engine.loop import generate
from picker.tasks import Prompt, builtin_prompts
from picker.tasks.agreement import Top2, near_tie
from picker.tasks.builtin import BUILDERS
from picker.tasks.encoding import encode_prompt

MAX_NEW = 32          # greedy tokens compared per prompt
PER_TASK = 3          # every built-in task type x 3 (8 types: 24 prompts)


def agreement_prompts() -> list[Prompt]:
    """Every built-in task type, ``PER_TASK`` prompts each: the same list on every machine."""
    return builtin_prompts(tuple(BUILDERS), limit=PER_TASK)


def encoded_prompts(tokenizer: object) -> list[tuple[Prompt, list[int]]]:
    """(prompt, ids) through the one encoding function."""
    return [(p, encode_prompt(tokenizer, p)) for p in agreement_prompts()]


def reference_tokens(backend: TorchBackend, ids: Sequence[int], max_new: int = MAX_NEW) -> list[int]:
    """The reference engine: ``picker.engine.loop.generate`` without a drafter, greedy, no EOS stop."""
    out = generate(backend, ids, None, max_new_tokens=max_new)
    assert len(out.tokens) == max_new and out.stop_reason == "max_tokens"
    return out.tokens


def reference_logprobs(backend: TorchBackend, ids: Sequence[int], tokens: Sequence[int]) -> np.ndarray:
    """The reference backend's log-probabilities before each of ``tokens`` (rows), from one forward
    of the prompt and the tokens fed causally: the same backend, read back without the loop."""
    backend.reset()
    with torch.inference_mode():
        logits = backend.forward([*ids, *tokens[:-1]], logits_from=len(ids) - 1).logits[0].double().cpu()
    return torch.log_softmax(logits, dim=-1).numpy()


def reference_top2(backend: TorchBackend, ids: Sequence[int], tokens: Sequence[int], position: int) -> Top2:
    """The reference backend's top-2 log-probabilities before ``tokens[position]``."""
    return top2_of(reference_logprobs(backend, ids, tokens[: position + 1])[position])


@dataclass(frozen=True)
class Divergence:
    """The first position where ``other`` differs from the reference, and why it may be tolerated."""

    prompt_id: str
    position: int
    reference_token: int
    other_token: int
    reference_top2: Top2
    other_top2: Top2 | None  # None where the backend reports no log-probabilities
    tolerance: float

    @property
    def tolerated(self) -> bool:
        """A near tie on both sides, over the same two tokens."""
        if self.other_top2 is None:
            return False
        return all(near_tie(top, self.reference_token, self.other_token, self.tolerance)
                   for top in (self.reference_top2, self.other_top2))

    def describe(self) -> str:
        def fmt(top: Top2 | None) -> str:
            return "n/a" if top is None else ", ".join(f"{t}:{lp:.6f}" for t, lp in top)

        return (f"{self.prompt_id}: first divergence at position {self.position}: reference {self.reference_token} "
                f"[top-2 {fmt(self.reference_top2)}] vs {self.other_token} [top-2 {fmt(self.other_top2)}]; "
                f"tolerance {self.tolerance:g} nats between first and second -> "
                f"{'tolerated (near tie)' if self.tolerated else 'NOT tolerated'}")


def top2_of(logp: np.ndarray) -> Top2:
    """Top-2 (id, logprob) of one row of log-probabilities."""
    order = np.argsort(-logp, kind="stable")[:2]
    return ((int(order[0]), float(logp[order[0]])), (int(order[1]), float(logp[order[1]])))


def summarize(backend_name: str, rows: list[tuple[str, int | None, Divergence | None]]) -> str:
    """One line per backend: how many prompts agree token for token, then each divergence."""
    agree = sum(1 for _, pos, _ in rows if pos is None)
    lines = [f"{backend_name}: {agree}/{len(rows)} prompts agree token for token over {MAX_NEW} greedy tokens"]
    lines += [d.describe() for _, _, d in rows if d is not None]
    return "\n".join(lines)

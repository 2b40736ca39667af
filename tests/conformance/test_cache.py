"""After every rejection the target's KV cache equals a fresh prefill of the accepted prefix.

The loop drives a :class:`CheckingBackend` (the real backend, checked after each rollback that
dropped entries): greedy and sampled runs over prompts from four task types. Tree strategies get
their accepted path compacted; chain strategies get a crop. Both must leave what a fresh model
would compute for exactly the committed tokens.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from picker.engine.backend import TorchBackend
from picker.engine.drafting import SamplingParams
from picker.engine.loop import generate
from tests.conformance.conftest import Strategy
from tests.conformance.harness import CheckingBackend


@pytest.fixture(scope="session")
def checking(target: TorchBackend) -> CheckingBackend:
    return CheckingBackend(target.model)


@pytest.fixture(scope="session")
def prompts(tokenizer: Any) -> list[list[int]]:
    from picker.engine.runtime import encode
    from picker.tasks import builtin_prompts, render_turn

    ps = builtin_prompts(["code", "structured", "math", "chat"], limit=2, seed=1)
    return [encode(tokenizer, render_turn(p, 0, []))[-48:] for p in ps]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_cache_equals_fresh_prefill_after_every_rejection(
    strategy: Strategy, checking: CheckingBackend, prompts: list[list[int]], temperature: float
) -> None:
    checking.rollbacks_with_rejection, checking.mismatches = 0, []
    rng = np.random.default_rng(5)
    for ids in prompts:
        out = generate(checking, ids, strategy.drafter, strategy.caps, sampling=SamplingParams(temperature),
                       max_new_tokens=24, rng=rng)
        # The cache holds committed tokens only (the last step may run past the output limit).
        n = min(len(checking.slots), len(ids) + len(out.tokens))
        assert checking.slots[:n] == [*ids, *out.tokens][:n]
    assert checking.rollbacks_with_rejection > 0, "no rejection seen: the test would prove nothing"
    assert not checking.mismatches, checking.mismatches[:3]

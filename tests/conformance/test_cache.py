"""After every rejection the target's KV cache equals a fresh prefill of the accepted prefix.

The loop drives a :class:`CheckingBackend` (the real backend, checked after each rollback that
dropped entries): greedy and sampled runs over prompts from four task types, one at a time and
at concurrency 4 (sequences of different lengths sharing every forward, joining and leaving).
Tree strategies get their accepted path compacted; chain strategies leave stale slots behind,
masked. Both must leave, in every row, what a fresh model would compute for exactly the
committed tokens.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from picker.engine.backend import TorchBackend
from picker.engine.drafting import SamplingParams
from picker.engine.loop import serve
from tests.conformance.conftest import Strategy
from tests.conformance.harness import CheckingBackend


@pytest.fixture(scope="session")
def checking(target: TorchBackend) -> CheckingBackend:
    return CheckingBackend(target.model, rows=4)


@pytest.fixture(scope="session")
def prompts(tokenizer: Any) -> list[list[int]]:
    from picker.engine.runtime import encode
    from picker.tasks import builtin_prompts, render_turn

    ps = builtin_prompts(["code", "structured", "math", "chat"], limit=2, seed=1)
    return [encode(tokenizer, render_turn(p, 0, []))[-48:] for p in ps]


@pytest.mark.parametrize("concurrency", [1, 4])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_cache_equals_fresh_prefill_after_every_rejection(
    strategy: Strategy, checking: CheckingBackend, prompts: list[list[int]], temperature: float, concurrency: int
) -> None:
    checking.rollbacks_with_rejection, checking.mismatches, checking.slots, checking._finals = 0, [], {}, []
    rng = np.random.default_rng(5)
    # Mixed lengths and output limits: rows join and leave at different steps.
    batch = [ids[i % 3 * len(ids) // 4:] for i, ids in enumerate(prompts)]
    limits = [24 - 5 * (i % 3) for i in range(len(batch))]
    run = serve(checking, batch, strategy.spec, concurrency=concurrency, sampling=SamplingParams(temperature),
                max_new_tokens=limits, rng=rng)
    finals = checking.finals()
    for ids, out in zip(batch, run.generations):
        # Some row ended holding this sequence's committed tokens, all but the pending last one
        # (the last step may run past the output limit).
        full = [*ids, *out.tokens]
        assert any(len(f) >= len(full) - 1 and f[: len(full)] == full[: len(f)] for f in finals), len(full)
    if concurrency > 1:  # sequences really shared forwards, and joined while others ran
        assert run.steps < sum(g.stats.steps for g in run.generations)
        assert any(0 < g.joined < max(h.left for h in run.generations) for g in run.generations)
    assert checking.rollbacks_with_rejection > 0, "no rejection seen: the test would prove nothing"
    assert not checking.mismatches, checking.mismatches[:3]

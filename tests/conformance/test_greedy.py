"""Every strategy at temperature 0 emits exactly plain greedy decoding's tokens, on 210 prompts.

Seven task types (chat, code, structured, math, summarization, rag, creative) x 30 built-in
prompts, each cut to its last 40 tokens, 12 new tokens each: short, so the whole suite stays fast
on the tiny zoo, and long enough that every strategy drafts, gets accepted and gets rejected.
"""

from __future__ import annotations

from typing import Any

import pytest

from picker.engine.backend import TorchBackend
from picker.engine.loop import generate
from tests.conformance.conftest import Strategy
from tests.conformance.harness import greedy_tie

PER_TASK, CONTEXT, NEW = 30, 40, 12
# The seven task types the suite was sized on (210 prompts; the default suite's time budget). The
# agentic type's first turns are code and JSON like these; its repetition across requests is what
# the profiler measures, not what exactness depends on.
TASKS = ("chat", "code", "structured", "math", "summarization", "rag", "creative")


@pytest.fixture(scope="session")
def prompt_ids(tokenizer: Any) -> list[list[int]]:
    from picker.engine.runtime import encode
    from picker.tasks import builtin_prompts, render_turn

    prompts = builtin_prompts(list(TASKS), limit=PER_TASK)
    return [encode(tokenizer, render_turn(p, 0, []))[-CONTEXT:] for p in prompts]


@pytest.fixture(scope="session")
def plain(target: TorchBackend, prompt_ids: list[list[int]]) -> list[list[int]]:
    return [generate(target, ids, max_new_tokens=NEW).tokens for ids in prompt_ids]


def test_enough_prompts_across_domains(prompt_ids: list[list[int]]) -> None:
    assert len(prompt_ids) >= 200 and all(len(ids) > 3 for ids in prompt_ids)


def test_greedy_is_token_identical_to_plain_decoding(
    strategy: Strategy, target: TorchBackend, prompt_ids: list[list[int]], plain: list[list[int]]
) -> None:
    mismatches, drafted, accepted = [], 0, 0
    for n, (ids, base) in enumerate(zip(prompt_ids, plain)):
        out = generate(target, ids, strategy.spec, max_new_tokens=NEW)
        drafted += out.stats.drafted
        accepted += out.stats.accepted
        if out.tokens == base:
            continue
        i = next(k for k, (a, b) in enumerate(zip(out.tokens, base)) if a != b)
        if not greedy_tie(target, [*ids, *base[:i]]):
            mismatches.append(f"prompt {n}: token {i}: {out.tokens[i]} != {base[i]}")
    assert not mismatches, mismatches[:5]
    assert drafted > 0, f"{strategy.name} never drafted: the test would prove nothing"
    assert 0 < accepted < drafted, f"{strategy.name}: accepted {accepted} of {drafted}"

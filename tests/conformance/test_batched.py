"""Exactness under load: at concurrency 4 and 8 every strategy's greedy output is plain greedy's.

The 210 prompts of ``test_greedy`` go through :func:`picker.engine.loop.serve` as a request queue:
prompt lengths mixed (16 to 40 tokens), output limits mixed (6 to 16 tokens), so sequences join
and leave at different steps (a joining prompt prefilled in a forward of its own, while the others
wait) and every decode forward mixes chains and trees of different lengths at different cache
lengths. The reference is plain greedy decoding one prompt at a time.

Floats, stated: a row's logits in a batched forward are computed by kernels of another shape
(padded width T, B rows, an explicit 4-D mask) than at batch 1, so they can differ in the last
bits, and a near-tied argmax can flip. Measured on the zoo: plain decoding batched and one at a
time agree on all 210 prompts; a divergence is exempt only where a fresh prefill shows the top
two logits within 1e-4 (``harness.greedy_tie``, as at batch 1), the exemptions are counted and
at most 1% of the prompts may use one -- a backend that mixes rows up fails on nearly all.
"""

from __future__ import annotations

from typing import Any

import pytest

from picker.engine.backend import TorchBackend
from picker.engine.loop import Served, serve
from tests.conformance.conftest import Strategy
from tests.conformance.harness import divergences
from tests.conformance.test_greedy import prompt_ids  # noqa: F401  (the 210 prompts fixture)

MAX_EXEMPT = 0.01  # share of prompts whose first divergence may sit on a near-tie


@pytest.fixture(scope="session")
def mixed(prompt_ids: list[list[int]]) -> tuple[list[list[int]], list[int]]:  # noqa: F811 (the fixture)
    """Prompts cut to mixed lengths, with mixed output limits."""
    return [ids[-(16 + 6 * (n % 5)):] for n, ids in enumerate(prompt_ids)], [6 + n % 11 for n in range(len(prompt_ids))]


@pytest.fixture(scope="session")
def plain_one_at_a_time(target: TorchBackend, mixed: tuple[list[list[int]], list[int]]) -> list[list[int]]:
    prompts, limits = mixed
    return [g.tokens for g in serve(target, prompts, max_new_tokens=limits).generations]


@pytest.fixture(scope="session")
def wide(target: TorchBackend) -> TorchBackend:
    return target.with_rows(8)


def assert_joined_and_left(run: Served, concurrency: int) -> None:
    """Not vacuous: sequences shared forwards, and some joined while others were mid-way."""
    assert run.steps < sum(g.stats.steps for g in run.generations) / (concurrency / 2)
    assert len({g.left for g in run.generations}) > 10
    assert sum(1 for g in run.generations if g.joined > 0) > len(run.generations) / 2


@pytest.mark.parametrize("concurrency", [4, 8])
def test_plain_decoding_batched_equals_one_at_a_time(
    wide: TorchBackend, mixed: tuple[list[list[int]], list[int]], plain_one_at_a_time: list[list[int]],
    concurrency: int
) -> None:
    prompts, limits = mixed
    run = serve(wide, prompts, concurrency=concurrency, max_new_tokens=limits)
    bad, ties = divergences(wide, run, prompts, plain_one_at_a_time)
    print(f"plain at concurrency {concurrency}: {ties} near-tie divergences of {len(prompts)}")
    assert not bad, bad[:5]
    assert ties <= MAX_EXEMPT * len(prompts)
    assert_joined_and_left(run, concurrency)


@pytest.mark.parametrize("concurrency", [4, 8])
def test_greedy_at_concurrency_is_token_identical_to_plain_decoding(
    strategy: Strategy, wide: TorchBackend, mixed: tuple[list[list[int]], list[int]],
    plain_one_at_a_time: list[list[int]], concurrency: int
) -> None:
    prompts, limits = mixed
    run = serve(wide, prompts, strategy.spec, concurrency=concurrency, max_new_tokens=limits)
    bad, ties = divergences(wide, run, prompts, plain_one_at_a_time)
    print(f"{strategy.name} at concurrency {concurrency}: {ties} near-tie divergences of {len(prompts)}")
    assert not bad, bad[:5]
    assert ties <= MAX_EXEMPT * len(prompts)
    totals: dict[str, Any] = run.totals()
    assert totals["drafted"] > 0, f"{strategy.name} never drafted: the test would prove nothing"
    assert 0 < totals["accepted"] < totals["drafted"], totals
    assert_joined_and_left(run, concurrency)

"""The drafter contract, with power: drafted tokens are distributed as the ``p`` the drafter reports.

The verifier trusts ``p`` (it accepts ``d`` with ``min(1, q(d)/p(d))``): a drafter that samples
from one distribution and reports another breaks exactness, and the end-to-end distribution test
(K = 1000 generations) cannot see it -- a vanilla drafter drawing at 0.7 T while reporting p at T
passes it. Here proposing alone is tested, with no target forward: at one fixed context every
strategy that sends ``p`` proposes again and again, and each drafted node's token is tallied by
its condition -- the tokens on its path and, for siblings drawn without replacement, the earlier
siblings' tokens -- against the reported row (renormalised without those siblings). One
chi-square over every condition, at >= 10^5 drafted tokens; the planted mismatch must fail it.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats

from picker.engine.backend import TorchBackend
from picker.engine.drafting import Draft, DraftContext, Drafter, SamplingParams
from tests.conformance.conftest import Strategy

SAMPLING = SamplingParams(temperature=1.0, top_k=8)  # top-k only: the planted p is then exact at T
DRAWS, MAX_DRAFT, MIN_EXPECTED = 100_000, 3, 10.0
NULL_LEVEL = 1e-4


@pytest.fixture(scope="session")
def context_ids(tokenizer: Any, target: TorchBackend) -> list[int]:
    from picker.engine.runtime import encode
    from picker.tasks import builtin_prompts, render_turn

    ids = encode(tokenizer, render_turn(builtin_prompts(["code"], limit=1)[0], 0, []))[-32:]
    first = int(target.prefill(ids).logits[0, -1].argmax())
    return [*ids, first]  # the prompt, then the pending token the prefill emitted


def context(target: TorchBackend, ids: list[int], layers: tuple[int, ...] | None, rng: np.random.Generator
            ) -> DraftContext:
    """What the loop hands a drafter right after the prefill (hidden states for every prompt row)."""
    hidden = None
    if layers is not None:
        out = TorchBackend(target.model).forward(ids[:-1], hidden=True, layers=layers)
        hidden = {k: v[0] for k, v in out.hidden.items()}  # type: ignore[union-attr]
    return DraftContext(ids, len(ids) - 1, SAMPLING, rng, MAX_DRAFT, hidden)


def tally(drafter: Drafter, ctx: DraftContext, draws: int) -> tuple[dict[Any, Counter[int]], dict[Any, np.ndarray]]:
    """Propose until ``draws`` nodes were drafted; per condition, token counts and the reported row."""
    counts: dict[Any, Counter[int]] = defaultdict(Counter)
    rows: dict[Any, np.ndarray] = {}
    drafted = 0
    while drafted < draws:
        draft: Draft = drafter.propose(ctx)
        assert draft.p is not None and draft.p.shape[0] == len(draft)
        tree = draft.tree
        for c in range(len(tree)):
            parent = tree.parents[c]
            path = tuple(tree.tokens[k] for k in tree.path(c)[:-1])
            earlier = tuple(tree.tokens[s] for s in tree.children(parent) if s < c)
            key = (path, earlier if draft.siblings == "without_replacement" else ())
            if key not in rows:
                rows[key] = draft.p[c].copy()
            elif counts[key].total() < 20:  # the same condition must report the same row
                assert np.allclose(rows[key], draft.p[c], atol=1e-9), f"condition {key} reported two rows"
            counts[key][tree.tokens[c]] += 1
        drafted += len(tree)
    return counts, rows


def chi_square(counts: dict[Any, Counter[int]], rows: dict[Any, np.ndarray]) -> tuple[float, int, int]:
    """(p-value, degrees of freedom, tokens drawn where the reported row said 0) over all conditions."""
    statistic, dof, impossible = 0.0, 0, 0
    for key, seen in counts.items():
        p = rows[key].astype(float)
        p[list(key[1])] = 0.0  # without replacement: earlier siblings' tokens cannot come again
        n = seen.total()
        if p.sum() <= 0:
            impossible += n
            continue
        p /= p.sum()
        impossible += sum(v for tok, v in seen.items() if p[tok] == 0.0)
        expected = n * p
        big = np.flatnonzero(expected >= MIN_EXPECTED)
        if big.size == 0:
            continue
        obs = [seen.get(int(t), 0) for t in big]
        exp = list(expected[big])
        rest_e = n - sum(exp)
        if rest_e >= MIN_EXPECTED:
            obs.append(n - sum(obs))
            exp.append(rest_e)
        if len(obs) < 2:
            continue
        o, e = np.array(obs, float), np.array(exp, float)
        e *= o.sum() / e.sum()
        statistic += float(((o - e) ** 2 / e).sum())
        dof += len(obs) - 1
    return float(stats.chi2.sf(statistic, dof)) if dof else 1.0, dof, impossible


def _layers(strategy: Strategy) -> tuple[int, ...] | None:
    return strategy.spec.hidden_layers if strategy.spec.wants_hidden else None


def test_drafted_tokens_follow_the_reported_p(strategy: Strategy, target: TorchBackend, context_ids: list[int]
                                              ) -> None:
    drafter = strategy.spec.drafter(0)
    ctx = context(target, context_ids, _layers(strategy), np.random.default_rng(3))
    first = strategy.spec.propose(0, ctx)
    if first.p is None:
        pytest.skip(f"{strategy.name} sends no p at T > 0 (deterministic drafts: verified as one-hot)")
    counts, rows = tally(drafter, ctx, DRAWS)
    pvalue, dof, impossible = chi_square(counts, rows)
    assert impossible == 0, f"{strategy.name} drew {impossible} tokens its p gives probability 0"
    assert dof >= 20, f"{strategy.name}: only {dof} degrees of freedom, the test would prove little"
    assert pvalue > NULL_LEVEL, f"{strategy.name}: drafted tokens do not follow p: chi-square p = {pvalue:.2e}"


class _Misreporting:
    """The planted mismatch: a vanilla chain drawn at 0.7 T whose p is reported at T (top-k only,
    so p_T = p_{0.7T} ** 0.7, renormalised, is exactly the distribution at T)."""

    def __init__(self, inner: Drafter) -> None:
        self.inner = inner

    def propose(self, ctx: DraftContext) -> Draft:
        s = ctx.sampling
        cooler = dataclasses.replace(s, temperature=0.7 * s.temperature)
        draft = self.inner.propose(dataclasses.replace(ctx, sampling=cooler))
        assert draft.p is not None
        p = draft.p ** 0.7
        return dataclasses.replace(draft, p=p / p.sum(axis=-1, keepdims=True))


def test_a_drafter_that_misreports_p_fails(target: TorchBackend, artifacts: dict[str, Path],
                                           context_ids: list[int]) -> None:
    from strategies.vanilla.drafter import make_drafter

    if "draft_model" not in artifacts:
        pytest.skip("the zoo build has no draft model")
    drafter = _Misreporting(make_drafter(target_backend=target, artifact=artifacts["draft_model"],
                                         num_draft_tokens=MAX_DRAFT))
    ctx = context(target, context_ids, None, np.random.default_rng(3))
    pvalue, dof, _ = chi_square(*tally(drafter, ctx, DRAWS))
    assert pvalue < 1e-6, f"the planted mismatch went unnoticed: p = {pvalue:.2e} over {dof} dof"

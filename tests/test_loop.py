"""The decode loop on tiny random Llamas: the baseline, stopping, seeding, stats, hidden states."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
import torch

from picker.engine.drafting import Draft, DraftContext, SamplingParams, StepOutcome, bind
from picker.engine.loop import generate
from picker.engine.plugins import Capabilities
from picker.engine.tree import TokenTree
from tests.tiny import tiny_backend, tiny_llama

torch.set_num_threads(1)
PROMPT = [0, 5, 9, 11, 3, 17]


class CharTokenizer:
    """id -> one letter: enough to test stop strings without a trained tokenizer."""

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(chr(ord("a") + i % 26) for i in ids)


class RandomTreeDrafter:
    """Deterministic random trees (seeded by the sequence), first child often the target's pick."""

    def __init__(self, size: int = 6) -> None:
        self.size = size

    def propose(self, ctx: DraftContext) -> Draft:
        g = np.random.default_rng(len(ctx.tokens))
        parents = [-1] + [int(g.integers(-1, i)) for i in range(1, self.size)]
        tokens = [int(t) for t in g.integers(3, 64, size=self.size)]
        return Draft(TokenTree(tuple(tokens), tuple(parents)), p=None)


class HiddenProbe:
    """Records what the loop hands a hidden-state drafter; drafts the previous tokens again."""

    hidden_layers = (0,)

    def __init__(self) -> None:
        self.seen: list[tuple[list[int], dict[Any, torch.Tensor]]] = []

    def propose(self, ctx: DraftContext) -> Draft:
        assert ctx.hidden is not None
        self.seen.append((list(ctx.tokens), dict(ctx.hidden)))  # copies: ctx.tokens is live
        return Draft(TokenTree.from_chain(list(ctx.tokens[-3:-1])), p=None)


def test_plain_greedy_matches_transformers_generate() -> None:
    model = tiny_llama(0, scale=30.0)
    ref = model.generate(torch.tensor([PROMPT]), max_new_tokens=12, do_sample=False, eos_token_id=None,
                         pad_token_id=2)[0, len(PROMPT):].tolist()
    out = generate(tiny_backend(0, scale=30.0), PROMPT, max_new_tokens=12)
    assert out.tokens == ref
    assert out.stats.steps == 12 and out.stats.drafted == 0


def test_tree_drafts_leave_greedy_output_unchanged() -> None:
    target = tiny_backend(1, scale=30.0)
    base = generate(target, PROMPT, max_new_tokens=20)
    caps = Capabilities(tree=True, deterministic_draft=True)
    spec = generate(target, PROMPT, bind(RandomTreeDrafter(), caps), max_new_tokens=20)
    assert spec.tokens == base.tokens
    assert spec.stats.drafted > 0


def test_max_tokens_eos_and_stop_strings() -> None:
    target = tiny_backend(2, scale=30.0)
    base = generate(target, PROMPT, max_new_tokens=16)
    assert len(base.tokens) == 16 and base.stop_reason == "max_tokens"
    # EOS: the greedy path emits base.tokens[5] at step 6; pretend it is the EOS id.
    eos = base.tokens[5]
    first = base.tokens.index(eos)
    out = generate(target, PROMPT, bind(RandomTreeDrafter(), Capabilities(deterministic_draft=True)),
                   max_new_tokens=16, eos_token_id=eos)
    assert out.tokens == base.tokens[: first + 1] and out.stop_reason == "eos"
    # Stop string: the text of tokens 7..9 ends the output at token 9.
    tok = CharTokenizer()
    stop = tok.decode(base.tokens[7:10])
    cut = next(i for i in range(1, 17) if stop in tok.decode(base.tokens[:i]))
    out = generate(target, PROMPT, bind(RandomTreeDrafter(), Capabilities(deterministic_draft=True)),
                   max_new_tokens=16, stop=[stop], tokenizer=tok)
    assert out.tokens == base.tokens[:cut] and out.stop_reason == "stop"
    assert out.text is not None and out.text.endswith(stop)
    with pytest.raises(ValueError):
        generate(target, PROMPT, stop=["x"])  # stop strings need a tokenizer


def test_max_new_tokens_cuts_a_long_acceptance() -> None:
    target = tiny_backend(3, scale=30.0)
    base = generate(target, PROMPT, max_new_tokens=3)

    class Oracle:  # proposes the greedy continuation itself: everything is accepted
        def propose(self, ctx: DraftContext) -> Draft:
            done = len(ctx.tokens) - len(PROMPT)
            return Draft(TokenTree.from_chain(full[done:done + 8]), p=None)

    full = generate(target, PROMPT, max_new_tokens=20).tokens
    out = generate(target, PROMPT, bind(Oracle(), Capabilities(deterministic_draft=True)), max_new_tokens=3)
    assert out.tokens == base.tokens and out.stats.steps == 2  # prefill, then one step


def test_seeded_sampling_reproduces_and_seeds_differ() -> None:
    target = tiny_backend(4)
    s = SamplingParams(temperature=1.0, top_k=20, top_p=0.9)
    a = generate(target, PROMPT, sampling=s, max_new_tokens=24, rng=np.random.default_rng(7))
    b = generate(target, PROMPT, sampling=s, max_new_tokens=24, rng=np.random.default_rng(7))
    c = generate(target, PROMPT, sampling=s, max_new_tokens=24, rng=np.random.default_rng(8))
    assert a.tokens == b.tokens and a.tokens != c.tokens


def test_stats_add_up() -> None:
    target = tiny_backend(5, scale=30.0)
    out = generate(target, PROMPT, bind(RandomTreeDrafter(), Capabilities(deterministic_draft=True)),
                   max_new_tokens=20)
    r = out.records
    assert out.stats.steps == len(r) and sum(x.emitted for x in r) == len(out.tokens) == 20
    assert out.stats.drafted == sum(x.drafted for x in r) and out.stats.accepted == sum(x.accepted for x in r)
    assert r[0].drafted == 0  # the prefill step drafts nothing
    assert all(x.first_rejection is None or x.first_rejection == x.accepted for x in r)
    assert 0 < out.stats.forward_seconds <= out.stats.seconds and out.stats.tokens_per_second > 0


def test_hidden_states_align_with_the_tokens_they_produced() -> None:
    """Row i of hidden["last"] belongs to tokens[-1 - n + i]; the last row produced the pending token."""
    target = tiny_backend(6, scale=30.0, hidden_layers=())
    probe = HiddenProbe()
    out = generate(target, PROMPT, bind(probe, Capabilities(needs_hidden_states=True, deterministic_draft=True)),
                   max_new_tokens=16)
    assert out.tokens == generate(target, PROMPT, max_new_tokens=16).tokens
    lm_head = target.model.lm_head
    first_tokens, first_hidden = probe.seen[0]
    assert first_hidden["last"].shape[0] == len(PROMPT) and set(first_hidden) == {"last", 0}
    assert len(probe.seen) > 3
    for step, (tokens, hidden) in enumerate(probe.seen):
        h = hidden["last"]
        assert h.ndim == 2 and hidden[0].shape == h.shape
        with torch.no_grad():
            predicted = lm_head(h.clone()).argmax(-1).tolist()
        n = h.shape[0]
        # Greedy: the row at token t predicts the token after t, i.e. tokens[-n + i]. After
        # prefill only the last row does (the prompt is not greedy text); later, every row.
        assert predicted[-1] == tokens[-1]
        if step > 0:
            assert predicted == list(tokens[-n:])


def test_observe_sees_committed_tokens_and_target_logits() -> None:
    seen: list[StepOutcome] = []

    class Watcher(RandomTreeDrafter):
        def observe(self, outcome: StepOutcome) -> None:
            seen.append(outcome)

    target = tiny_backend(7, scale=30.0)
    out = generate(target, PROMPT, bind(Watcher(), Capabilities(deterministic_draft=True)), max_new_tokens=12)
    assert seen and all(o.q_logits is not None and o.q_logits.shape == (len(o.draft) + 1, 64) for o in seen)
    last = seen[-1]
    assert list(last.tokens[len(PROMPT):]) == out.tokens[: len(last.tokens) - len(PROMPT)]


def test_sibling_probe_measures_sampled_rejections_without_changing_the_output() -> None:
    from picker.engine.siblings import SiblingProbe
    from strategies.vanilla.drafter import make_drafter

    target = tiny_backend(6, scale=8.0)  # sharp enough that the two models disagree
    s = SamplingParams(temperature=1.0)

    def run(probe: SiblingProbe | None, seed: int = 3) -> Any:
        drafter = make_drafter(target_backend=target, draft_backend=tiny_backend(7, scale=8.0), num_draft_tokens=3)
        return generate(target, PROMPT, bind(drafter, Capabilities(needs_draft_model=True)), sampling=s,
                        max_new_tokens=32, rng=np.random.default_rng(seed), observer=probe)

    probe = SiblingProbe(4)
    plain, probed = run(None), run(probe)
    sib = probe.steps[0]  # one (reached, accepted) per step of request 0
    assert len(sib) == len(probed.records)
    assert probed.tokens == plain.tokens  # its own generator: the generation's draws are untouched
    rejected = [k for k, r in enumerate(probed.records) if r.drafted and r.accepted < r.drafted]
    assert rejected and all(len(sib[k][0]) == 3 and sib[k][0][0] == 1.0 for k in rejected)
    assert all(0.0 <= a <= n for k in rejected for a, n in zip(sib[k][1], sib[k][0]))
    assert not any(sib[k][0] for k in range(len(sib)) if k not in rejected)
    greedy_probe = SiblingProbe(4)
    generate(target, PROMPT, bind(make_drafter(target_backend=target, draft_backend=tiny_backend(7, scale=8.0),
                                               num_draft_tokens=3), Capabilities(needs_draft_model=True)),
             max_new_tokens=16, observer=greedy_probe)
    assert not any(r for r, _ in greedy_probe.steps[0])  # at T = 0 only drafters that rank (last_scores)


def test_a_batched_draft_phase_is_timed_once_per_step() -> None:
    """At concurrency 4 a draft model drafts for all sequences in one phase: the run's draft time is
    that phase (counted once, disjoint from the target's forwards), each record's the whole phase."""
    from picker.engine.loop import serve
    from strategies.vanilla.drafter import make_drafter

    target = tiny_backend(6, scale=8.0).with_rows(4)
    drafter = make_drafter(target_backend=target, draft_backend=tiny_backend(7, scale=8.0), num_draft_tokens=3)
    prompts = [PROMPT, PROMPT[:3], PROMPT[1:], PROMPT[:5], PROMPT]
    run = serve(target, prompts, bind(drafter, Capabilities(needs_draft_model=True)), concurrency=4, max_new_tokens=12)
    assert 0.0 < run.draft_seconds <= run.seconds - run.forward_seconds
    per_record = sum(r.draft_seconds for g in run.generations for r in g.records)
    assert per_record > run.draft_seconds  # every live sequence's record carries the shared phase
    assert run.totals()["draft_seconds"] == run.draft_seconds
    assert [g.tokens for g in run.generations] == [serve(target, [p], max_new_tokens=12).generations[0].tokens
                                                   for p in prompts]


def test_a_prompt_joining_running_rows_is_prefilled_in_a_step_of_its_own() -> None:
    """Continuous batching: the third prompt takes the row the first frees, and its prefill runs
    in a forward of its own while the running row waits (padded into that row's step, its prompt
    would widen it to the prompt's length); the waiting row's output is unchanged."""
    from picker.engine.loop import serve

    target = tiny_backend(6, scale=8.0).with_rows(2)
    prompts, limits = [PROMPT, PROMPT[:3], PROMPT[2:]], [2, 5, 3]
    run = serve(target, prompts, concurrency=2, max_new_tokens=limits)
    third = run.generations[2]
    # Steps: 1-2 both rows (the first ends), 3 the third's prefill alone, 4-6 the rest.
    assert run.steps == 6 and third.joined == 2
    assert [len(g.records) for g in run.generations] == limits  # plain: one forward per token
    assert [g.tokens for g in run.generations] == [serve(target, [p], max_new_tokens=n).generations[0].tokens
                                                   for p, n in zip(prompts, limits)]

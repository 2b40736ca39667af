"""The built-in drafters on their own: prompt lookup's index, lookahead's window, vanilla's cache."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from picker.engine.backend import TorchBackend
from picker.engine.drafting import DraftContext, SamplingParams, StepOutcome, bind
from picker.engine.loop import generate
from picker.engine.plugins import load_strategies
from strategies.lookahead.drafter import LookaheadDrafter
from strategies.ngram.drafter import PromptLookupDrafter
from strategies.vanilla.drafter import DraftModelDrafter
from tests.tiny import tiny_backend, tiny_llama

torch.set_num_threads(1)


def ctx(tokens: Sequence[int], max_draft: int = 64, temperature: float = 0.0, seed: int = 0) -> DraftContext:
    return DraftContext(list(tokens), len(tokens), SamplingParams(temperature), np.random.default_rng(seed),
                        max_draft)


def lookup_by_scan(tokens: Sequence[int], k: int, n_max: int, n_min: int) -> tuple[int, ...]:
    """The O(L) definition prompt lookup must agree with: latest earlier match, longest n first."""
    length = len(tokens)
    for n in range(n_max, n_min - 1, -1):
        if length <= n:
            continue
        suffix = list(tokens[length - n:])
        for end in range(length - 1, n - 1, -1):
            if list(tokens[end - n:end]) == suffix:
                ext = list(tokens)
                for j in range(k):
                    ext.append(ext[end + j])
                return tuple(ext[length:])
    return ()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=1, max_size=60), st.integers(1, 40), st.integers(1, 6))
def test_prompt_lookup_index_agrees_with_a_scan(seq: list[int], split: int, k: int) -> None:
    """Indexed incrementally (reset on a prefix, observe the rest) == the brute-force scan."""
    drafter = PromptLookupDrafter(num_draft_tokens=k, n_max=3, n_min=1)
    drafter.reset(seq[: min(split, len(seq))])
    drafter.observe(StepOutcome(draft=None, accepted_nodes=(), emitted=(), tokens=seq))  # type: ignore[arg-type]
    assert drafter.propose(ctx(seq)).tree.tokens == lookup_by_scan(seq, k, 3, 1)


def test_prompt_lookup_prefers_longer_matches_and_respects_max_draft() -> None:
    drafter = PromptLookupDrafter(num_draft_tokens=4, n_max=2, n_min=1)
    seq = [1, 2, 8, 8, 3, 2, 7, 7, 1, 2]  # "1 2" -> 8 8 3 2 beats the later lone "2" -> 7 7
    drafter.reset(seq)
    assert drafter.propose(ctx(seq)).tree.tokens == (8, 8, 3, 2)
    assert drafter.propose(ctx(seq, max_draft=2)).tree.tokens == (8, 8)
    assert len(drafter.propose(ctx([4, 5, 6]))) == 0  # no earlier occurrence: nothing to propose


def test_lookahead_trie_merges_pool_and_window_and_updates_the_window() -> None:
    drafter = LookaheadDrafter(window=3, ngram=3, verify_set=2)
    seq = [10, 11, 12, 13, 14, 15, 16]
    drafter.reset(seq)
    levels_before = [list(level) for level in drafter._levels]
    draft = drafter.propose(ctx(seq))
    assert len(draft) == 3 * 2 and draft.p is None  # W x (N - 1) cells, no pool entries yet
    # The target "predicts" 40 + node after every node: the top level's guesses.
    q = np.full((len(draft) + 1, 64), -1.0)
    for row in range(len(draft) + 1):
        q[row, (40 + row) % 64] = 1.0
    drafter.observe(StepOutcome(draft, (), (5,), seq, q_logits=q))
    top_nodes = drafter._top
    assert drafter._levels[0] == levels_before[1]  # one Jacobi iteration: levels move down
    assert drafter._levels[1] == [(40 + n + 1) % 64 for n in top_nodes]
    # Each column's n-gram is in the pool under its first token.
    for j in range(3):
        key = levels_before[0][j]
        assert (levels_before[1][j], (40 + top_nodes[j] + 1) % 64) in drafter._pool[key]
    # A pool hit for the pending token rides in the same tree, merged with the window's prefix.
    drafter._pool[seq[-1]] = [(levels_before[1][0], 99)]
    nxt = drafter.propose(ctx(seq))
    assert 99 in nxt.tree.tokens and nxt.tree.parents[0] == -1
    assert len(drafter.propose(ctx(seq, max_draft=2))) == 2  # the budget cuts, the tree stays valid


def test_lookahead_pool_keeps_the_latest_g_continuations() -> None:
    drafter = LookaheadDrafter(window=1, ngram=2, verify_set=2)
    for y in (1, 2, 1, 3):
        drafter._remember((7, y))
    assert drafter._pool[7] == [(3,), (1,)]


def draft_cache_is_fresh(drafter: DraftModelDrafter, model: torch.nn.Module) -> bool:
    ref = TorchBackend(model)
    ref.prefill(drafter._fed)
    return all(
        torch.allclose(a, b, atol=1e-5)
        for (ka, va), (kb, vb) in zip(drafter.draft.cache_tensors(drafter.row, drafter.cached), ref.cache_tensors())
        for a, b in ((ka, kb), (va, vb))
    )


def test_vanilla_rolls_its_own_cache_back_to_the_committed_prefix() -> None:
    model = tiny_llama(11, scale=20.0)
    drafter = DraftModelDrafter(TorchBackend(model), num_draft_tokens=4)
    seq = [0, 5, 9, 11]
    drafter.reset(seq)
    d = drafter.propose(ctx(seq, temperature=1.0, seed=3))
    assert len(d) == 4 and d.p is not None and np.allclose(d.p.sum(axis=1), 1.0)
    assert all(d.p[i, t] > 0 for i, t in enumerate(d.tree.tokens))
    assert drafter._fed == [*seq, *d.tree.tokens[:3]] and draft_cache_is_fresh(drafter, model)
    # d_1 accepted, d_2 rejected and corrected to 63: the next proposal crops and re-feeds.
    seq2 = [*seq, d.tree.tokens[0], 63]
    d2 = drafter.propose(ctx(seq2, temperature=0.0))
    assert drafter._fed[: len(seq2)] == seq2 and draft_cache_is_fresh(drafter, model)
    assert d2.p is None  # greedy: the verifier never reads p
    # Full acceptance: d_4 was never fed; it is fed with the bonus token.
    seq3 = [*seq2, *d2.tree.tokens, 62]
    drafter.propose(ctx(seq3))
    assert drafter._fed[: len(seq3)] == seq3 and draft_cache_is_fresh(drafter, model)


def test_vanilla_forks_draft_together_as_they_would_alone() -> None:
    """propose_batch over forks at different lengths and rollbacks = each proposing alone, and every
    fork's row of the shared draft cache equals a fresh prefill of what it fed."""
    model = tiny_llama(11, scale=20.0)
    alone = [DraftModelDrafter(TorchBackend(model), num_draft_tokens=n) for n in (4, 2, 3)]
    root = DraftModelDrafter(TorchBackend(model), num_draft_tokens=4)
    together = [root, root.fork(), root.fork()]
    for d, n in zip(together, (4, 2, 3)):
        d.num_draft_tokens = n
    assert sorted(d.row for d in together) == [0, 1, 2]
    seqs = [[0, 5, 9, 11], [3, 4], [7, 7, 7, 1, 2, 6, 8]]
    for step in range(3):
        items = [(d, ctx(s, temperature=0.0)) for d, s in zip(together, seqs)]
        got = root.propose_batch(items)
        want = [d.propose(ctx(s, temperature=0.0)) for d, s in zip(alone, seqs)]
        assert [g.tree.tokens for g in got] == [w.tree.tokens for w in want]
        assert all(draft_cache_is_fresh(d, model) for d in together)
        # the next committed sequences: sequence 0 accepts all, 1 accepts none, 2 accepts one
        keep = (len(got[0]), 0, 1)
        seqs = [[*s, *g.tree.tokens[:k], 60 + step] for s, g, k in zip(seqs, got, keep)]


def test_vanilla_fork_rows_are_given_back() -> None:
    import gc

    root = DraftModelDrafter(TorchBackend(tiny_llama(11)), num_draft_tokens=2)
    rows = {root.fork().row for _ in range(5)}  # each fork dropped at once: its row is lent again
    gc.collect()
    assert rows == {1} and root.draft.rows == 2


def test_builtin_factories_build_through_the_registry(tmp_path: object) -> None:
    plugins = load_strategies(only_builtin=True)
    target = tiny_backend(12)
    model = tiny_llama(13)
    model.save_pretrained(tmp_path)
    vanilla = plugins["vanilla"].drafter_factory()(target_backend=target, artifact=tmp_path, num_draft_tokens=2)
    assert vanilla.num_draft_tokens == 2
    ngram = plugins["ngram"].drafter_factory()(target_backend=target, num_draft_tokens=7)
    assert ngram.num_draft_tokens == 7
    look = plugins["lookahead"].drafter_factory()(target_backend=target, window=2, ngram=4, verify_set=1)
    assert (look.W, look.N, look.G) == (2, 4, 1)
    out = generate(target, [0, 3, 4, 3, 4, 3], bind(look, plugins["lookahead"].capabilities), max_new_tokens=8)
    assert len(out.tokens) == 8


def test_prompt_lookup_on_a_new_sequence_without_reset() -> None:
    """reset() is optional: a drafter that indexed a long sequence and is then asked about a shorter
    one (a new generation) must propose from the new sequence alone, never index past its end."""
    import numpy as np

    from picker.engine.drafting import DraftContext, SamplingParams
    from strategies.ngram.drafter import PromptLookupDrafter

    d = PromptLookupDrafter(num_draft_tokens=3, n_max=2)
    rng = np.random.default_rng(0)
    long = [1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2]
    assert d.propose(DraftContext(long, 11, SamplingParams(), rng, 8)).tree.tokens == (3, 4, 5)
    short = [5, 6, 7, 5, 6]  # "5 6" was indexed at 4..5 of the long sequence: stale here
    assert d.propose(DraftContext(short, 5, SamplingParams(), rng, 8)).tree.tokens == (7, 5, 6)

"""The suffix drafter's parts: the counted trie (eviction undoes insertion exactly), the scored tree
(best-first, sized by the match, cut by probability), the shared response cache and its forks, and
what the drafter proposes from its own text versus earlier responses. Exactness through the real
loop is the conformance suite's (tests/conformance, every registered strategy)."""

from __future__ import annotations

import numpy as np
import pytest

from picker.engine.drafting import DraftContext, SamplingParams, StepOutcome
from strategies.suffix.drafter import ResponseCache, SuffixDrafter
from strategies.suffix.trie import Node, SuffixTrie


def _shape(node: Node) -> dict:
    return {t: (c.count, _shape(c)) for t, c in node.children.items()}


def _ctx(tokens: list[int], max_draft: int = 16) -> DraftContext:
    return DraftContext(tokens, 0, SamplingParams(), np.random.default_rng(0), max_draft)


def test_counts_are_occurrences_and_depth_is_bounded() -> None:
    trie = SuffixTrie(depth=3)
    trie.add([1, 2, 1, 2])
    assert trie.walk([1, 2]).count == 2 and trie.walk([2, 1]).count == 1  # type: ignore[union-attr]
    assert trie.walk([1, 2, 1]) is not None and trie.walk([1, 2, 1, 2]) is None


def test_removing_a_text_undoes_adding_it_exactly() -> None:
    rng = np.random.default_rng(0)
    texts = [list(rng.integers(0, 5, size=n)) for n in (12, 7, 30)]
    trie = SuffixTrie(depth=5)
    trie.add(texts[0])
    before = _shape(trie.root)
    for t in texts[1:]:
        trie.add(t)
    for t in texts[1:]:
        trie.remove(t)
    assert _shape(trie.root) == before


def test_append_equals_add() -> None:
    a, b = SuffixTrie(depth=4), SuffixTrie(depth=4)
    text = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]
    a.add(text)
    for t in text:
        b.append(t)
    assert _shape(a.root) == _shape(b.root)


def test_tree_is_best_first_and_cut_by_probability() -> None:
    trie = SuffixTrie(depth=6)
    trie.add([7, 1] * 1 + [7, 2] * 3 + [7, 3])  # after 7: 1 once, 2 three times, 3 once
    tree = trie.speculate([7], budget=8, max_depth=1, min_prob=0.0)
    assert tree.tokens[0] == 2 and tree.scores[0] == pytest.approx(3 / 5)
    cut = trie.speculate([7], budget=8, max_depth=1, min_prob=0.25)
    assert cut.tokens == (2,)
    assert all(p < i for i, p in enumerate(tree.parents) if p >= 0)  # parents come first


def test_longest_match_needs_a_continuation() -> None:
    trie = SuffixTrie(depth=8)
    trie.add([1, 2, 3, 9, 1, 2, 3])
    assert trie.longest_match([5, 1, 2, 3]) == (3, 1)  # "1 2 3" was followed by 9 once
    assert trie.longest_match([4, 4]) == (0, 0)


def test_speculation_grows_with_the_match_length() -> None:
    """max_spec_factor x match length: a longer match earns a longer draft (the paper's MAX_SPEC)."""
    d = SuffixDrafter(num_draft_tokens=32, max_spec_factor=1.0, min_token_prob=0.0)
    text = list(range(10, 30))
    d.reset(text)
    short = d.propose(_ctx([*text, 99, 10, 11]))          # matches "10 11"
    d.reset(text)
    long = d.propose(_ctx([*text, 99, *range(10, 16)]))  # matches "10 .. 15"
    assert len(short) == 2 and len(long) == 6
    assert long.tree.tokens == tuple(range(16, 22)) and long.p is None


def test_response_cache_is_shared_by_forks_and_bounded() -> None:
    d = SuffixDrafter(num_draft_tokens=8, max_cached_requests=2, max_spec_factor=4.0)
    e = d.fork()
    assert e.cache is d.cache
    for i, drafter in enumerate((d, e, d)):
        drafter.reset([1, 2])
        drafter.observe(StepOutcome(draft=None, accepted_nodes=(), emitted=(),  # type: ignore[arg-type]
                                    tokens=[1, 2, 40 + i, 41, 42, 43]))
        drafter.reset([5])  # the next request: the response enters the cache
    assert len(d.cache) == 2  # three responses, two kept


def test_an_earlier_response_is_proposed_to_a_new_request() -> None:
    """Cross-request: request B never saw the text, request A's response has it."""
    d = SuffixDrafter(num_draft_tokens=8, max_spec_factor=2.0)
    d.reset([9, 9])
    d.observe(StepOutcome(draft=None, accepted_nodes=(), emitted=(),  # type: ignore[arg-type]
                          tokens=[9, 9, 50, 51, 52, 53, 54, 55]))
    fresh = SuffixDrafter(num_draft_tokens=8, max_spec_factor=2.0)
    fresh.reset([7, 50, 51])
    assert len(fresh.propose(_ctx([7, 50, 51]))) == 0  # its own text has no continuation of "50 51"
    d.reset([7, 50, 51])  # A's response is cached now
    assert d.propose(_ctx([7, 50, 51])).tree.tokens == (52, 53, 54, 55)


def test_the_higher_scoring_tree_wins() -> None:
    cache = ResponseCache(depth=8, max_requests=8)
    for _ in range(3):
        cache.add([1, 2, 3, 4])
    d = SuffixDrafter(num_draft_tokens=4, max_spec_factor=4.0, cache=cache)
    d.reset([1, 2, 8, 1, 2])  # own text: "1 2" -> 8 (once); cache: "1 2" -> 3 4 (three times, certain)
    assert d.propose(_ctx([1, 2, 8, 1, 2])).tree.tokens[:2] == (3, 4)


def test_a_match_near_the_depth_still_leaves_room_for_the_whole_draft() -> None:
    """In a loop the match grows to the trie's depth; it is cut so the draft keeps its length."""
    d = SuffixDrafter(num_draft_tokens=4, max_tree_depth=8)
    loop = [1, 2, 3] * 10
    d.reset(loop)
    assert len(d.propose(_ctx(loop))) == 4


def test_the_match_used_leaves_the_most_room() -> None:
    d = SuffixDrafter(num_draft_tokens=32, max_tree_depth=24, max_spec_factor=1.0)
    assert d._match_cap(4) == 20 and d._match_cap(32) == 12  # 4 drafts after 20; 12 after 12

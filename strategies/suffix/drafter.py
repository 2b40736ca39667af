"""The `suffix` drafter (Suffix Decoding, Oliaro et al., arXiv:2411.04975): speculate what followed before.

Two counted suffix tries (:mod:`strategies.suffix.trie`):

- the request's own: its prompt and every token it has committed since, grown as it goes;
- a shared cache of earlier *responses* (the outputs of finished requests, not their prompts),
  bounded to ``max_cached_requests`` responses, the oldest evicted first.

Each step matches the longest suffix of the committed sequence that occurred before (followed by
something) in each trie, and grows a speculation tree below the match, best-first by the paper's
frequency score (a child's count over its parent's, multiplied along the path). The tree may hold
``max_spec_factor`` x (match length) nodes -- a longer match earns a bigger tree, the paper's
adaptive speculation length -- capped by ``num_draft_tokens`` and by what the loop verifies; nodes
scoring below ``min_token_prob`` are not proposed. Of the two tries' trees the one with more
expected accepted tokens (the sum of its scores) is proposed.

Drafts are a deterministic function of the history, sent with ``p=None``: the tree verifier accepts
``d`` with probability ``q(d)`` (recursive rejection over siblings), exact at any temperature.

A response enters the shared cache when its drafter starts the next request (``reset``): drafters
forked for concurrent sequences share one cache, as an engine's requests share its global tree.

    >>> import numpy as np
    >>> from picker.engine.drafting import DraftContext, SamplingParams
    >>> d = SuffixDrafter(num_draft_tokens=4, max_spec_factor=2.0)
    >>> d.reset([5, 6, 7])
    >>> seq = [5, 6, 7, 8, 9, 5, 6, 7]     # the request's own text: "5 6 7" was followed by "8 9"
    >>> d.propose(DraftContext(seq, 3, SamplingParams(), np.random.default_rng(0), 8)).tree.tokens
    (8, 9, 5, 6)
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence

from picker.engine.drafting import EMPTY_DRAFT, Draft, DraftContext, StepOutcome
from picker.engine.tree import TokenTree
from strategies.suffix.trie import EMPTY, Speculation, SuffixTrie

# vLLM's suffix_decoding_* defaults (vllm/config/speculative.py, 0.11.1 to 0.32.0), except the cache
# size: vLLM keeps 10 000 responses in C++; this Python reference keeps fewer (each costs up to
# depth x length trie nodes).
MAX_TREE_DEPTH = 24
MAX_CACHED_REQUESTS = 256
MAX_SPEC_FACTOR = 1.0
MIN_TOKEN_PROB = 0.1


class ResponseCache:
    """Earlier responses in one counted trie, at most ``max_requests`` of them (oldest out first)."""

    def __init__(self, depth: int, max_requests: int) -> None:
        self.trie = SuffixTrie(depth)
        self.max_requests = max_requests
        self._held: deque[tuple[int, ...]] = deque()

    def add(self, response: Sequence[int]) -> None:
        if self.max_requests <= 0 or not response:
            return
        self._held.append(tuple(response))
        self.trie.add(response)
        while len(self._held) > self.max_requests:
            self.trie.remove(self._held.popleft())

    def __len__(self) -> int:
        return len(self._held)


class SuffixDrafter:
    """Speculates from the request's own text and from a shared cache of earlier responses."""

    def __init__(self, num_draft_tokens: int = 16, max_depth: int | None = None, topk: int | None = None, *,
                 max_tree_depth: int = MAX_TREE_DEPTH, max_spec_factor: float = MAX_SPEC_FACTOR,
                 min_token_prob: float = MIN_TOKEN_PROB, max_cached_requests: int = MAX_CACHED_REQUESTS,
                 cache: ResponseCache | None = None) -> None:
        if num_draft_tokens < 1 or max_spec_factor < 0 or not 0 <= min_token_prob <= 1:
            raise ValueError("need num_draft_tokens >= 1, max_spec_factor >= 0, 0 <= min_token_prob <= 1")
        self.num_draft_tokens = num_draft_tokens
        self.max_depth = max_depth  # None: as deep as the trie allows after the match
        self.topk = topk            # None: every observed continuation may branch
        self.max_tree_depth = max_tree_depth
        self.max_spec_factor = max_spec_factor
        self.min_token_prob = min_token_prob
        self.cache = cache if cache is not None else ResponseCache(max_tree_depth, max_cached_requests)
        self._own = SuffixTrie(max_tree_depth)
        self._seen = 0          # tokens of the current sequence indexed in _own
        self._prompt_len = 0
        self._last: list[int] = []  # the current sequence, to cache its response at the next reset

    def fork(self) -> SuffixDrafter:
        """A drafter for another concurrent sequence: the same knobs and the SAME response cache."""
        return SuffixDrafter(self.num_draft_tokens, self.max_depth, self.topk, max_tree_depth=self.max_tree_depth,
                             max_spec_factor=self.max_spec_factor, min_token_prob=self.min_token_prob,
                             cache=self.cache)

    def reset(self, prompt_ids: Sequence[int]) -> None:
        """Cache the finished request's response; start a fresh trie over the new prompt."""
        self._finish()
        self._own = SuffixTrie(self.max_tree_depth)
        self._seen = 0
        self._prompt_len = len(prompt_ids)
        self._last = []
        self._index(prompt_ids)

    def observe(self, outcome: StepOutcome) -> None:
        self._index(outcome.tokens)

    def _finish(self) -> None:
        if len(self._last) > self._prompt_len:
            self.cache.add(self._last[self._prompt_len:])

    def _index(self, tokens: Sequence[int]) -> None:
        if len(tokens) < self._seen or (self._seen and tokens[self._seen - 1] != self._last[-1]):
            # Another sequence than the one indexed (no reset between generations: the hook is optional).
            self._finish()
            self._own, self._seen, self._prompt_len, self._last = SuffixTrie(self.max_tree_depth), 0, len(tokens), []
        for token in tokens[self._seen:]:
            self._own.append(int(token))
        self._last.extend(int(t) for t in tokens[self._seen:])
        self._seen = len(tokens)

    def _match_cap(self, cap: int) -> int:
        """The longest match worth using: a path holds match and draft together (max_tree_depth), so
        past some length a longer match leaves less room to draft than it earns. The length whose
        draft size min(cap, factor x m, depth - m) is largest, the longest among equals."""
        depth, f = self.max_tree_depth, self.max_spec_factor
        return max(range(1, depth), key=lambda m: (min(cap, math.floor(f * m), depth - m), m))

    def _grow(self, trie: SuffixTrie, tokens: Sequence[int], cap: int) -> Speculation:
        m, _ = trie.longest_match(tokens, max_len=self._match_cap(cap))
        if m == 0:
            return EMPTY
        budget = min(cap, math.floor(self.max_spec_factor * m))
        room = self.max_tree_depth - m  # the trie holds paths of max_tree_depth: match + speculation
        depth = room if self.max_depth is None else min(room, self.max_depth)
        return trie.speculate(tokens[len(tokens) - m:], budget=budget, max_depth=depth,
                              min_prob=self.min_token_prob, topk=self.topk)

    def propose(self, ctx: DraftContext) -> Draft:
        tokens = ctx.tokens
        self._index(tokens)  # a no-op when observe() kept up; makes the drafter hook-free
        cap = min(self.num_draft_tokens, ctx.max_draft)
        if cap < 1:
            return EMPTY_DRAFT
        own = self._grow(self._own, tokens, cap)
        shared = self._grow(self.cache.trie, tokens, cap) if len(self.cache) else EMPTY
        best = own if own.expected >= shared.expected else shared
        if not best.tokens:
            return EMPTY_DRAFT
        return Draft(TokenTree(best.tokens, best.parents), p=None)


def make_drafter(
    *, target_backend: object = None, artifact: object = None, num_draft_tokens: int = 16,
    max_depth: int | None = None, topk: int | None = None, max_tree_depth: int = MAX_TREE_DEPTH,
    max_spec_factor: float = MAX_SPEC_FACTOR, min_token_prob: float = MIN_TOKEN_PROB,
    max_cached_requests: int = MAX_CACHED_REQUESTS,
) -> SuffixDrafter:
    """No model, no artifact: the arguments are its own knobs (vLLM's suffix_decoding_* names)."""
    return SuffixDrafter(num_draft_tokens, max_depth, topk, max_tree_depth=max_tree_depth,
                         max_spec_factor=max_spec_factor, min_token_prob=min_token_prob,
                         max_cached_requests=max_cached_requests)

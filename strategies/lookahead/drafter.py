"""The `lookahead` drafter (Fu et al. 2024): a Jacobi window and an n-gram pool, one forward.

Parameters in the paper's notation: window size W, n-gram size N, verification set size G.

*Lookahead branch.* A 2-D window of N - 1 levels by W columns of guessed tokens. Cell (l, j) sits
at draft depth j + l + 1 and sees the committed prefix, the pending token, level 0's cells
0..j and the cells (1, j) .. (l - 1, j) of its own column: level 0 is a chain of guesses and
each column stacks levels 1..N-2 on top of it (the "diagonals" of the paper's figure). The
target's argmax after cell (N - 2, j) completes the n-gram ``(l_0[j], l_1[j], ..., l_{N-2}[j], y_j)``
that goes into the pool; then every level moves down one (level l <- level l + 1) and the top
level takes the new guesses y (one Jacobi iteration).

*Verification branch.* Up to G pool n-grams whose first token is the pending token propose their
N - 1 following tokens.

Both branches ride in the SAME target forward as one token tree: the candidate chains and the
window are inserted into a trie rooted at the pending token (shared prefixes are merged, so no
token is computed twice), and the window's next guesses are read from that forward's logits
(``StepOutcome.q_logits``) -- no second forward and no extra backend API. Deviation from the
paper, stated: the window's cells are ordinary tree nodes, so the verifier may also accept a
path through level 0 (a Jacobi guess chain) -- a free extra candidate. Verification is exact at
any temperature: every node is a deterministic function of the history, verified with
``p = None`` (accept ``d`` with probability ``q(d)``; picker.engine.verify, recursive rejection over
siblings). When k > 1 tokens are accepted the window is not re-aligned (the paper's
implementation does the same): its guesses only lose quality, never correctness.

    >>> import numpy as np
    >>> from picker.engine.drafting import DraftContext, SamplingParams
    >>> drafter = LookaheadDrafter(window=2, ngram=3, verify_set=2)
    >>> seq = [5, 6, 7, 8]
    >>> drafter.reset(seq)
    >>> d = drafter.propose(DraftContext(seq, 4, SamplingParams(), np.random.default_rng(0), 64))
    >>> len(d), d.p is None                        # 2 levels x 2 columns, no pool entries yet
    (4, True)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from picker.engine.drafting import EMPTY_DRAFT, Draft, DraftContext, StepOutcome
from picker.engine.tree import TokenTree


class _Trie:
    """Token paths from the root merged into tree nodes (node order is insertion order)."""

    def __init__(self, budget: int) -> None:
        self.tokens: list[int] = []
        self.parents: list[int] = []
        self._child: dict[tuple[int, int], int] = {}
        self.budget = budget

    def add(self, parent: int | None, token: int) -> int | None:
        """The node for ``token`` under ``parent`` (-1 = root; None = cut), made if the budget allows."""
        if parent is None:
            return None
        key = (parent, token)
        node = self._child.get(key)
        if node is None:
            if len(self.tokens) >= self.budget:
                return None
            node = len(self.tokens)
            self.tokens.append(token)
            self.parents.append(parent)
            self._child[key] = node
        return node


class LookaheadDrafter:
    """Jacobi window (W columns x N - 1 levels) + n-gram pool (up to G candidates per key)."""

    def __init__(self, window: int = 4, ngram: int = 3, verify_set: int = 4) -> None:
        if window < 1 or ngram < 2 or verify_set < 0:
            raise ValueError("need window >= 1, ngram >= 2, verify_set >= 0")
        self.W, self.N, self.G = window, ngram, verify_set
        self._levels: list[list[int]] = []
        self._pool: dict[int, list[tuple[int, ...]]] = {}
        self._top: list[int | None] = []  # per column: node of cell (N - 2, j) in the last draft

    def reset(self, prompt_ids: Sequence[int]) -> None:
        # Any initial guesses work (they are verified); prompt tokens beat random ones.
        n_cells = self.W * (self.N - 1)
        fill = [int(prompt_ids[(i + 1) % len(prompt_ids)]) for i in range(n_cells)]
        self._levels = [fill[level * self.W : (level + 1) * self.W] for level in range(self.N - 1)]
        self._pool = {}
        self._top = []

    def fork(self) -> LookaheadDrafter:
        """A drafter for another concurrent sequence: the same W, N, G; its own window and pool."""
        return LookaheadDrafter(window=self.W, ngram=self.N, verify_set=self.G)

    def propose(self, ctx: DraftContext) -> Draft:
        if not self._levels:
            self.reset(ctx.tokens)
        trie = _Trie(ctx.max_draft)
        # Verification branch first: pool candidates keep their nodes when the budget is tight.
        for cont in self._pool.get(int(ctx.tokens[-1]), ()):
            node: int | None = -1
            for tok in cont:
                node = trie.add(node, tok)
        # Lookahead branch: level 0 is a chain, every column stacks the higher levels on it.
        self._top = []
        base: int | None = -1
        for j in range(self.W):
            base = trie.add(base, self._levels[0][j])
            node = base
            for level in self._levels[1:]:
                node = trie.add(node, level[j])
            self._top.append(node)
        if not trie.tokens:
            return EMPTY_DRAFT
        return Draft(TokenTree(tuple(trie.tokens), tuple(trie.parents)), p=None)

    def observe(self, outcome: StepOutcome) -> None:
        if outcome.q_logits is None or not self._top:
            return
        # The target's greedy guess after every node: one vectorised argmax over the forward.
        guess = np.argmax(outcome.q_logits, axis=-1)
        new_top = list(self._levels[-1])
        for j, node in enumerate(self._top):
            if node is None:  # cut by the draft budget: keep the column as it was
                continue
            y = int(guess[node + 1])
            self._remember((*(level[j] for level in self._levels), y))
            new_top[j] = y
        # One Jacobi iteration: every level moves down, the fresh guesses become the top level.
        self._levels = [*self._levels[1:], new_top]

    def _remember(self, gram: tuple[int, ...]) -> None:
        """Most recent first; at most G distinct continuations per first token."""
        if self.G == 0:
            return
        key, cont = gram[0], gram[1:]
        conts = self._pool.setdefault(key, [])
        if cont in conts:
            conts.remove(cont)
        conts.insert(0, cont)
        del conts[self.G :]


def make_drafter(
    *, target_backend: object = None, artifact: object = None, window: int = 4, ngram: int = 3,
    verify_set: int = 4,
) -> LookaheadDrafter:
    """Lookahead needs no model and no artifact: the arguments are W, N and G."""
    return LookaheadDrafter(window=window, ngram=ngram, verify_set=verify_set)

"""A counted suffix trie of bounded depth, and the frequency-scored speculation tree grown from it.

Suffix Decoding (Oliaro et al., arXiv:2411.04975) keeps suffix trees whose nodes count how often
each continuation followed a pattern. Ours is the same structure cut at ``depth`` tokens: every
substring of length <= ``depth`` of the indexed text is a path from the root, and each node counts
the positions where its path occurred. Appending a token extends the (at most ``depth``) suffixes
that end at the previous position, so indexing costs O(depth) per token; removing a text undoes
exactly what adding it did, which is how a bounded cache evicts.

    >>> trie = SuffixTrie(depth=4)
    >>> trie.add([1, 2, 3, 1, 2, 4])
    >>> trie.longest_match([7, 1, 2])         # "1 2" occurred, and something followed it
    (2, 2)
    >>> tree = trie.speculate([1, 2], budget=3, max_depth=3, min_prob=0.1)
    >>> tree.tokens, tree.parents, [round(s, 2) for s in tree.scores]
    ((3, 4, 1), (-1, -1, 0), [0.5, 0.5, 0.5])

Scores (the paper's): a child's probability is its count over its parent's; a node's score is the
product along its path, the chance the target accepts it if the text repeats as counted. The tree
grows best-first by score, so every node's parent is in it.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass


class Node:
    """A trie node: how many indexed positions pass through it, and its children by token."""

    __slots__ = ("children", "count")

    def __init__(self) -> None:
        self.children: dict[int, Node] = {}
        self.count = 0


@dataclass(frozen=True)
class Speculation:
    """A speculation tree (parents index earlier nodes, -1 = the root) and each node's score."""

    tokens: tuple[int, ...]
    parents: tuple[int, ...]
    scores: tuple[float, ...]

    @property
    def expected(self) -> float:
        """Expected accepted tokens if acceptance follows the scores: the sum of path probabilities."""
        return sum(self.scores)


EMPTY = Speculation((), (), ())


class SuffixTrie:
    """Every substring of length <= ``depth`` of the texts added, counted.

    ``add(text)`` indexes a whole text; ``append(token)`` extends the one text being written
    (the active suffixes are kept between calls); ``remove(text)`` undoes an ``add``.
    """

    def __init__(self, depth: int) -> None:
        if depth < 2:
            raise ValueError("a suffix trie needs depth >= 2 (a pattern and one continuation)")
        self.depth = depth
        self.root = Node()
        self._active: list[Node] = []  # nodes of the suffixes ending at the last appended token

    def add(self, text: Sequence[int]) -> None:
        """Index ``text`` as a text of its own (the active suffixes of ``append`` are kept aside)."""
        saved, self._active = self._active, []
        for token in text:
            self.append(token)
        self._active = saved

    def append(self, token: int) -> None:
        """Extend the text being written by ``token``: every suffix ending here gains one count."""
        nxt = []
        for node in [self.root, *self._active]:
            child = node.children.get(token)
            if child is None:
                child = node.children[token] = Node()
            child.count += 1
            nxt.append(child)
        self._active = nxt[: self.depth - 1]  # a suffix of length depth is a leaf: never extended

    def remove(self, text: Sequence[int]) -> None:
        """Undo ``add(text)``: decrement every path it counted, dropping nodes that reach zero."""
        for start in range(len(text)):
            node = self.root
            for token in text[start: start + self.depth]:
                child = node.children[token]
                child.count -= 1
                if child.count == 0:
                    del node.children[token]  # its whole subtree came from this text alone
                    break
                node = child

    def walk(self, pattern: Sequence[int]) -> Node | None:
        """The node of ``pattern``, or None when it never occurred."""
        node = self.root
        for token in pattern:
            nxt = node.children.get(token)
            if nxt is None:
                return None
            node = nxt
        return node

    def longest_match(self, tokens: Sequence[int], max_len: int | None = None) -> tuple[int, int]:
        """(m, continuations): the longest suffix of ``tokens`` that occurred followed by something.

        A longer such suffix implies every shorter one (what followed it followed them too), so the
        search stops at the first length that fails. m is at most ``max_len`` and ``depth - 1``: a
        path holds match and speculation together, so a longer match leaves less room to draft.
        """
        best, kids = 0, 0
        top = self.depth - 1 if max_len is None else min(max_len, self.depth - 1)
        for m in range(1, min(len(tokens), top) + 1):
            node = self.walk(tokens[len(tokens) - m:])
            if node is None or not node.children:
                break
            best, kids = m, len(node.children)
        return best, kids

    def speculate(self, pattern: Sequence[int], *, budget: int, max_depth: int, min_prob: float,
                  topk: int | None = None) -> Speculation:
        """The best-scoring tree of at most ``budget`` nodes below ``pattern``'s node.

        Nodes go deeper than ``max_depth`` never, below ``min_prob`` never, and each node keeps its
        ``topk`` most frequent children at most (None: all). Ties go to the earlier-added node.
        """
        start = self.walk(pattern)
        if start is None or budget < 1 or max_depth < 1:
            return EMPTY
        tokens: list[int] = []
        parents: list[int] = []
        scores: list[float] = []
        heap: list[tuple[float, int, int, int, Node, int]] = []  # (-score, order, parent, token, node, depth)
        order = 0

        def push(node: Node, index: int, score: float, depth: int) -> None:
            nonlocal order
            if depth > max_depth or node.count == 0:
                return
            kids = sorted(node.children.items(), key=lambda kv: -kv[1].count)[:topk]
            for token, child in kids:
                s = score * child.count / node.count
                if s >= min_prob:
                    heapq.heappush(heap, (-s, order, index, token, child, depth))
                    order += 1

        push(start, -1, 1.0, 1)
        while heap and len(tokens) < budget:
            neg, _, parent, token, node, depth = heapq.heappop(heap)
            tokens.append(token)
            parents.append(parent)
            scores.append(-neg)
            push(node, len(tokens) - 1, -neg, depth + 1)
        return Speculation(tuple(tokens), tuple(parents), tuple(scores))

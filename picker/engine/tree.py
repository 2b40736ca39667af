"""Token trees: the topology a tree drafter proposes and the tree verifier walks.

A tree of M draft nodes is two tuples: ``tokens[i]`` and ``parents[i]``, where ``parents[i] == -1``
makes node i a child of the root (the last committed or pending token) and ``parents[i] < i``
otherwise, so node order is topological. Siblings are ordered by node index, and that order is the
order in which verification tries them. A chain of N drafts is the path tree
``0 <- 1 <- ... <- N-1``.

    >>> t = TokenTree.from_choices([[0], [1], [0, 0], [0, 1]], candidates=[[11, 12], [21, 22]])
    >>> t.tokens, t.parents
    ((11, 12, 21, 22), (-1, -1, 0, 0))
    >>> t.children(-1), t.path(3), t.depths
    ((0, 1), (0, 3), (1, 1, 2, 2))
    >>> t.ancestor_mask().astype(int)
    array([[1, 0, 0, 0],
           [0, 1, 0, 0],
           [1, 0, 1, 0],
           [1, 0, 0, 1]])

For one target forward over the tree, node i sits at position ``base + position_offsets()[i]``
(``base`` = position of the first draft) and attends to the committed prefix plus
``ancestor_mask()[i]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from numpy.typing import NDArray

__all__ = ["TokenTree"]


@dataclass(frozen=True)
class TokenTree:
    """Draft tokens with parent indices in topological order (``parents[i] < i``, -1 = root)."""

    tokens: tuple[int, ...]
    parents: tuple[int, ...]

    def __post_init__(self) -> None:
        # Accept any sequences but store plain-int tuples so the tree hashes and compares by value.
        object.__setattr__(self, "tokens", tuple(int(t) for t in self.tokens))
        object.__setattr__(self, "parents", tuple(int(a) for a in self.parents))
        if len(self.tokens) != len(self.parents):
            raise ValueError(
                f"TokenTree: {len(self.tokens)} tokens but {len(self.parents)} parents"
            )
        for i, (tok, par) in enumerate(zip(self.tokens, self.parents, strict=True)):
            if tok < 0:
                raise ValueError(f"TokenTree: node {i} has negative token {tok}")
            if not -1 <= par < i:
                raise ValueError(
                    f"TokenTree: node {i} has parent {par}; need -1 (root) or an earlier node"
                )

    @classmethod
    def from_chain(cls, tokens: Sequence[int]) -> TokenTree:
        """The path tree of a draft chain ``d_1 .. d_N``: node i's parent is i - 1."""
        return cls(tuple(tokens), tuple(range(-1, len(tokens) - 1)))

    @classmethod
    def from_choices(
        cls, choices: Sequence[Sequence[int]], candidates: Sequence[Sequence[int]]
    ) -> TokenTree:
        """Build a tree from Medusa-style index paths and per-depth top-k candidate tokens.

        ``choices`` lists paths of ranks, e.g. ``[[0], [1], [0, 0]]``: ``[0, 1]`` is the node
        reached by the rank-0 candidate at depth 1, then the rank-1 candidate at depth 2.
        ``candidates[h][r]`` is the token of rank r for depth h + 1 (head h). Nodes are ordered
        by depth, then by path, so siblings are tried in rank order. Every proper prefix of a
        path must be listed too.
        """
        paths = sorted({tuple(int(r) for r in c) for c in choices}, key=lambda c: (len(c), c))
        if len(paths) != len(choices):
            raise ValueError("TokenTree.from_choices: duplicate paths in choices")
        index = {path: i for i, path in enumerate(paths)}
        tokens: list[int] = []
        parents: list[int] = []
        for path in paths:
            if not path:
                raise ValueError("TokenTree.from_choices: empty path (the root is implicit)")
            head = len(path) - 1
            if head >= len(candidates) or not 0 <= path[-1] < len(candidates[head]):
                raise ValueError(f"TokenTree.from_choices: no candidate for path {list(path)}")
            if head > 0 and path[:-1] not in index:
                raise ValueError(f"TokenTree.from_choices: path {list(path)} lacks its prefix")
            tokens.append(int(candidates[head][path[-1]]))
            parents.append(index[path[:-1]] if head > 0 else -1)
        return cls(tuple(tokens), tuple(parents))

    def __len__(self) -> int:
        return len(self.tokens)

    @cached_property
    def depths(self) -> tuple[int, ...]:
        """Depth of each node: 1 for children of the root."""
        depth: list[int] = []
        for par in self.parents:
            depth.append(1 if par < 0 else depth[par] + 1)
        return tuple(depth)

    @cached_property
    def is_chain(self) -> bool:
        """True for a path ``0 <- 1 <- ... <- M-1`` (the empty tree included): no tree mask needed."""
        return all(parent == i - 1 for i, parent in enumerate(self.parents))

    @property
    def max_depth(self) -> int:
        """Length of the longest root-to-leaf path (0 for an empty tree)."""
        return max(self.depths, default=0)

    @cached_property
    def _children(self) -> dict[int, tuple[int, ...]]:
        kids: dict[int, list[int]] = {-1: []}
        for i, par in enumerate(self.parents):
            kids.setdefault(par, []).append(i)
        return {node: tuple(k) for node, k in kids.items()}

    def children(self, node: int) -> tuple[int, ...]:
        """Children of ``node`` (-1 = root) in sibling order, i.e. by increasing node index."""
        if not -1 <= node < len(self):
            raise IndexError(f"TokenTree.children: no node {node}")
        return self._children.get(node, ())

    def children_table(self) -> NDArray[np.int64]:
        """``(M + 1, K)``: row ``n + 1`` lists node n's children, -1 padded (read-only)."""
        return self._children_table

    @cached_property
    def _children_table(self) -> NDArray[np.int64]:
        kids = [self.children(n) for n in range(-1, len(self))]
        table = np.full((len(kids), max(map(len, kids))), -1, dtype=np.int64)
        for i, k in enumerate(kids):
            table[i, : len(k)] = k
        table.flags.writeable = False
        return table

    def path(self, node: int) -> tuple[int, ...]:
        """Node indices from the root's child down to ``node`` inclusive."""
        if not 0 <= node < len(self):
            raise IndexError(f"TokenTree.path: no node {node}")
        out = [node]
        while self.parents[out[-1]] >= 0:
            out.append(self.parents[out[-1]])
        return tuple(reversed(out))

    def is_root_path(self, nodes: Sequence[int]) -> bool:
        """True when ``nodes`` runs from a child of the root downwards, each the next's parent."""
        prev = -1
        for node in nodes:
            if not 0 <= node < len(self) or self.parents[node] != prev:
                return False
            prev = node
        return True

    def ancestor_mask(self) -> NDArray[np.bool_]:
        """Bool ``(M, M)``: entry ``[i, j]`` is True iff j is i or an ancestor of i (read-only)."""
        return self._ancestor_mask

    @cached_property
    def _ancestor_mask(self) -> NDArray[np.bool_]:
        m = len(self)
        mask = np.zeros((m, m), dtype=bool)
        for i, par in enumerate(self.parents):
            # Topological order: the parent's row is complete, so inherit it and add self.
            if par >= 0:
                mask[i] = mask[par]
            mask[i, i] = True
        mask.flags.writeable = False
        return mask

    def position_offsets(self) -> NDArray[np.int64]:
        """``depth - 1`` per node: add the position of the first draft to get position ids."""
        return np.asarray(self.depths, dtype=np.int64) - 1

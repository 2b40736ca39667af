"""Tree shapes as data: the one builder of Medusa-style ``choices`` (rank paths) for a tree budget.

A choice is the path of sibling ranks from the root to a node: ``[0]`` is the top-ranked guess at
depth 1, ``[0, 1]`` the second-ranked child of that node. The profiler's sweep asks Medusa heads
for these trees and the TensorRT-LLM config (``picker.recommend.engine_configs``) writes them
out, so both read the same builder; it is plain Python (no numpy), cheap for ``recommend``.

    >>> medusa_choices(depth=2, topk=2, nodes=4)
    [[0], [0, 0], [1], [0, 1]]
    >>> chain_choices(3)
    [[0], [0, 0], [0, 0, 0]]
"""

from __future__ import annotations

import heapq

# Acceptance used only to shape a tree when nothing was measured (the sweep's and the engine
# configs' default): what matters is the ordering it induces, not its value.
NOMINAL_ALPHA = 0.7


def medusa_choices(depth: int, topk: int, nodes: int, alpha: float = NOMINAL_ALPHA) -> list[list[int]]:
    """A Medusa tree as rank paths: ``nodes`` nodes, ≤ ``depth`` deep, ≤ ``topk`` children each.

    Grown best-first by path probability where the i-th ranked child (from 0) is accepted with
    α(1 − α)^i -- the positional model the policy scores trees with (``policies.theory.best_tree``).
    Paths come out in the order they were added, so every prefix of the list is itself a tree;
    ties in probability go to the lexicographically smaller path.
    """
    if min(depth, topk, nodes) < 1 or not 0.0 < alpha < 1.0:
        raise ValueError("a Medusa tree needs depth, topk, nodes >= 1 and 0 < alpha < 1")
    # Heap of (-path probability, path); the next sibling multiplies by (1 - α), the first child by α.
    frontier: list[tuple[float, tuple[int, ...]]] = [(-alpha, (0,))]
    paths: list[list[int]] = []
    while frontier and len(paths) < nodes:
        neg_p, path = heapq.heappop(frontier)
        paths.append(list(path))
        if path[-1] + 1 < topk:
            heapq.heappush(frontier, (neg_p * (1.0 - alpha), (*path[:-1], path[-1] + 1)))
        if len(path) < depth:
            heapq.heappush(frontier, (neg_p * alpha, (*path, 0)))
    return paths


def chain_choices(length: int) -> list[list[int]]:
    """A chain of ``length`` drafts as rank paths: each depth's top-ranked guess."""
    return [[0] * k for k in range(1, length + 1)]

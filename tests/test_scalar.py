"""The scalar hot paths used by `specpick recommend` agree with the numpy theory they mirror."""

from __future__ import annotations

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from policies import theory
from policies.scalar import chain_length, tree_length


@settings(max_examples=200, deadline=None)
@given(alpha=st.floats(0.0, 1.0), n=st.integers(0, 16))
def test_chain_length_matches_theory(alpha: float, n: int) -> None:
    assert abs(chain_length(alpha, n) - float(theory.expected_length_iid(alpha, n))) < 1e-9


@settings(max_examples=200, deadline=None)
@given(alpha=st.floats(0.0, 1.0), depth=st.integers(1, 8), topk=st.sampled_from([1, 2, 4, 8]),
       nodes=st.integers(0, 64))
def test_tree_length_matches_best_tree(alpha: float, depth: int, topk: int, nodes: int) -> None:
    parents, accept = theory.best_tree(theory.sibling_acceptance(alpha, topk), nodes, max_depth=depth)
    expected = theory.expected_length_tree(parents, accept)
    assert abs(tree_length(alpha, depth, topk, nodes) - expected) < 1e-9


@settings(max_examples=200, deadline=None)
@given(alpha=st.floats(0.0, 1.0), depth=st.integers(1, 6), topk=st.sampled_from([2, 4, 8]),
       nodes=st.integers(0, 32), siblings=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=7))
def test_tree_length_with_measured_siblings_matches_best_tree(alpha: float, depth: int, topk: int, nodes: int,
                                                             siblings: list[float]) -> None:
    # The greedy is optimal (and its ties harmless) for non-increasing sibling odds, which is what a
    # drafter's ranking gives: a later rank never wins more often than an earlier one.
    s = tuple(siblings)
    odds = theory.sibling_acceptance(alpha, topk, s)
    assume(bool(np.all(np.diff(odds) <= 0)))
    parents, accept = theory.best_tree(theory.sibling_acceptance(alpha, topk, s), nodes, max_depth=depth)
    assert abs(tree_length(alpha, depth, topk, nodes, s) - theory.expected_length_tree(parents, accept)) < 1e-9


def test_measured_siblings_lower_a_tree_and_leave_chains_alone() -> None:
    assert tree_length(0.7, 4, 4, 11, (0.25,)) < tree_length(0.7, 4, 4, 11) - 0.3
    assert tree_length(0.7, 4, 1, 4, (0.25,)) == chain_length(0.7, 4)
    # s_r = α for every rank is the textbook model itself.
    assert abs(tree_length(0.6, 3, 4, 9, (0.6,)) - tree_length(0.6, 3, 4, 9)) < 1e-12


def test_a_chain_tree_is_the_chain() -> None:
    for n in range(1, 9):
        assert abs(tree_length(0.7, n, 1, n) - chain_length(0.7, n)) < 1e-12

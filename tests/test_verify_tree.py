"""Token trees and tree verification: topology helpers, greedy walks, chi-square tests with power.

The statistical harness is the chain one (``test_verify_chain.py``): the same Markov toy target and
draft over V = 6 tokens, the same decode-until-two-tokens loop and the same :func:`gof_pvalue`.
Here each step drafts a whole tree of a fixed shape, drawn in one of three ways:

* ``iid``: every child sampled from its parent's draft distribution independently;
* ``without_replacement``: siblings sampled one after another, earlier siblings' tokens excluded;
* ``top_k``: the k most likely draft tokens, deterministically (verified with ``p=None``).

Exact regimes must pass; regimes that are not exact (documented in ``picker.engine.verify``) must fail.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, cast

import numpy as np
import pytest

from picker.engine.sampling import FloatArray, IntArray, sample_batch, warp, warp_pair
from picker.engine.tree import TokenTree
from picker.engine.verify import (
    BatchVerifyResult,
    SiblingRegime,
    VerifyResult,
    verify_greedy_chain,
    verify_greedy_tree,
    verify_sample_chain,
    verify_sample_tree,
    verify_sample_tree_batch,
)
from tests.test_verify_chain import (
    ALPHA,
    N_SAMPLES,
    RANDOM_P_LOGITS,
    RANDOM_Q_LOGITS,
    START,
    ToyPair,
    V,
    collect_two,
    gof_pvalue,
    stack_results,
)

Draw = Literal["iid", "without_replacement", "top_k"]
TreeVerifier = Callable[..., BatchVerifyResult]

# ---------------------------------------------------------------------------------------------
# The harness
# ---------------------------------------------------------------------------------------------


def draw_trees(
    p_table: FloatArray,
    ctx: IntArray,
    parents: tuple[int, ...],
    draw: Draw,
    rng: np.random.Generator,
) -> tuple[IntArray, IntArray]:
    """Draft one tree per context: tokens (B, M) and each node's parent context (B, M)."""
    batch, m = ctx.size, len(parents)
    tok = np.empty((batch, m), dtype=np.int64)
    parent_ctx = np.empty((batch, m), dtype=np.int64)
    ranked = np.argsort(-p_table, axis=1, kind="stable")  # top-k children, ties to the lower index
    for i, par in enumerate(parents):
        pc = ctx if par < 0 else tok[:, par]
        parent_ctx[:, i] = pc
        earlier = [j for j in range(i) if parents[j] == par]
        if draw == "top_k":
            tok[:, i] = ranked[pc, len(earlier)]
            continue
        w = p_table[pc]
        if draw == "without_replacement":
            for j in earlier:
                w[np.arange(batch), tok[:, j]] = 0.0
        tok[:, i] = sample_batch(w, rng)
    return tok, parent_ctx


@dataclass(frozen=True)
class TreeCase:
    name: str
    pair: ToyPair
    parents: tuple[int, ...]
    draw: Draw
    # How the verifier is told the children were drawn; "deterministic" passes p=None.
    verify_as: Literal["iid", "without_replacement", "deterministic"]


def run_tree(
    case: TreeCase, verifier: TreeVerifier, n_samples: int = N_SAMPLES, seed: int = 0
) -> IntArray:
    """Decode with tree drafts until two tokens are out, per sample; return them (n, 2)."""
    q_table, p_table = case.pair.tables()
    draft_rng, verify_rng = np.random.default_rng([seed, 3]), np.random.default_rng([seed, 4])
    out = np.full((n_samples, 2), -1, dtype=np.int64)
    have = np.zeros(n_samples, dtype=np.int64)
    ctx = np.full(n_samples, START, dtype=np.int64)
    deterministic = case.verify_as == "deterministic"
    siblings = "iid" if deterministic else case.verify_as
    while (todo := np.flatnonzero(have < 2)).size:
        tok, parent_ctx = draw_trees(p_table, ctx[todo], case.parents, case.draw, draft_rng)
        q_all = q_table[np.concatenate([ctx[todo, None], tok], axis=1)]  # root, then each node
        p_all = None if deterministic else p_table[parent_ctx]
        res = verifier(case.parents, tok, p_all, q_all, verify_rng, siblings=siblings)
        collect_two(out, have, ctx, todo, res)
    return out


def tree_pvalues(
    case: TreeCase, verifier: TreeVerifier, n_samples: int = N_SAMPLES, seed: int = 0
) -> tuple[float, float]:
    """p-values of (first token, first two tokens jointly) against the exact target law."""
    toks = run_tree(case, verifier, n_samples, seed)
    q_table, _ = case.pair.tables()
    joint = toks[:, 0] * V + toks[:, 1]
    return gof_pvalue(toks[:, 0], q_table[START]), gof_pvalue(joint, case.pair.joint())


def per_sample_tree(verify_one: Callable[..., VerifyResult]) -> TreeVerifier:
    """Run a single-tree verifier row by row, so the batched harness can test it too."""

    def batched(
        parents: tuple[int, ...],
        tok: IntArray,
        p: Any,
        q: FloatArray,
        rng: np.random.Generator,
        siblings: str = "iid",
    ) -> BatchVerifyResult:
        rows = [
            verify_one(
                TokenTree(t, parents), None if p is None else p[j], q[j], rng, siblings=siblings
            )
            for j, t in enumerate(tok.tolist())
        ]
        return stack_results(rows, TokenTree((0,) * len(parents), parents).max_depth)

    return batched


SHAPE_2X2 = (-1, -1, 0, 0, 1, 1)  # two children of the root, each with two children
SHAPE_3_1 = (-1, -1, -1, 0)  # three children of the root, the first has one child
SHAPE_1X3 = (-1, 0, 0, 0)  # one child of the root with three children
SHAPE_3X2 = (-1, -1, -1, 0, 0, 1, 1, 2)  # 3 root children; 2, 2 and 1 grandchildren


def _support(logits: FloatArray, keep: list[int]) -> FloatArray:
    out = np.full_like(logits, -np.inf)
    out[:, keep] = logits[:, keep]
    return out


RANDOM = ToyPair(RANDOM_Q_LOGITS, RANDOM_P_LOGITS)
TREE_CASES = [
    TreeCase("iid_2x2_random", RANDOM, SHAPE_2X2, "iid", "iid"),
    TreeCase(
        "iid_3-1_p_equals_q", ToyPair(RANDOM_Q_LOGITS, RANDOM_Q_LOGITS), SHAPE_3_1, "iid", "iid"
    ),
    TreeCase(
        "iid_1x3_flat_p_peaked_q",
        ToyPair(RANDOM_Q_LOGITS * 2.5, RANDOM_P_LOGITS * 0.15),
        SHAPE_1X3,
        "iid",
        "iid",
    ),
    TreeCase(
        "iid_2x2_disjoint",
        ToyPair(_support(RANDOM_Q_LOGITS, [3, 4, 5]), _support(RANDOM_P_LOGITS, [0, 1, 2])),
        SHAPE_2X2,
        "iid",
        "iid",
    ),
    TreeCase("wor_2x2_random", RANDOM, SHAPE_2X2, "without_replacement", "without_replacement"),
    TreeCase(
        "wor_3x2_peaked_p_flat_q_t08_topk4",
        ToyPair(RANDOM_Q_LOGITS * 0.15, RANDOM_P_LOGITS * 2.5, temperature=0.8, top_k=4),
        SHAPE_3X2,
        "without_replacement",
        "without_replacement",
    ),
    TreeCase("topk_2x2_random", RANDOM, SHAPE_2X2, "top_k", "deterministic"),
    TreeCase(
        "topk_3-1_t13_topp09",
        ToyPair(RANDOM_Q_LOGITS, RANDOM_P_LOGITS, temperature=1.3, top_p=0.9),
        SHAPE_3_1,
        "top_k",
        "deterministic",
    ),
    TreeCase("iid_drawn_verified_deterministic", RANDOM, SHAPE_3X2, "iid", "deterministic"),
]

# Regimes that are NOT exact: the verifier is told a sampling story that is not how the children
# were drawn. picker.engine.verify documents both; these cases must be rejected.
NOT_EXACT_CASES = [
    TreeCase("topk_drawn_verified_iid", RANDOM, SHAPE_3_1, "top_k", "iid"),
    TreeCase("wor_drawn_verified_iid", RANDOM, SHAPE_3X2, "without_replacement", "iid"),
]


# ---------------------------------------------------------------------------------------------
# Statistical tests
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", TREE_CASES, ids=lambda c: c.name)
def test_sample_tree_matches_target(case: TreeCase) -> None:
    p_first, p_joint = tree_pvalues(case, verify_sample_tree_batch)
    assert p_first > ALPHA, f"first token differs from q: p = {p_first:.3g}"
    assert p_joint > ALPHA, f"first two tokens differ from q: p = {p_joint:.3g}"


@pytest.mark.parametrize("case", NOT_EXACT_CASES, ids=lambda c: c.name)
def test_mismatched_sibling_regime_is_detected(case: TreeCase) -> None:
    _, p_joint = tree_pvalues(case, verify_sample_tree_batch)
    assert p_joint < ALPHA, f"expected a biased output, got p = {p_joint:.3g}"


@pytest.mark.slow  # ~10-30 s; the coupling test below covers the default run
def test_single_tree_verifier_matches_target_directly() -> None:
    """The single-tree verifier through the same harness (slower: one Python call per step)."""
    case = next(c for c in TREE_CASES if c.name == "wor_2x2_random")
    p_first, p_joint = tree_pvalues(case, per_sample_tree(verify_sample_tree), seed=12)
    assert p_first > ALPHA and p_joint > ALPHA, (p_first, p_joint)


# ---------------------------------------------------------------------------------------------
# Coupling: batched == single, tree on a path == chain
# ---------------------------------------------------------------------------------------------


def _random_rows(g: np.random.Generator, batch: int, rows: int) -> FloatArray:
    """Probability rows with edge cases mixed in: one-hot rows (T = 0) and flat rows."""
    x = warp(g.normal(size=(batch, rows, V)) * g.choice([0.3, 2.0, 6.0], size=(batch, 1, 1)))
    x[1::9] = warp(g.normal(size=x[1::9].shape), temperature=0.0)
    x[2::9] = 1.0 / V
    return x


@pytest.mark.parametrize("shape", [SHAPE_2X2, SHAPE_3X2, (-1, 0, 1), ()], ids=str)
@pytest.mark.parametrize("regime", ["iid", "without_replacement", "deterministic"])
def test_batched_and_single_tree_verifiers_are_one_function(
    shape: tuple[int, ...], regime: str
) -> None:
    g = np.random.default_rng(len(shape) * 7 + len(regime))
    batch = 1500
    q = _random_rows(g, batch, len(shape) + 1)
    p = warp(g.normal(size=(batch, len(shape), V)) * 2.0)
    for i, par in enumerate(shape):  # p == q: node i's draft equals the target at its parent
        p[3::9, i] = q[3::9, par + 1]
    draw: Draw = "without_replacement" if regime == "without_replacement" else "iid"
    tok = np.empty((batch, len(shape)), dtype=np.int64)
    for i, par in enumerate(shape):  # draw children per regime from each node's own p row
        w = p[:, i].copy()
        if draw == "without_replacement":
            sibs = [j for j in range(i) if shape[j] == par]
            if sibs:
                p[:, i] = p[:, sibs[0]]
                w = p[:, i].copy()
                for j in sibs:
                    w[np.arange(batch), tok[:, j]] = 0.0
        tok[:, i] = sample_batch(w, g)
    p_arg = None if regime == "deterministic" else p
    siblings: SiblingRegime = "iid" if regime == "deterministic" else cast(SiblingRegime, regime)
    batched = verify_sample_tree_batch(shape, tok, p_arg, q, np.random.default_rng(2), siblings)
    one_rng = np.random.default_rng(2)
    for j in range(batch):
        tree = TokenTree(tuple(tok[j].tolist()), shape)
        single = verify_sample_tree(
            tree, None if p_arg is None else p_arg[j], q[j], one_rng, siblings
        )
        assert batched[j] == single, j


def test_tree_on_a_path_is_the_chain_verifier() -> None:
    g = np.random.default_rng(8)
    for _ in range(300):
        n = int(g.integers(0, 5))
        q, p = warp_pair(g.normal(size=(n + 1, V)) * 2, g.normal(size=(n, V)) * 2)
        assert p is not None
        draft = [int(np.argmax(g.multinomial(1, row))) for row in p]
        seed = int(g.integers(1 << 30))
        for p_arg in (p, None):
            chain = verify_sample_chain(draft, p_arg, q, np.random.default_rng(seed))
            tree = verify_sample_tree(
                TokenTree.from_chain(draft), p_arg, q, np.random.default_rng(seed)
            )
            assert chain == tree
        assert verify_greedy_tree(TokenTree.from_chain(draft), q) == verify_greedy_chain(draft, q)


# ---------------------------------------------------------------------------------------------
# Greedy and hand-computed cases
# ---------------------------------------------------------------------------------------------


def test_greedy_tree_hand_computed() -> None:
    # root -> {0: tok 1, 1: tok 2}; node 0 -> {2: tok 0, 3: tok 2}; node 1 -> {4: tok 1}
    tree = TokenTree((1, 2, 0, 2, 1), (-1, -1, 0, 0, 1))
    q = np.zeros((6, 3))
    q[0, 2] = q[2, 1] = q[3, 0] = q[4, 0] = q[5, 2] = 1.0  # row 1 + i: after node i
    q[1, 2] = 1.0
    # argmax at root = 2 -> node 1; after node 1 argmax = 1 -> node 4; after node 4 argmax = 2.
    assert verify_greedy_tree(tree, q) == VerifyResult(2, (2, 1, 2), (1, 4))
    q[0] = [0.1, 0.7, 0.2]  # now token 1 -> node 0; after node 0 argmax = 2 -> node 3 (a leaf)
    assert verify_greedy_tree(tree, q) == VerifyResult(2, (1, 2, 0), (0, 3))
    q[0] = [0.8, 0.1, 0.1]  # no child has token 0: the extra token is the root argmax
    assert verify_greedy_tree(tree, q) == VerifyResult(0, (0,), ())


def test_greedy_tree_takes_the_first_of_duplicate_siblings() -> None:
    tree = TokenTree((4, 4), (-1, -1))
    q = np.eye(5)[[4, 1, 2]]
    assert verify_greedy_tree(tree, q) == VerifyResult(1, (4, 1), (0,))


def test_sampling_tree_at_temperature_zero_is_greedy() -> None:
    g = np.random.default_rng(6)
    for _ in range(200):
        tok = g.integers(0, V, size=len(SHAPE_3X2))
        q_logits = g.normal(size=(len(SHAPE_3X2) + 1, V))
        tok[0] = np.argmax(q_logits[0])  # make sure some paths get accepted
        tree = TokenTree(tuple(tok.tolist()), SHAPE_3X2)
        q = warp(q_logits, temperature=0.0)
        expect = verify_greedy_tree(tree, q)
        assert verify_sample_tree(tree, None, q, g) == expect
        p = warp(np.where(np.eye(V, dtype=bool)[tok], 1.0, 0.0), temperature=0.0)  # T=0 draft
        assert verify_sample_tree(tree, p, q, g) == expect


def test_sample_tree_hand_computed() -> None:
    # Deterministic children: tokens 0 then 1; q puts no mass on 0, so child 0 is always
    # rejected, q becomes q without 0 (unchanged), and child 1 is accepted with q(1) = 1.
    tree = TokenTree((0, 1), (-1, -1))
    q = np.array([[0.0, 1.0, 0.0], [0.2, 0.3, 0.5], [0.0, 0.0, 1.0]])
    for seed in range(10):
        assert verify_sample_tree(tree, None, q, np.random.default_rng(seed)) == VerifyResult(
            1, (1, 2), (1,)
        )


def test_sample_tree_input_errors() -> None:
    tree = TokenTree((1, 1), (-1, -1))
    q = warp(np.zeros((3, 3)))
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="siblings regime"):
        verify_sample_tree(tree, None, q, rng, siblings="sorted")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="q: expected shape"):
        verify_sample_tree(tree, None, q[:2], rng)
    p = np.array([[0.0, 1.0, 0.0], [0.0, 1.0, 0.0]])
    # Drawn without replacement, the second sibling cannot repeat token 1.
    with pytest.raises(ValueError):
        for seed in range(50):  # only reached when the first sibling is rejected
            verify_sample_tree(
                tree, p, warp(np.zeros((3, 3))), np.random.default_rng(seed), "without_replacement"
            )


# ---------------------------------------------------------------------------------------------
# TokenTree
# ---------------------------------------------------------------------------------------------


def test_token_tree_helpers() -> None:
    t = TokenTree((5, 6, 7, 8, 9), (-1, -1, 0, 0, 2))
    assert len(t) == 5
    assert t.depths == (1, 1, 2, 2, 3) and t.max_depth == 3
    assert t.children(-1) == (0, 1) and t.children(0) == (2, 3) and t.children(4) == ()
    assert t.path(4) == (0, 2, 4) and t.path(1) == (1,)
    assert t.position_offsets().tolist() == [0, 0, 1, 1, 2]
    expected = np.array(
        [
            [1, 0, 0, 0, 0],
            [0, 1, 0, 0, 0],
            [1, 0, 1, 0, 0],
            [1, 0, 0, 1, 0],
            [1, 0, 1, 0, 1],
        ],
        dtype=bool,
    )
    np.testing.assert_array_equal(t.ancestor_mask(), expected)
    assert t.children_table().tolist() == [[0, 1], [2, 3], [-1, -1], [4, -1], [-1, -1], [-1, -1]]
    assert (
        t.is_root_path((0, 2, 4)) and not t.is_root_path((2, 4)) and not t.is_root_path((0, 3, 4))
    )


def test_token_tree_masks_are_read_only_and_cached() -> None:
    t = TokenTree((1, 2), (-1, 0))
    with pytest.raises(ValueError):
        t.ancestor_mask()[0, 1] = True
    assert t.ancestor_mask() is t.ancestor_mask()


def test_token_tree_from_chain() -> None:
    t = TokenTree.from_chain([4, 5, 6])
    assert t.parents == (-1, 0, 1) and t.tokens == (4, 5, 6)
    np.testing.assert_array_equal(t.ancestor_mask(), np.tril(np.ones((3, 3), dtype=bool)))
    assert TokenTree.from_chain([]) == TokenTree((), ())


def test_token_tree_from_choices_orders_by_depth_then_rank() -> None:
    cand = [[10, 11, 12], [20, 21], [30]]
    t = TokenTree.from_choices([[1, 0], [0], [0, 1], [1], [0, 0], [0, 0, 0]], cand)
    # paths sorted: [0], [1], [0,0], [0,1], [1,0], [0,0,0]
    assert t.tokens == (10, 11, 20, 21, 20, 30)
    assert t.parents == (-1, -1, 0, 0, 1, 2)
    assert t.children(0) == (2, 3)


@pytest.mark.parametrize(
    ("choices", "match"),
    [
        ([[0], [0]], "duplicate"),
        ([[0, 1]], "prefix"),
        ([[3]], "no candidate"),
        ([[0], [0, 0], [0, 0, 0]], "no candidate"),
        ([[]], "empty"),
    ],
)
def test_token_tree_from_choices_errors(choices: list[list[int]], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        TokenTree.from_choices(choices, [[1, 2], [3, 4]])


@pytest.mark.parametrize(
    ("tokens", "parents", "match"),
    [
        ((1, 2), (-1,), "parents"),
        ((1, 2), (-1, 1), "parent 1"),
        ((1, 2), (-1, 5), "parent 5"),
        ((1,), (-2,), "parent -2"),
        ((-1,), (-1,), "negative token"),
    ],
)
def test_token_tree_validation(
    tokens: tuple[int, ...], parents: tuple[int, ...], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        TokenTree(tokens, parents)


def test_token_tree_index_errors() -> None:
    t = TokenTree((1,), (-1,))
    with pytest.raises(IndexError):
        t.children(1)
    with pytest.raises(IndexError):
        t.path(-1)

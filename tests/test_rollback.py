"""KV-cache rollback bookkeeping: crops after chains, compaction after trees, pending tokens."""

from __future__ import annotations

import numpy as np
import pytest

from picker.engine.rollback import CacheEdit, KVLedger
from picker.engine.tree import TokenTree
from picker.engine.verify import VerifyResult


class FakeCache:
    """A stand-in for a model's KV cache: one (token, position) entry per slot."""

    def __init__(self) -> None:
        self.slots: list[tuple[int, int]] = []

    def run(self, fwd_tokens: tuple[int, ...], positions: tuple[int, ...]) -> None:
        self.slots.extend(zip(fwd_tokens, positions, strict=True))

    def apply(self, edit: CacheEdit) -> None:
        moved = [self.slots[i] for i in edit.keep]  # gather first: sources may overlap targets
        self.slots[edit.base : edit.base + len(moved)] = moved
        del self.slots[edit.length :]


def test_rejection_at_draft_3_crops_to_prefix_plus_2() -> None:
    """Prefix of 10 tokens, 5 drafts verified, rejection at draft 3 -> cache cropped to 10 + 2."""
    prompt = list(range(100, 110))
    ledger, cache = KVLedger(prompt), FakeCache()
    drafts = [1, 2, 3, 4, 5]
    fwd = ledger.forward(drafts)
    cache.run(fwd.tokens, fwd.positions)
    assert fwd.tokens == (*prompt, *drafts) and fwd.positions == tuple(range(15))
    assert fwd.start + len(fwd.tokens) == len(cache.slots) == 15  # what the cache holds in flight
    assert fwd.q_rows == slice(9, 15)  # q_1 (after the last prompt token) .. q_6 (after d_5)

    correction = 77  # d_1, d_2 accepted; d_3 rejected and replaced by the correction
    edit = ledger.commit(VerifyResult(2, (1, 2, correction), (0, 1)))
    assert edit == CacheEdit(length=12, base=10, keep=(10, 11)) and edit.is_crop
    cache.apply(edit)
    assert ledger.cache_len == len(cache.slots) == 10 + 2
    assert ledger.sequence[: ledger.cache_len] == (*prompt, 1, 2)
    # The correction is emitted but not in the cache yet...
    assert ledger.pending == (correction,)
    assert ledger.sequence == (*prompt, 1, 2, correction)
    assert correction not in [tok for tok, _ in cache.slots]
    # ...it enters with the next forward, at slot and position 12.
    fwd = ledger.forward([9, 9])
    cache.run(fwd.tokens, fwd.positions)
    assert fwd.tokens[0] == correction and fwd.start == 12 and fwd.positions[0] == 12
    assert cache.slots[12] == (correction, 12)
    cache.apply(ledger.commit(VerifyResult(0, (5,), ())))
    assert ledger.sequence[: ledger.cache_len] == (*prompt, 1, 2, correction) and ledger.pending == (5,)


def test_full_acceptance_keeps_everything_and_bonus_is_pending() -> None:
    ledger = KVLedger(range(10))
    ledger.forward([1, 2, 3, 4, 5])
    edit = ledger.commit(VerifyResult(5, (1, 2, 3, 4, 5, 6), (0, 1, 2, 3, 4)))
    assert edit == CacheEdit(length=15, base=10, keep=(10, 11, 12, 13, 14)) and edit.is_crop
    assert ledger.cache_len == 15 and ledger.pending == (6,)


def test_plain_decoding_step_feeds_only_the_pending_token() -> None:
    ledger = KVLedger([5, 6, 7])
    fwd = ledger.forward()
    assert fwd.tokens == (5, 6, 7) and fwd.q_rows == slice(2, 3)
    assert ledger.commit(VerifyResult(0, (8,), ())) == CacheEdit(3, 3, ())
    fwd = ledger.forward()
    assert fwd.tokens == (8,) and fwd.positions == (3,) and fwd.q_rows == slice(0, 1)


def test_tree_path_is_compacted_to_its_positions() -> None:
    # root -> nodes 0, 1; node 0 -> 2, 3; node 1 -> 4, 5; the accepted path is 1 -> 4.
    tree = TokenTree((11, 12, 13, 14, 15, 16), (-1, -1, 0, 0, 1, 1))
    ledger, cache = KVLedger([1, 2, 3, 4]), FakeCache()
    fwd = ledger.forward(tree)
    cache.run(fwd.tokens, fwd.positions)
    assert fwd.positions == (0, 1, 2, 3, 4, 4, 5, 5, 5, 5)  # node i at base + depth - 1
    edit = ledger.commit(VerifyResult(2, (12, 15, 99), (1, 4)))
    assert edit == CacheEdit(length=6, base=4, keep=(5, 8)) and not edit.is_crop
    cache.apply(edit)
    assert cache.slots == [(1, 0), (2, 1), (3, 2), (4, 3), (12, 4), (15, 5)]
    assert ledger.sequence[: ledger.cache_len] == (1, 2, 3, 4, 12, 15) and ledger.pending == (99,)


def test_random_steps_keep_slot_token_and_position_aligned() -> None:
    """Over many chain and tree steps, slot i always holds token i of the text at position i."""
    rng = np.random.default_rng(0)
    ledger, cache = KVLedger(rng.integers(0, 50, size=5).tolist()), FakeCache()
    for _ in range(200):
        m = int(rng.integers(0, 7))
        draft_tokens = rng.integers(0, 50, size=m).tolist()
        if rng.random() < 0.5:  # a chain, passed as a plain token list
            tree = TokenTree.from_chain(draft_tokens)
            fwd = ledger.forward(draft_tokens)
        else:
            tree = TokenTree(draft_tokens, tuple(int(rng.integers(-1, i)) for i in range(m)))
            fwd = ledger.forward(tree)
        cache.run(fwd.tokens, fwd.positions)
        path: list[int] = []  # walk down a random number of levels
        kids = tree.children(-1)
        while kids and rng.random() < 0.7:
            path.append(int(rng.choice(kids)))
            kids = tree.children(path[-1])
        toks = (*(tree.tokens[i] for i in path), int(rng.integers(0, 50)))
        cache.apply(ledger.commit(VerifyResult(len(path), toks, tuple(path))))
        assert cache.slots == [(tok, pos) for pos, tok in enumerate(ledger.sequence[: ledger.cache_len])]
        assert ledger.sequence == (*ledger.sequence[: ledger.cache_len], toks[-1])


def test_misuse_is_reported() -> None:
    with pytest.raises(ValueError, match="at least one token"):
        KVLedger([])
    ledger = KVLedger([1, 2])
    with pytest.raises(RuntimeError, match="no forward in flight"):
        ledger.commit(VerifyResult(0, (3,), ()))
    ledger.forward(TokenTree((5, 6, 7), (-1, -1, 0)))
    with pytest.raises(RuntimeError, match="not committed"):
        ledger.forward([1])
    with pytest.raises(ValueError, match="not a path"):
        ledger.commit(VerifyResult(2, (6, 7, 0), (1, 2)))  # node 2 hangs under node 0, not 1
    with pytest.raises(ValueError, match="differ"):
        ledger.commit(VerifyResult(1, (6, 0), (0,)))  # node 0 holds token 5
    assert ledger.commit(VerifyResult(2, (5, 7, 0), (0, 2))).length == 4


def test_batch_ledger_lends_rows_and_plans_each_at_its_own_start() -> None:
    from picker.engine.rollback import BatchLedger

    batch = BatchLedger(rows=2)
    assert batch.admit([1, 2, 3]) == 0 and batch.admit([4]) == 1 and batch.free == 0
    plan = batch.forward({0: TokenTree.from_chain([]), 1: TokenTree.from_chain([])})
    assert [f.start for f in plan.plans] == [0, 0] and plan.width == 3
    batch.commit({0: VerifyResult(0, (9,), ()), 1: VerifyResult(0, (8,), ())})
    plan = batch.forward({0: TokenTree.from_chain([5, 6]), 1: TokenTree.from_chain([])})
    assert [f.positions for f in plan.plans] == [(3, 4, 5), (1,)] and plan.width == 3
    batch.commit({0: VerifyResult(1, (5, 7), (0,)), 1: VerifyResult(0, (2,), ())})
    batch.release(0)
    assert batch.live == (1,) and batch.free == 1 and batch.admit([6, 6]) == 0
    assert batch[0].cache_len == 0 and batch[1].cache_len == 2 and batch[1].pending == (2,)
    with pytest.raises(KeyError):
        BatchLedger(1)[0]

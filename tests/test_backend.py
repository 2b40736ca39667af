"""The torch backend: tree-masked forwards, rollback and compaction, hidden states, the slab cache."""

from __future__ import annotations

import pytest
import torch

from picker.engine.backend import TorchBackend, resolve_device
from picker.engine.rollback import KVLedger
from picker.engine.tree import TokenTree
from picker.engine.verify import VerifyResult
from picker.errors import UserError
from tests.tiny import tiny_backend, tiny_llama

torch.set_num_threads(1)
PROMPT = [0, 5, 9, 11, 3, 17]
# Two children of the root, a chain under the first, a branch under the second.
TREE = TokenTree((7, 8, 3, 4, 9, 12), (-1, -1, 0, 2, 1, 1))


def fresh_logits(model: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    """Last-row logits of a plain causal forward without any cache: the reference."""
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0, -1]


def cache_matches(a: TorchBackend, b: TorchBackend) -> bool:
    return a.length == b.length and all(
        torch.allclose(ka, kb, atol=1e-5) and torch.allclose(va, vb, atol=1e-5)
        for (ka, va), (kb, vb) in zip(a.cache_tensors(), b.cache_tensors())
    )


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_tree_forward_equals_one_causal_forward_per_path(attn: str) -> None:
    """Every node's logits equal a fresh forward over prefix + pending + its root path."""
    model = tiny_llama(1, attn=attn)
    be = TorchBackend(model)
    be.prefill(PROMPT)
    out = be.forward([4], TREE, logits_from=0)
    assert out.logits.shape == (1, len(TREE) + 1, be.vocab_size)
    assert torch.allclose(out.logits[0, 0], fresh_logits(model, [*PROMPT, 4]), atol=1e-5)
    for node in range(len(TREE)):
        path = [TREE.tokens[i] for i in TREE.path(node)]
        assert torch.allclose(out.logits[0, 1 + node], fresh_logits(model, [*PROMPT, 4, *path]), atol=1e-5)


def test_chain_forward_with_several_pending_tokens() -> None:
    model = tiny_llama(2)
    be = TorchBackend(model)
    be.prefill(PROMPT[:3])
    out = be.forward(PROMPT[3:], TokenTree.from_chain([7, 8]), logits_from=2)
    assert out.logits.shape[1] == 3  # q at the root, after d_1, after d_2
    assert torch.allclose(out.logits[0, 2], fresh_logits(model, [*PROMPT, 7, 8]), atol=1e-5)


@pytest.mark.parametrize("accepted", [(), (0,), (0, 2), (0, 2, 3), (1,), (1, 5)])
def test_rollback_after_tree_equals_fresh_prefill_of_accepted_prefix(accepted: tuple[int, ...]) -> None:
    """Compaction moves the accepted path's K/V where a fresh prefill would have put them."""
    model = tiny_llama(3)
    be, ref = TorchBackend(model), TorchBackend(model)
    ledger = KVLedger(PROMPT)
    ledger.forward(())
    be.forward(PROMPT)
    ledger.commit(VerifyResult(0, (4,), ()))
    ledger.forward(TREE)
    be.forward([4], TREE)
    path_tokens = tuple(TREE.tokens[i] for i in accepted)
    be.rollback(ledger.commit(VerifyResult(len(accepted), (*path_tokens, 60), accepted)))
    ref.prefill(list(ledger.sequence[: ledger.cache_len]))
    assert be.length == ledger.cache_len == len(PROMPT) + 1 + len(accepted)
    assert cache_matches(be, ref)
    # ... and the next forward sees exactly what a fresh model would.
    nxt = be.forward([60]).logits[0, -1]
    assert torch.allclose(nxt, fresh_logits(model, [*ledger.sequence[: ledger.cache_len], 60]), atol=1e-5)


def test_crop_then_continue_matches_fresh() -> None:
    model = tiny_llama(4)
    be = TorchBackend(model)
    be.prefill(PROMPT)
    be.forward([1], TokenTree.from_chain([2, 3, 4]))
    be.crop(len(PROMPT) + 2)  # keep the pending token and d_1
    out = be.forward([9]).logits[0, -1]
    assert torch.allclose(out, fresh_logits(model, [*PROMPT, 1, 2, 9]), atol=1e-5)
    with pytest.raises(ValueError):
        be.crop(be.length + 1)


def test_slab_grows_past_its_capacity() -> None:
    model = tiny_llama(5)
    be = TorchBackend(model, capacity=4)
    ids = list(range(3, 40))
    be.prefill(ids[:3])
    for tok in ids[3:]:
        be.forward([tok])
    assert be.length == len(ids)
    assert torch.allclose(be.forward([2]).logits[0, -1], fresh_logits(model, [*ids, 2]), atol=1e-5)


def test_hidden_states_last_feeds_the_lm_head_and_layers_match_transformers() -> None:
    model = tiny_llama(6, layers=3)
    be = TorchBackend(model, hidden_layers=(0, 1))
    out = be.forward(PROMPT, hidden=True)
    assert set(out.hidden) == {"last", 0, 1}
    assert out.hidden["last"].shape == (1, len(PROMPT), model.config.hidden_size)
    with torch.no_grad():
        ref = model(torch.tensor([PROMPT]), output_hidden_states=True).hidden_states
        logits = model.lm_head(out.hidden["last"].clone())
    assert torch.allclose(logits, out.logits, atol=1e-5)
    assert torch.allclose(out.hidden[0], ref[1], atol=1e-5)
    assert torch.allclose(out.hidden[1], ref[2], atol=1e-5)
    assert set(be.forward([3], hidden=True, layers=(2,)).hidden) == {"last", 2}
    with pytest.raises(ValueError):
        TorchBackend(model, hidden_layers=(3,))


def test_logits_from_limits_rows_and_bad_arguments_are_rejected() -> None:
    be = tiny_backend(7)
    assert be.prefill(PROMPT).logits.shape[1] == 1
    with pytest.raises(ValueError):
        be.forward([], None)
    with pytest.raises(ValueError):
        be.forward([1, 2], logits_from=2)


def test_forward_time_is_counted() -> None:
    be = tiny_backend(8)
    be.prefill(PROMPT)
    assert be.forward_calls == 1 and be.forward_seconds > 0.0


def test_from_pretrained_round_trip(tmp_path: object) -> None:
    model = tiny_llama(9)
    model.save_pretrained(tmp_path)
    be = TorchBackend.from_pretrained(tmp_path, dtype="float32")
    assert torch.allclose(be.prefill(PROMPT).logits[0, -1], fresh_logits(model, PROMPT), atol=1e-5)
    with pytest.raises(ValueError):
        TorchBackend.from_pretrained(tmp_path, dtype="float8")


def test_one_batched_forward_equals_each_sequence_alone() -> None:
    """Rows at different cache lengths, one prefilling, one verifying a chain, one a tree, in ONE
    forward: every row's logits equal its own forward alone; stale slots of another row never leak."""
    from picker.engine.rollback import BatchLedger

    model = tiny_llama(10)
    be, alone = TorchBackend(model, rows=3), TorchBackend(model)
    ledger = BatchLedger(3)
    prompts = [PROMPT, PROMPT[:2], [7, 7, 7, 7, 7, 7, 7, 7, 7]]
    for p in prompts:
        ledger.admit(p)
    empty = TokenTree((), ())
    plan = ledger.forward({0: empty, 1: empty, 2: empty})
    be.apply(ledger.commit({r: VerifyResult(0, (40 + r,), ()) for r in range(3)}))  # prefill, emit 40+r
    be.run(plan)
    drafts = {0: TokenTree.from_chain([3, 4, 5]), 1: TREE, 2: empty}
    plan = ledger.forward(drafts)
    out = be.run(plan)
    for i, (row, f) in enumerate(zip(plan.rows, plan.plans)):
        alone.prefill(prompts[row])
        ref = alone.forward([40 + row], drafts[row], logits_from=0).logits[0]
        assert torch.allclose(out.q_rows(i, f), ref, atol=1e-5), row


def test_per_row_tree_rollback_compacts_only_that_row() -> None:
    """After a batched tree verification, each row's cache equals a fresh prefill of what it kept."""
    from picker.engine.rollback import BatchLedger

    model = tiny_llama(11)
    be, ref = TorchBackend(model, rows=2), TorchBackend(model)
    ledger = BatchLedger(2)
    for p in (PROMPT, PROMPT[1:4]):
        ledger.admit(p)
    empty = TokenTree((), ())
    be.run(ledger.forward({0: empty, 1: empty}))
    be.apply(ledger.commit({0: VerifyResult(0, (4,), ()), 1: VerifyResult(0, (9,), ())}))
    be.run(ledger.forward({0: TREE, 1: TREE}))
    accepted = {0: (1, 5), 1: (0, 2, 3)}
    be.apply(ledger.commit({r: VerifyResult(len(a), (*(TREE.tokens[i] for i in a), 60), a)
                            for r, a in accepted.items()}))
    for row in (0, 1):
        kept = ledger[row].sequence[: ledger[row].cache_len]
        ref.prefill(list(kept))
        for (k, v), (rk, rv) in zip(be.cache_tensors(row, len(kept)), ref.cache_tensors()):
            assert torch.allclose(k, rk, atol=1e-5) and torch.allclose(v, rv, atol=1e-5), row


def test_a_device_this_machine_cannot_load_onto_is_one_user_error() -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    for spec, says in (("gpu0", "unknown device"), ("meta", "not supported"), ("cuda:99", "--device" if
                       not torch.cuda.is_available() else "CUDA device(s)")):
        with pytest.raises(UserError) as err:
            resolve_device(spec)
        assert err.value.field == "--device" and (says in err.value.message or says == "--device"), spec
    if not torch.cuda.is_available():
        with pytest.raises(UserError, match="no CUDA device here"):
            resolve_device("cuda")

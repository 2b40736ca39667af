"""EAGLE-3: the draft layer, training-time test, the dynamic tree, and the loop's output with it.

Fast tests use the same kind of toy target as ``test_medusa.py`` (a 2-layer Llama that learned a
fixed permutation of its vocabulary); the slow ones use the zoo's ``ci`` target.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from picker.engine.drafting import DraftContext, MissingArtifact, SamplingParams, StepOutcome
from picker.engine.training import DistillData
from strategies.eagle3 import PLUGIN
from strategies.eagle3.drafter import Eagle3Drafter, make_drafter
from strategies.eagle3.model import Eagle3Head, causal_mask, default_feature_layers
from strategies.eagle3.train import (
    FrozenTarget,
    depth_accuracy,
    fit_greedy_temperature,
    train_heads,
    ttt_forward,
    ttt_mask,
)
from tests.heads_toy import (  # one_thread: autouse, so it runs before toy trains (one thread)
    assert_sampling_is_seeded,
    greedy_same_and_tau,
    one_thread,  # noqa: F401
    toy_heads,
    zoo_ci,
)


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Toy target, its self-distillation data, a head trained with TTT and an untrained one."""
    return toy_heads(train_heads, tmp_path_factory, "eagle3", steps=60, batch=8)


def _ctx(tokens: list[int], hidden: Any, max_draft: int = 64) -> DraftContext:
    return DraftContext(tokens=tokens, prompt_len=len(tokens), sampling=SamplingParams(),
                        rng=np.random.default_rng(0), max_draft=max_draft, hidden=hidden)


def _rows(data: DistillData, row: int, upto: int) -> tuple[list[int], dict[Any, torch.Tensor]]:
    """Tokens ``0..upto`` of a held-out row (``upto`` pending) and hidden states for ``0..upto-1``."""
    tokens = data.heldout.tokens[row, : upto + 1].tolist()
    hidden = {k: v[row, :upto] for k, v in data.heldout.hidden.items()}
    return tokens, hidden


# --- the layer and its masks ----------------------------------------------------------------

def test_feature_layers_are_low_mid_high_and_skip_the_normed_last() -> None:
    assert default_feature_layers(8) == (0, 3, 6)
    assert default_feature_layers(4) == (0, 1, 2)
    assert default_feature_layers(2) == (0, 0, 0)


def test_ttt_mask_sees_the_real_prefix_and_its_own_path() -> None:
    mask = ttt_mask(6, 2)  # step 2: query t sees step-0 keys <= t-2, step-1 key t-1, step-2 key t
    t = 4
    assert mask[t, :6].nonzero().flatten().tolist() == [0, 1, 2]
    assert mask[t, 6:12].nonzero().flatten().tolist() == [3]
    assert mask[t, 12:].nonzero().flatten().tolist() == [4]
    assert bool(mask.any(dim=1).all())  # no empty row (no NaN in softmax)
    assert torch.equal(ttt_mask(5, 0), causal_mask(5, 0))


def test_save_load_round_trip(tmp_path: Path, toy: dict[str, Any]) -> None:
    head = Eagle3Head.load(toy["root"] / "trained")
    head.save(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "model.safetensors"]
    back = Eagle3Head.load(tmp_path)
    assert back.config == head.config
    for (name, a), (_, b) in zip(head.state_dict().items(), back.state_dict().items()):
        assert torch.equal(a, b), name


def test_factory_needs_the_head_folder(tmp_path: Path) -> None:
    with pytest.raises(MissingArtifact):
        make_drafter(target_backend=None, artifact=None)
    with pytest.raises(MissingArtifact):
        make_drafter(target_backend=None, artifact=tmp_path)


def test_plugin_import_does_not_load_torch() -> None:
    code = ("import sys, strategies.eagle3 as m; assert m.PLUGIN.make_drafter; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- drafting -------------------------------------------------------------------------------

def test_chain_drafting_reproduces_training_time_test(toy: dict[str, Any]) -> None:
    """With topk 1 the tree is a chain, and each depth's token is what the unrolled training
    forward predicts at the same place: training and inference see the same attention pattern."""
    drafter = make_drafter(target_backend=toy["target"], artifact=toy["root"] / "trained",
                           topk=1, depth=4, num_draft_tokens=5)
    tokens, hidden = _rows(toy["data"], row=3, upto=12)
    chain = list(drafter.propose(_ctx(tokens, hidden)).tree.tokens)
    assert len(chain) == 4
    row = torch.tensor([tokens + chain[:3]])
    full = {k: torch.cat((v, v.new_zeros(4, v.shape[-1])))[None] for k, v in hidden.items()}
    with torch.no_grad():
        logits = ttt_forward(drafter.head, drafter.target, row, full, steps=4)
    s = len(tokens) - 2  # the last position with a real target feature
    assert [int(logits[k][0, s + k].argmax()) for k in range(4)] == chain


def test_trees_are_valid_within_budget_and_expand_the_best(toy: dict[str, Any]) -> None:
    drafter = make_drafter(target_backend=toy["target"], artifact=toy["root"] / "trained",
                           topk=3, depth=4, num_draft_tokens=9)
    tokens, hidden = _rows(toy["data"], row=0, upto=10)
    for cap, size in ((64, 8), (5, 5), (0, 0)):
        drafter.reset(tokens)
        draft = drafter.propose(_ctx(tokens, hidden, cap))
        assert len(draft) == size and draft.p is None
        assert draft.tree.max_depth <= 4
    assert len(draft.tree.children(-1)) <= 3


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_batched_drafting_proposes_what_each_sequence_would_alone(toy: dict[str, Any], temperature: float) -> None:
    """One head forward per depth over sequences at different cache lengths (padding masked) and caps
    gives each the tree (T = 0) or sampled chain (T = 1) it gets alone."""
    drafter = make_drafter(target_backend=toy["target"], artifact=toy["root"] / "trained",
                           topk=2, depth=4, num_draft_tokens=7)
    forks = [drafter, drafter.fork(), drafter.fork(), drafter.fork()]
    seqs = [_rows(toy["data"], row=r, upto=u) for r, u in ((0, 10), (1, 4), (2, 7), (3, 12))]
    caps = (64, 3, 0, 5)  # the third proposes nothing

    def run(batched: bool) -> list[Any]:
        # A generator per sequence: batched drafting draws depth by depth, alone sequence by sequence.
        ctxs = [DraftContext(tokens=t, prompt_len=len(t), sampling=SamplingParams(temperature),
                             rng=np.random.default_rng(7 + i), max_draft=cap, hidden=h)
                for i, ((t, h), cap) in enumerate(zip(seqs, caps))]
        for d, (t, _) in zip(forks, seqs):
            d.reset(t)
        if batched:
            return drafter.propose_batch(list(zip(forks, ctxs)))
        return [d.propose(c) for d, c in zip(forks, ctxs)]

    together, alone = run(True), run(False)
    for got, want in zip(together, alone):
        assert got.tree == want.tree
        assert (got.p is None) == (want.p is None) and (got.p is None or np.allclose(got.p, want.p, atol=1e-6))
    assert len(together[2]) == 0 and len(together[1]) <= 3


def test_sampling_drafts_a_chain_drawn_from_p(toy: dict[str, Any]) -> None:
    drafter = make_drafter(target_backend=toy["target"], artifact=toy["root"] / "trained",
                           depth=4, num_draft_tokens=11)
    tokens, hidden = _rows(toy["data"], row=2, upto=10)
    ctx = DraftContext(tokens=tokens, prompt_len=len(tokens),
                       sampling=SamplingParams(temperature=1.0, top_k=5),
                       rng=np.random.default_rng(0), max_draft=3, hidden=hidden)
    draft = drafter.propose(ctx)
    assert draft.is_chain and len(draft) == 3 and draft.p is not None
    assert draft.p.shape == (3, 40) and np.allclose(draft.p.sum(1), 1.0)
    assert all((row > 0).sum() == 5 for row in draft.p)  # warped like q: top-k 5
    assert all(draft.p[i, t] > 0 for i, t in enumerate(draft.tree.tokens))
    off = make_drafter(target_backend=toy["target"], artifact=toy["root"] / "trained",
                       sample_drafts=False)
    assert off.propose(ctx).p is None


def test_cache_extends_once_and_observe_matches_propose(toy: dict[str, Any]) -> None:
    path = toy["root"] / "trained"
    a = make_drafter(target_backend=toy["target"], artifact=path)
    b = make_drafter(target_backend=toy["target"], artifact=path)
    tokens, hidden = _rows(toy["data"], row=1, upto=9)
    first = a.propose(_ctx(tokens, hidden))
    assert a.propose(_ctx(tokens, hidden)) == first      # same rows again: nothing appended
    assert a.past is not None and a.past[0].shape[2] == 9
    # Next step: two more positions accepted; b hears of them through observe first.
    tokens2, hidden2 = _rows(toy["data"], row=1, upto=11)
    tail = {k: v[-2:] for k, v in hidden2.items()}
    b.propose(_ctx(tokens, hidden))
    b.observe(StepOutcome(first, (0,), tuple(tokens2[-2:]), tokens2, tail))
    assert a.propose(_ctx(tokens2, tail)) == b.propose(_ctx(tokens2, tail))
    assert b.past is not None and b.past[0].shape[2] == 11
    assert len(b.propose(_ctx(tokens2 + [5], None))) == 0  # stale root: no guess


# --- training and acceptance ----------------------------------------------------------------

def test_training_lowers_the_loss_and_raises_accuracy(toy: dict[str, Any]) -> None:
    report = toy["report"]
    assert report["loss_last"] < 0.6 * report["loss_first"]
    assert min(report["depth_accuracy"]) > max(report["untrained_depth_accuracy"]) + 0.3


def test_training_is_seeded(toy: dict[str, Any], tmp_path: Path) -> None:
    for run in ("a", "b"):
        train_heads(toy["target"], toy["data"], tmp_path / run, steps=3, seed=3)
    a, b = Eagle3Head.load(tmp_path / "a"), Eagle3Head.load(tmp_path / "b")
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def test_greedy_output_matches_plain_and_trained_head_accepts_more(toy: dict[str, Any]) -> None:
    prompts = [d[:8] for d in toy["docs"][30:36]]
    trained = make_drafter(target_backend=toy["target"], artifact=toy["root"] / "trained")
    untrained = make_drafter(target_backend=toy["target"], artifact=toy["root"] / "untrained")
    same_t, tau_t = greedy_same_and_tau(toy["target"], trained, PLUGIN.capabilities, prompts)
    same_u, tau_u = greedy_same_and_tau(toy["target"], untrained, PLUGIN.capabilities, prompts)
    assert same_t and same_u
    assert tau_t > tau_u + 1.0, (tau_t, tau_u)


def test_sampling_through_the_loop_is_seeded(toy: dict[str, Any]) -> None:
    assert_sampling_is_seeded(toy, make_drafter, PLUGIN.capabilities)


def test_greedy_chain_keeps_the_scores_that_ranked_it_for_the_probe(toy: dict[str, Any]) -> None:
    """A top-1 chain's ``last_scores()`` has one logits row per node whose argmax is the node's
    token (what the sibling probe ranks the target's token in); the profiled loop's output is
    plain greedy's, and its rejections carry sibling counts. The draft itself carries no scores:
    profiling rides outside the drafter contract."""
    from picker.engine.backend import TorchBackend
    from picker.engine.drafting import Speculator
    from picker.engine.loop import generate
    from picker.engine.siblings import SiblingProbe

    drafts: list[Any] = []

    class Recording:
        def __init__(self, inner: Eagle3Drafter) -> None:
            self.inner, self.hidden_layers = inner, inner.hidden_layers

        def reset(self, prompt_ids: Any) -> None:
            self.inner.reset(prompt_ids)

        def propose(self, ctx: DraftContext) -> Any:
            draft = self.inner.propose(ctx)
            drafts.append((self.inner.last_scores(), draft))
            return draft

        def last_scores(self) -> Any:
            return self.inner.last_scores()

        def observe(self, step: StepOutcome) -> None:
            self.inner.observe(step)

    be, caps = TorchBackend(toy["target"]), PLUGIN.capabilities
    prompt = toy["docs"][31][:8]
    plain = generate(be, prompt, None, max_new_tokens=30)
    drafter = Recording(make_drafter(target_backend=toy["target"], artifact=toy["root"] / "untrained",
                                     topk=1, depth=4, num_draft_tokens=5))
    probe = SiblingProbe(4)
    out = generate(be, prompt, Speculator(drafter, caps), max_new_tokens=30, observer=probe)
    assert out.tokens == plain.tokens
    sent = [(scores, d) for scores, d in drafts if len(d)]
    assert sent and all(scores is not None and scores.shape[0] == len(d) and
                        scores.argmax(-1).tolist() == list(d.tree.tokens) for scores, d in sent)
    assert any(r for r, _ in probe.steps[0])  # an untrained head is rejected often
    assert not hasattr(sent[0][1], "scores")


def test_training_time_test_helps_beyond_depth_one(toy: dict[str, Any]) -> None:
    """Trained on target features only (1 step), the head drifts once it reads its own output."""
    without = train_heads(toy["target"], toy["data"], None, steps=60, seed=0, ttt_steps=1,
                          batch=8)
    with_ttt = toy["report"]
    print("depth accuracy, TTT 4:", with_ttt["depth_accuracy"], "TTT 1:", without["depth_accuracy"])
    assert all(w > o + 0.1 for w, o in zip(with_ttt["depth_accuracy"][1:],
                                            without["depth_accuracy"][1:]))


def test_greedy_temperature_matches_confidence_to_accuracy(toy: dict[str, Any]) -> None:
    head = Eagle3Head.load(toy["root"] / "trained")
    frozen = FrozenTarget.of(toy["target"])
    t = head.config.greedy_temperature
    assert t == fit_greedy_temperature(head, frozen, toy["data"].heldout)
    rows = toy["data"].heldout
    with torch.no_grad():
        logits = ttt_forward(head, frozen, rows.tokens, rows.hidden, 1)[0]
        best = (rows.hidden["last"][:, 1:] @ frozen.lm_head.T).argmax(-1)
    accuracy = float((logits.argmax(-1) == best).float().mean())
    confidence = float(torch.softmax(logits / t, -1).max(-1).values.mean())
    assert abs(confidence - accuracy) < 0.05


def test_depth_accuracy_of_an_untrained_head_is_low(toy: dict[str, Any]) -> None:
    head = Eagle3Head.load(toy["root"] / "untrained")
    acc = depth_accuracy(head, FrozenTarget.of(toy["target"]), toy["data"].heldout, 2)
    assert max(acc) < 0.3
    assert isinstance(Eagle3Drafter(head, FrozenTarget.of(toy["target"])).hidden_layers, tuple)


# --- the zoo (slow) -------------------------------------------------------------------------

@pytest.mark.slow
def test_zoo_head_matches_greedy_and_accepts_more_than_untrained(tmp_path: Path) -> None:
    """Zoo ci target, 12 held-out prompts: output == plain greedy; trained τ far above untrained."""
    from strategies.eagle3.train import new_head

    zoo = zoo_ci()
    trained = make_drafter(target_backend=zoo["target"], artifact=zoo["heads"]["eagle3_head"])
    new_head(zoo["target"], seed=0).save(tmp_path / "untrained")
    untrained = make_drafter(target_backend=zoo["target"], artifact=tmp_path / "untrained")
    same_t, tau_t = greedy_same_and_tau(zoo["target"], trained, PLUGIN.capabilities, zoo["prompts"], new=48)
    same_u, tau_u = greedy_same_and_tau(zoo["target"], untrained, PLUGIN.capabilities, zoo["prompts"], new=48)
    print(f"eagle3 zoo ci: tokens/step trained {tau_t:.2f}, untrained {tau_u:.2f}")
    assert same_t and same_u
    assert tau_t > tau_u + 1.0


@pytest.mark.slow
def test_zoo_training_time_test_helps_beyond_depth_one() -> None:
    """Same data and steps, with and without TTT: held-out accuracy at depths 2-4."""
    from picker.zoo.heads import HEAD_RECIPES, make_distill_data

    zoo = zoo_ci()
    recipe = HEAD_RECIPES["ci"]
    data = make_distill_data(zoo["target"], zoo["paths"].tokenizer, zoo["corpus"], recipe)
    steps = recipe.steps["eagle3_head"]
    with_ttt = train_heads(zoo["target"], data, None, steps=steps, seed=0)
    without = train_heads(zoo["target"], data, None, steps=steps, seed=0, ttt_steps=1)
    print("zoo ci depth accuracy, TTT 4:", with_ttt["depth_accuracy"],
          "TTT 1:", without["depth_accuracy"])
    assert all(w > o + 0.05 for w, o in zip(with_ttt["depth_accuracy"][1:],
                                             without["depth_accuracy"][1:]))

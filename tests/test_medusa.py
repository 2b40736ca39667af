"""Medusa: heads, tree choices, training, the drafter, and the loop's output with it.

The fast tests run on a toy target (a 2-layer Llama trained for seconds on sequences that follow a
fixed random permutation of the vocabulary 85% of the time), where good heads can look far ahead
and random ones cannot. The slow tests run on the zoo's ``ci`` target and print acceptance.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from picker.engine.drafting import DraftContext, MissingArtifact, SamplingParams
from picker.engine.tree import TokenTree
from picker.zoo.heads import HeadRecipe
from strategies.medusa import PLUGIN
from strategies.medusa.drafter import make_drafter
from strategies.medusa.heads import DEFAULT_CHOICES, MedusaConfig, MedusaHeads, greedy_choices
from strategies.medusa.train import (
    distill_loss,
    expected_accept_length,
    rank_accuracy,
    train_heads,
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
    """Toy target, its self-distillation data, and heads trained on it (plus untrained ones)."""
    return toy_heads(train_heads, tmp_path_factory, "medusa", steps=150, batch=16)


def _ctx(hidden: Any, max_draft: int = 64) -> DraftContext:
    return DraftContext(tokens=[0, 5, 6], prompt_len=3, sampling=SamplingParams(),
                        rng=np.random.default_rng(0), max_draft=max_draft, hidden=hidden)


# --- tree choices ---------------------------------------------------------------------------

def test_greedy_choices_every_prefix_is_a_tree() -> None:
    rng = np.random.default_rng(0)
    acc = np.sort(rng.random((4, 5)), axis=1)[:, ::-1] * 0.8
    choices = greedy_choices(acc.tolist(), budget=20)
    assert len(choices) == 20 and len(set(choices)) == 20
    candidates = [[10 * h + r for r in range(5)] for h in range(4)]
    for n in range(1, 21):
        TokenTree.from_choices(choices[:n], candidates)  # raises if a prefix is missing


def test_greedy_choices_beat_the_default_tree_on_their_own_accuracy() -> None:
    acc = [[0.7, 0.1, 0.05], [0.5, 0.1, 0.05], [0.4, 0.1, 0.0], [0.3, 0.1, 0.0]]
    n = len(DEFAULT_CHOICES)
    assert expected_accept_length(greedy_choices(acc, n), acc) >= expected_accept_length(
        DEFAULT_CHOICES, acc)
    # A near-certain spine is taken all the way down before any second guess.
    assert greedy_choices([[0.99, 0.01], [0.99, 0.01]], 2) == ((0,), (0, 0))


def test_config_rejects_paths_deeper_than_the_heads() -> None:
    with pytest.raises(ValueError):
        MedusaConfig(hidden_size=4, vocab_size=9, num_heads=1, choices=((0,), (0, 0)))


def test_save_load_round_trip_is_safetensors_and_json(tmp_path: Path) -> None:
    cfg = MedusaConfig(hidden_size=8, vocab_size=11, num_heads=2, choices=((0,), (0, 1), (0, 0)),
                       meta={"note": "x"})
    heads = MedusaHeads(cfg)
    with torch.no_grad():
        heads.weight.normal_()
    heads.save(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "model.safetensors"]
    back = MedusaHeads.load(tmp_path)
    assert back.config == cfg
    assert torch.equal(back.weight, heads.weight) and torch.equal(back.bias, heads.bias)


# --- the drafter ----------------------------------------------------------------------------

def test_factory_needs_the_heads_folder(tmp_path: Path) -> None:
    with pytest.raises(MissingArtifact):
        make_drafter(target_backend=None, artifact=None)
    with pytest.raises(MissingArtifact):
        make_drafter(target_backend=None, artifact=tmp_path)


def test_plugin_import_does_not_load_torch() -> None:
    code = ("import sys, strategies.medusa as m; assert m.PLUGIN.make_drafter; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_proposals_are_valid_trees_within_max_draft(toy: dict[str, Any]) -> None:
    drafter = make_drafter(target_backend=toy["target"], artifact=toy["root"] / "trained")
    hidden = {"last": toy["data"].heldout.hidden["last"][0, :5]}
    stored = drafter.choices
    for cap in (0, 1, 3, 100):
        draft = drafter.propose(_ctx(hidden, cap))
        assert len(draft) == min(cap, len(stored)) and draft.p is None
        if cap:  # the tree's shape is the stored choices' prefix of that size
            shape = TokenTree.from_choices(stored[:cap], [list(range(10))] * 4)
            assert draft.tree.parents == shape.parents
    assert len(drafter.propose(_ctx(None))) == 0  # no hidden state yet: plain decoding


def test_batched_heads_propose_what_each_sequence_would_alone(toy: dict[str, Any]) -> None:
    """One heads pass over several sequences (different caps, one with nothing to read yet) gives
    each the tree it gets alone, greedy and sampled (same draws in item order)."""
    drafter = make_drafter(target_backend=toy["target"], artifact=toy["root"] / "trained")
    forks = [drafter, drafter.fork(), drafter.fork(), drafter.fork()]
    hidden = toy["data"].heldout.hidden["last"]
    reads = [{"last": hidden[0, :3]}, {"last": hidden[1, :5]}, None, {"last": hidden[2, :2]}]
    caps = (100, 3, 5, 7)
    for temperature in (0.0, 1.0):
        def ctxs(seed: int, temperature: float = temperature) -> list[DraftContext]:
            rng = np.random.default_rng(seed)  # one generator, drawn in item order, as the loop does
            return [DraftContext([0, 5, 6], 3, SamplingParams(temperature), rng, cap, h) for h, cap in zip(reads, caps)]
        together = drafter.propose_batch(list(zip(forks, ctxs(4))))
        alone = [d.propose(c) for d, c in zip(forks, ctxs(4))]
        for got, want in zip(together, alone):
            assert got.tree == want.tree and (got.p is None) == (want.p is None)
            assert got.p is None or np.allclose(got.p, want.p, atol=1e-6)
        assert len(together[2]) == 0


def test_tree_tokens_are_the_heads_top_ranks(toy: dict[str, Any]) -> None:
    drafter = make_drafter(target_backend=toy["target"], artifact=toy["root"] / "trained",
                           choices=[[0], [1], [0, 0]])
    h = toy["data"].heldout.hidden["last"][1, 3]
    draft = drafter.propose(_ctx({"last": h[None]}))
    logits = drafter.heads.logits(h, drafter.lm_head)
    top = logits.topk(2, dim=-1).indices
    assert draft.tree.tokens == (int(top[0, 0]), int(top[0, 1]), int(top[1, 0]))


def test_sampled_tree_draws_siblings_without_replacement_from_p() -> None:
    """The first child follows p; the second follows p with the first removed (renormalised)."""
    from scipy.stats import chisquare

    from strategies.medusa.drafter import sampled_tree

    shape = TokenTree.from_choices([[0], [1], [0, 0]], [[0, 1], [0, 1]])
    logits = np.log(np.array([[0.5, 0.3, 0.2, 0.0 + 1e-300], [0.25, 0.25, 0.25, 0.25]]))
    rng = np.random.default_rng(0)
    first, second = np.zeros(4), np.zeros(4)
    for _ in range(4000):
        draft = sampled_tree(shape, logits, SamplingParams(temperature=1.0), rng)
        assert draft.siblings == "without_replacement" and draft.p is not None
        a, b, _ = draft.tree.tokens
        assert a != b and draft.p[0, a] > 0 and draft.p[1, b] > 0
        first[a] += 1
        second[b] += 1
    p = np.array([0.5, 0.3, 0.2])
    assert chisquare(first[:3], 4000 * p).pvalue > 1e-3
    # P(second = j) = sum_i p_i p_j / (1 - p_i) over i != j
    law = np.array([sum(p[i] * p[j] / (1 - p[i]) for i in range(3) if i != j) for j in range(3)])
    assert chisquare(second[:3], 4000 * law).pvalue > 1e-3


def test_sampled_tree_drops_children_beyond_the_support() -> None:
    from strategies.medusa.drafter import sampled_tree

    shape = TokenTree.from_choices([[0], [1], [0, 0], [1, 0]], [[0, 1], [0, 1]])
    logits = np.log(np.array([[0.6, 0.4, 0.0], [0.1, 0.2, 0.7]]) + 1e-300)
    draft = sampled_tree(shape, logits, SamplingParams(temperature=1.0, top_k=1),
                         np.random.default_rng(0))
    assert draft.tree.tokens == (0, 2) and draft.tree.parents == (-1, 0)  # top-k 1: a chain
    assert draft.p is not None and draft.p.shape == (2, 3)


# --- training and acceptance ----------------------------------------------------------------

def test_training_lowers_the_distillation_loss(toy: dict[str, Any]) -> None:
    report = toy["report"]
    assert report["loss_last"] < 0.7 * report["loss_first"]
    heads = MedusaHeads.load(toy["root"] / "trained")
    fresh = MedusaHeads(heads.config)
    lm = toy["target"].get_output_embeddings().weight
    hidden = toy["data"].heldout.hidden["last"]
    weights = torch.ones(heads.config.num_heads)
    with torch.no_grad():
        assert distill_loss(heads, hidden, lm, weights) < distill_loss(fresh, hidden, lm, weights)


def test_training_is_seeded(toy: dict[str, Any], tmp_path: Path) -> None:
    for run in ("a", "b"):
        train_heads(toy["target"], toy["data"], tmp_path / run, steps=5, seed=3)
    a, b = MedusaHeads.load(tmp_path / "a"), MedusaHeads.load(tmp_path / "b")
    assert torch.equal(a.weight, b.weight) and a.config.choices == b.config.choices


def test_trained_heads_rank_the_target_token_first_more_often(toy: dict[str, Any]) -> None:
    heads = MedusaHeads.load(toy["root"] / "trained")
    lm = toy["target"].get_output_embeddings().weight
    acc = rank_accuracy(heads, toy["data"].heldout, lm)
    untrained = rank_accuracy(MedusaHeads(heads.config), toy["data"].heldout, lm)
    assert acc[0][0] > 0.6 and acc[0][0] > untrained[0][0] + 0.3


def test_greedy_output_matches_plain_and_trained_heads_accept_more(toy: dict[str, Any]) -> None:
    prompts = [d[:8] for d in toy["docs"][30:36]]
    trained = make_drafter(target_backend=toy["target"], artifact=toy["root"] / "trained")
    untrained = make_drafter(target_backend=toy["target"], artifact=toy["root"] / "untrained")
    same_t, tau_t = greedy_same_and_tau(toy["target"], trained, PLUGIN.capabilities, prompts)
    same_u, tau_u = greedy_same_and_tau(toy["target"], untrained, PLUGIN.capabilities, prompts)
    assert same_t and same_u
    assert tau_t > tau_u + 0.5, (tau_t, tau_u)


def test_sampling_through_the_loop_is_seeded(toy: dict[str, Any]) -> None:
    assert_sampling_is_seeded(toy, make_drafter, PLUGIN.capabilities)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_sibling_probe_on_a_chain_predicts_what_a_tree_accepts(toy: dict[str, Any], temperature: float,
                                                               tmp_path: Path) -> None:
    """The profiler's counterfactual (picker.engine.siblings), measured on Medusa's top-1 chain, predicts
    the acceptance of a real one-level tree of 4 siblings through the loop, where the textbook
    sibling model (every rank accepts with α) is far off: at T = 1 sampled siblings (trained heads:
    it overstates them), at T = 0 greedy top-k siblings (heads trained for 5 steps: their first
    choice is almost never right, their second often is, which α alone cannot see)."""
    from picker.engine.backend import TorchBackend
    from picker.engine.drafting import bind
    from picker.engine.loop import generate
    from picker.engine.siblings import SiblingProbe
    from policies.scalar import sibling_odds

    heads = toy["root"] / "trained"
    if temperature == 0:
        heads = tmp_path / "early"
        train_heads(toy["target"], toy["data"], heads, steps=5, seed=0, batch=16)
    be, caps, s = TorchBackend(toy["target"]), PLUGIN.capabilities, SamplingParams(temperature=temperature)
    chain = make_drafter(target_backend=toy["target"], artifact=heads, choices=[[0]])
    tree = make_drafter(target_backend=toy["target"], artifact=heads, choices=[[0], [1], [2], [3]])
    accepted = drafted = tree_accepted = tree_steps = 0
    reached, sib_accepted = np.zeros(3), np.zeros(3)
    for i, doc in enumerate(toy["docs"][30:40]):
        probe = SiblingProbe(4)
        g = generate(be, doc[:8], bind(chain, caps), sampling=s, max_new_tokens=60, rng=np.random.default_rng(i),
                     observer=probe)
        for r, (sib_r, sib_a) in zip(g.records[1:], probe.steps[0][1:], strict=True):
            accepted, drafted = accepted + r.accepted, drafted + r.drafted
            if sib_r:
                reached += sib_r
                sib_accepted += sib_a
        t = generate(be, doc[:8], bind(tree, caps), sampling=s, max_new_tokens=60, rng=np.random.default_rng(100 + i))
        tree_accepted += sum(r.accepted for r in t.records[1:])
        tree_steps += len(t.records) - 1
    alpha = accepted / drafted
    measured = tree_accepted / tree_steps  # P(some sibling accepted) per step
    predicted = sum(sibling_odds(alpha, 4, tuple(sib_accepted / reached)))
    textbook = sum(sibling_odds(alpha, 4))
    assert reached[0] > 80 and tree_steps > 250
    # ~0.02 standard error on each side; the textbook model is 0.17 (T = 1) and 0.9 (T = 0) off.
    assert abs(predicted - measured) < 0.06, (predicted, measured)
    assert abs(textbook - measured) > 0.1, (textbook, measured)


# --- the zoo hook ---------------------------------------------------------------------------

def test_zoo_hook_trains_every_head_artifact_once(tmp_path: Path) -> None:
    """picker.zoo.heads finds every strategy with heads through the registry, trains, then reuses; a
    change to one artifact's steps retrains that artifact alone."""
    from picker.zoo.corpus import build_corpus
    from picker.zoo.heads import head_trainers, train_heads_on
    from picker.zoo.tokenizer import save_tokenizer, train_tokenizer
    from picker.zoo.train import ModelSpec, new_model

    assert sorted(head_trainers()) == ["eagle3_head", "medusa_heads", "mtp"]
    corpus = build_corpus(20_000, 4_000, seed=0)
    tok = train_tokenizer(corpus, vocab_size=300)
    model = new_model(ModelSpec(32, 2, 2, 1, 64), tok.get_vocab_size(), 128, seed=0)
    model.save_pretrained(tmp_path / "target")
    save_tokenizer(tok, tmp_path / "target", 128)
    recipe = HeadRecipe(prompts=4, heldout_prompts=2, prompt_len=8, new_tokens=8,
                        steps={"medusa_heads": 2, "eagle3_head": 2, "mtp": 2})
    paths = train_heads_on(tmp_path / "target", corpus, tmp_path, recipe)
    assert sorted(paths) == ["eagle3_head", "medusa_heads", "mtp"]
    stamps = {art: (p / "recipe.json").stat().st_mtime_ns for art, p in paths.items()}
    for art, folder in paths.items():
        assert sorted(f.name for f in folder.iterdir()) == [
            "config.json", "model.safetensors", "recipe.json"], art
    assert train_heads_on(tmp_path / "target", corpus, tmp_path, recipe) == paths
    assert stamps == {art: (p / "recipe.json").stat().st_mtime_ns for art, p in paths.items()}
    more = HeadRecipe(**{**recipe.__dict__, "steps": {**recipe.steps, "mtp": 3}})
    train_heads_on(tmp_path / "target", corpus, tmp_path, more)
    after = {art: (p / "recipe.json").stat().st_mtime_ns for art, p in paths.items()}
    assert [art for art in paths if after[art] != stamps[art]] == ["mtp"]


def test_zoo_hook_skips_sizes_without_a_head_recipe(tmp_path: Path) -> None:
    from picker.zoo.heads import train_heads as zoo_train_heads

    assert zoo_train_heads(None, "tiny") == {}  # type: ignore[arg-type]


# --- the zoo (slow) -------------------------------------------------------------------------

@pytest.mark.slow
def test_zoo_heads_match_greedy_and_accept_more_than_untrained(tmp_path: Path) -> None:
    """Zoo ci target, 12 held-out prompts: output == plain greedy; trained τ above zero-init τ."""
    zoo = zoo_ci()
    trained = make_drafter(target_backend=zoo["target"], artifact=zoo["heads"]["medusa_heads"])
    MedusaHeads(trained.heads.config).save(tmp_path / "untrained")
    untrained = make_drafter(target_backend=zoo["target"], artifact=tmp_path / "untrained")
    same_t, tau_t = greedy_same_and_tau(zoo["target"], trained, PLUGIN.capabilities, zoo["prompts"], new=48)
    same_u, tau_u = greedy_same_and_tau(zoo["target"], untrained, PLUGIN.capabilities, zoo["prompts"], new=48)
    print(f"medusa zoo ci: tokens/step trained {tau_t:.2f}, untrained {tau_u:.2f}")
    assert same_t and same_u
    assert tau_t > tau_u + 0.2

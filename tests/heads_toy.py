"""Shared by the trainable-heads tests (``test_medusa.py``, ``test_eagle3.py``): a toy target whose
future is predictable, heads trained on its own text, and the loop-level checks both strategies pass.

The toy target is a 2-layer Llama trained for seconds on sequences that follow a fixed random
permutation of the vocabulary 85% of the time, so good heads can look several tokens ahead and
untrained ones cannot. The zoo helper builds the ``ci`` zoo with its heads for the slow tests.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from picker.engine.drafting import SamplingParams
from picker.engine.plugins import Capabilities
from picker.engine.training import DistillData, make_distill_set

VOCAB = 40


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Any:
    """One torch thread: on a shared 2-core machine two threads run these tiny models 4x slower."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def toy_docs(count: int, length: int, seed: int) -> list[list[int]]:
    """Token rows that follow one fixed permutation of ids 3..VOCAB-1, with 15% random jumps."""
    perm = list(range(3, VOCAB))
    random.Random(123).shuffle(perm)
    step = dict(zip(range(3, VOCAB), perm))
    rng = random.Random(seed)
    docs = []
    for _ in range(count):
        x = rng.randrange(3, VOCAB)
        doc = [0, x]
        for _ in range(length):
            x = step[x] if rng.random() < 0.85 else rng.randrange(3, VOCAB)
            doc.append(x)
        docs.append(doc)
    return docs


def toy_target() -> Any:
    """A 2-layer Llama that has learned the permutation (seeded, about 80 optimizer steps)."""
    from picker.zoo.train import ModelSpec, TrainSchedule, deterministic, new_model, train

    with deterministic(1):
        model = new_model(ModelSpec(32, 2, 2, 1, 64), VOCAB, 128, seed=0)
        rows = torch.tensor([d[:25] for d in toy_docs(512, 40, seed=0)])
        train(model, rows, TrainSchedule(steps=80, batch=16, lr=1e-2), seed=0)
    return model.requires_grad_(False).eval()


def toy_heads(train_heads: Callable[..., dict[str, Any]], tmp_path_factory: pytest.TempPathFactory,
              name: str, steps: int, batch: int) -> dict[str, Any]:
    """Toy target, its self-distillation data, heads trained on it and untrained ones (steps=0)."""
    target = toy_target()
    docs = toy_docs(40, 60, seed=1)
    with torch.inference_mode(False):
        data = DistillData(make_distill_set(target, docs[:30], 32, prompt_len=8, new_tokens=24, seed=0),
                           make_distill_set(target, docs[30:], 16, prompt_len=8, new_tokens=24, seed=1))
    root = tmp_path_factory.mktemp(name)
    report = train_heads(target, data, root / "trained", steps=steps, seed=0, batch=batch)
    train_heads(target, data, root / "untrained", steps=0, seed=0)
    return {"target": target, "data": data, "docs": docs, "root": root, "report": report}


def greedy_same_and_tau(target: Any, drafter: Any, caps: Capabilities, prompts: list[list[int]],
                        new: int = 40) -> tuple[bool, float]:
    """(every output equals plain greedy, mean tokens per verify step after prefill)."""
    from picker.engine.backend import TorchBackend
    from picker.engine.drafting import bind
    from picker.engine.loop import generate

    be = TorchBackend(target)
    same, taus = True, []
    for prompt in prompts:
        plain = generate(be, prompt, None, max_new_tokens=new)
        spec = generate(be, prompt, bind(drafter, caps), max_new_tokens=new)
        same &= plain.tokens == spec.tokens
        taus.append((new - 1) / (spec.stats.steps - 1))  # the prefill emits one token
    return same, float(np.mean(taus))


def assert_sampling_is_seeded(toy: dict[str, Any], make_drafter: Callable[..., Any], caps: Capabilities) -> None:
    """Two sampled generations from the same seed through the real loop are identical."""
    from picker.engine.backend import TorchBackend
    from picker.engine.drafting import bind
    from picker.engine.loop import generate

    be = TorchBackend(toy["target"])
    drafter = make_drafter(target_backend=toy["target"], artifact=toy["root"] / "trained")
    runs = [generate(be, toy["docs"][31][:8], bind(drafter, caps), max_new_tokens=30,
                     sampling=SamplingParams(temperature=1.0), rng=np.random.default_rng(7))
            for _ in range(2)]
    assert runs[0].tokens == runs[1].tokens and len(runs[0].tokens) == 30


def zoo_ci(prompts_per_domain: int = 3, length: int = 32) -> dict[str, Any]:
    """The zoo ci build with its heads (trained now if missing) and held-out corpus prompts."""
    from transformers import AutoModelForCausalLM

    from picker.engine.training import cut_prompts
    from picker.zoo import build_zoo
    from picker.zoo.corpus import DOMAINS, build_corpus
    from picker.zoo.heads import train_heads as zoo_train_heads
    from picker.zoo.recipe import RECIPES
    from picker.zoo.tokenizer import encode_documents, load_tokenizer

    paths = build_zoo("ci", progress=False)
    recipe = RECIPES["ci"]
    corpus = build_corpus(recipe.chars_per_domain, recipe.heldout_chars, recipe.seed)
    heads = zoo_train_heads(paths, "ci", corpus=corpus)
    tok = load_tokenizer(paths.tokenizer)
    prompts = []
    for i, domain in enumerate(DOMAINS):
        docs = encode_documents(tok, corpus.heldout[domain])
        prompts += cut_prompts(docs, prompts_per_domain, length, seed=77 + i).tolist()
    target = AutoModelForCausalLM.from_pretrained(paths.target).eval().requires_grad_(False)
    return {"paths": paths, "heads": heads, "corpus": corpus, "prompts": prompts, "target": target}

"""Heads on the zoo target: self-distillation data, then every trainable-heads strategy trains on it.

The target is frozen. It continues prompts cut from the corpus's train and held-out documents
(:func:`picker.engine.training.make_distill_set`: half the rows greedily, half sampled at
temperature 1), and one more forward records its hidden states at every layer. Each strategy that
declares ``trainable_heads`` then trains on the same :class:`~picker.engine.training.DistillData`
and saves a Hugging Face style folder (``config.json`` + ``model.safetensors``) under
``<zoo>/<artifact>/``, which is reused while its recipe hash matches.

Strategies are found through the registry, never imported by name: a plugin with trainable
heads declares the hook ``StrategyPlugin.train_heads`` (``"module:attr"`` of
``train_heads(target, data, out_dir, *, steps, seed, on_step) -> dict``).

    >>> from picker.zoo.heads import HEAD_RECIPES
    >>> HEAD_RECIPES["ci"].steps["medusa_heads"] > 0
    True
    >>> paths = train_heads(build_zoo("ci"), "ci")   # doctest: +SKIP
    >>> sorted(paths)                                # doctest: +SKIP
    ['eagle3_head', 'medusa_heads', 'mtp']
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from picker.engine.plugins import load_strategies
from picker.engine.training import DistillData, make_distill_set
from picker.zoo.corpus import DOMAINS, Corpus
from picker.zoo.tokenizer import encode_documents, load_tokenizer
from picker.zoo.train import deterministic

if TYPE_CHECKING:
    from picker.zoo.paths import ZooPaths

# Bump when what a given recipe produces changes (data, losses, optimizer, file layout). Medusa's
# training gained gradient clipping (the shared picker.engine.training.optimizer_step) without a
# bump: its gradient norm stays below 0.49 on the ci recipe, so clipping scales by exactly 1 and
# the heads came out bit-identical to the cached ones (measured when the step was shared).
# Version 2: each artifact's hash covers its own steps only, so adding a strategy's heads to a
# recipe leaves the others' cached heads valid.
HEADS_VERSION = 2
RECIPE_NAME = "recipe.json"

# (artifact, step, loss): the build's progress bar hangs here.
HeadCallback = Callable[[str, int, float], None]


@dataclass(frozen=True)
class HeadRecipe:
    """How much self-distillation data to make and how long each artifact trains."""

    prompts: int               # training rows (each a corpus prompt plus the target's continuation)
    heldout_prompts: int       # rows from held-out documents, for accuracy and the Medusa tree
    prompt_len: int
    new_tokens: int
    steps: dict[str, int] = field(default_factory=dict)  # artifact -> optimizer steps
    seed: int = 0
    threads: int = 1


# Sized by measurement on the zoo targets (one thread, CPU seconds on a 2-core AVX2 machine):
# ci ~40 s in all (data ~8, Medusa ~11, EAGLE-3 ~21), small ~2 min (data ~25, Medusa ~30,
# EAGLE-3 ~60). MTP (two modules over four chained depths) is priced like EAGLE-3.
HEAD_RECIPES: dict[str, HeadRecipe] = {
    "ci": HeadRecipe(prompts=48, heldout_prompts=16, prompt_len=32, new_tokens=96,
                     steps={"medusa_heads": 60, "eagle3_head": 80, "mtp": 80}),
    "small": HeadRecipe(prompts=96, heldout_prompts=24, prompt_len=32, new_tokens=128,
                        steps={"medusa_heads": 120, "eagle3_head": 120, "mtp": 120}),
}


def make_distill_data(target: Any, tokenizer_dir: Path, corpus: Corpus,
                      recipe: HeadRecipe) -> DistillData:
    """Self-distillation rows from the corpus's train and held-out splits, every domain mixed."""
    tok = load_tokenizer(tokenizer_dir)
    train_docs = [d for dom in DOMAINS for d in encode_documents(tok, corpus.train[dom])]
    held_docs = [d for dom in DOMAINS for d in encode_documents(tok, corpus.heldout[dom])]
    return DistillData(
        train=make_distill_set(target, train_docs, recipe.prompts, prompt_len=recipe.prompt_len,
                               new_tokens=recipe.new_tokens, seed=recipe.seed),
        heldout=make_distill_set(target, held_docs, recipe.heldout_prompts, prompt_len=recipe.prompt_len,
                                 new_tokens=recipe.new_tokens, seed=recipe.seed + 1000),
    )


def head_trainers() -> dict[str, Callable[..., dict[str, Any]]]:
    """Artifact -> trainer, for every built-in strategy that declares trainable heads."""
    trainers: dict[str, Callable[..., dict[str, Any]]] = {}
    for name, plugin in load_strategies(only_builtin=True).items():
        if not plugin.capabilities.trainable_heads:
            continue
        trainer = plugin.head_trainer()
        if trainer is None or plugin.capabilities.artifact is None:
            raise TypeError(f"strategy {name!r} declares trainable heads but no "
                            "train_heads hook or artifact on its StrategyPlugin")
        trainers[plugin.capabilities.artifact] = trainer
    return dict(sorted(trainers.items()))


def recipe_hash(recipe: HeadRecipe, target_dir: Path, corpus: Corpus, artifact: str) -> str:
    """Identity of one artifact's build: the shared data recipe, its own steps, the target's weights
    and the corpus text (another artifact's steps are not in it)."""
    h = hashlib.sha256(f"heads-v{HEADS_VERSION}".encode())
    own = {**asdict(recipe), "steps": recipe.steps.get(artifact, 0), "artifact": artifact}
    h.update(json.dumps(own, sort_keys=True).encode())
    for name in sorted(p.name for p in target_dir.glob("*.safetensors")):
        h.update(hashlib.sha256((target_dir / name).read_bytes()).digest())
    h.update(corpus.digest().encode())
    return h.hexdigest()[:16]


def train_heads_on(
    target_dir: Path, corpus: Corpus, out_root: Path, recipe: HeadRecipe,
    on_step: HeadCallback | None = None, tokenizer_dir: Path | None = None,
) -> dict[str, Path]:
    """Train (or reuse) every artifact's heads for the target in ``target_dir``; return their folders.

    An artifact whose folder holds a ``recipe.json`` with the same hash is reused as it is.
    """
    from transformers import AutoModelForCausalLM

    trainers = head_trainers()
    digests = {art: recipe_hash(recipe, target_dir, corpus, art) for art in trainers}
    paths = {art: out_root / art for art in trainers}
    todo = [art for art in trainers if not _cached(paths[art], digests[art])]
    if not todo:
        return paths
    with deterministic(recipe.threads):
        target = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
        target.requires_grad_(False)
        started = time.process_time()
        data = make_distill_data(target, tokenizer_dir or target_dir, corpus, recipe)
        data_seconds = time.process_time() - started
        for art in todo:
            started = time.process_time()
            report = trainers[art](
                target, data, paths[art], steps=recipe.steps.get(art, 0), seed=recipe.seed,
                on_step=None if on_step is None else (lambda s, v, a=art: on_step(a, s, v)),
            )
            record = {"hash": digests[art], "recipe": asdict(recipe),
                      "cpu_seconds": {"data": round(data_seconds, 1),
                                      "train": round(time.process_time() - started, 1)},
                      "report": report}
            (paths[art] / RECIPE_NAME).write_text(json.dumps(record, indent=2) + "\n")
    return paths


def train_heads(
    zoo_paths: ZooPaths, size: str, on_step: HeadCallback | None = None,
    corpus: Corpus | None = None,
) -> dict[str, Path]:
    """Train (or reuse) the heads of a zoo build; they go in ``<zoo root>/<artifact>/``.

    The hook for ``picker.zoo.build``: call it once the target is saved (``corpus`` saves
    rebuilding the corpus). Sizes without a head recipe (test-only builds) get no heads: ``{}``.
    """
    if size not in HEAD_RECIPES:
        return {}
    if corpus is None:
        from picker.zoo.corpus import build_corpus
        from picker.zoo.recipe import RECIPES

        zoo = RECIPES[size]
        corpus = build_corpus(zoo.chars_per_domain, zoo.heldout_chars, zoo.seed)
    return train_heads_on(zoo_paths.target, corpus, zoo_paths.root, HEAD_RECIPES[size], on_step,
                          tokenizer_dir=zoo_paths.tokenizer)


def _cached(folder: Path, digest: str) -> bool:
    """True when ``folder`` holds heads built from the recipe with this hash."""
    try:
        return json.loads((folder / RECIPE_NAME).read_text())["hash"] == digest
    except (OSError, ValueError, KeyError):
        return False


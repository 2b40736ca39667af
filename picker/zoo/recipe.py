"""Zoo recipes: every number that decides the weights, and the hash that names the cache folder.

A recipe is plain data. Its hash covers the recipe, the corpus text itself (stdlib sources differ
between Python versions), the zoo code version and the torch version, so a folder under the cache
dir is either exactly what this recipe builds here or absent. The thread count is not in the hash:
it changes speed, and in our checks never the weights.

    >>> recipe = RECIPES["ci"]
    >>> recipe.target.layers > recipe.draft.layers
    True
    >>> len(recipe_hash(recipe, corpus_digest="0" * 64))
    16
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import torch

from picker.zoo.corpus import CORPUS_VERSION
from picker.zoo.train import ModelSpec, TrainSchedule

# Bump when zoo code changes what a recipe produces (training loop, packing, sampling, saving).
ZOO_CODE_VERSION = 1

ZooSize = Literal["ci", "small"]
ZOO_DIR_ENV = "SPECPICKER_ZOO_DIR"
THREADS_ENV = "SPECPICKER_ZOO_THREADS"


@dataclass(frozen=True)
class Recipe:
    """Corpus size, tokenizer, the two model shapes and how long each trains."""

    size: str
    seed: int
    chars_per_domain: int          # training text per domain (code and prose give what they have)
    heldout_chars: int             # held-out text per domain, never trained on
    vocab_size: int                # byte-level BPE: 256 bytes + specials + merges
    seq_len: int                   # packed training rows; also the longest context the models saw
    max_positions: int             # written to config.json; engines size their caches from it
    target: ModelSpec
    draft: ModelSpec
    target_train: TrainSchedule
    draft_train: TrainSchedule
    kd_weight: float               # share of KL(target ‖ draft) in the draft's loss
    distill_prompts: int           # corpus prompts the target continues for the draft's training
    distill_prompt_len: int
    distill_new_tokens: int

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


# Chosen by measurement on this 2-core AVX2 machine, one thread (the report of each build has the
# numbers). At these budgets (~1e5-1e6 training tokens) every model is data-starved, so the
# target's edge over its draft comes from distillation order, not size alone: the draft learns
# from the trained target with fewer steps. Per-call overhead dominates models this small, so six
# narrow layers keep a 6-token forward within ~1.2-1.45x of a 1-token one, and a one-layer draft
# costs about a quarter to a third of the target. ci: ~130 s CPU; small: ~560 s CPU.
RECIPES: dict[str, Recipe] = {
    "ci": Recipe(
        size="ci", seed=0, chars_per_domain=300_000, heldout_chars=30_000, vocab_size=2048,
        seq_len=256, max_positions=1024,
        target=ModelSpec(hidden=128, layers=6, heads=4, kv_heads=2, intermediate=344),
        draft=ModelSpec(hidden=64, layers=1, heads=2, kv_heads=1, intermediate=172),
        target_train=TrainSchedule(steps=220, batch=4, lr=5e-3),
        draft_train=TrainSchedule(steps=120, batch=4, lr=5e-3),
        kd_weight=0.5, distill_prompts=64, distill_prompt_len=16, distill_new_tokens=112,
    ),
    "small": Recipe(
        size="small", seed=0, chars_per_domain=1_500_000, heldout_chars=40_000, vocab_size=2048,
        seq_len=256, max_positions=1024,
        target=ModelSpec(hidden=192, layers=6, heads=6, kv_heads=3, intermediate=512),
        draft=ModelSpec(hidden=96, layers=1, heads=3, kv_heads=1, intermediate=256),
        target_train=TrainSchedule(steps=550, batch=4, lr=4e-3),
        draft_train=TrainSchedule(steps=350, batch=4, lr=5e-3),
        kd_weight=0.5, distill_prompts=256, distill_prompt_len=16, distill_new_tokens=112,
    ),
}


def recipe_hash(recipe: Recipe, corpus_digest: str) -> str:
    """16 hex digits naming the build: recipe, corpus text, code and torch versions."""
    key = {
        "recipe": recipe.to_dict(),
        "corpus": corpus_digest,
        "corpus_version": CORPUS_VERSION,
        "code_version": ZOO_CODE_VERSION,
        "torch": torch.__version__.split("+")[0],
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def cache_root() -> Path:
    """``$SPECPICKER_ZOO_DIR`` if set, else ``~/.cache/specpicker/zoo``."""
    env = os.environ.get(ZOO_DIR_ENV)
    return Path(env) if env else Path.home() / ".cache" / "specpicker" / "zoo"


def build_threads() -> int:
    """Threads for training: ``$SPECPICKER_ZOO_THREADS`` or 1.

    One thread by default: on a shared 2-core machine a second thread that waits on a busy core
    makes every step several times slower, while one thread degrades gracefully.
    """
    return max(1, int(os.environ.get(THREADS_ENV, "1")))

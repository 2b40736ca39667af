"""A target/draft pair with an acceptance rate chosen by one knob ε, for testing policies.

The draft is the target's embeddings, first ``num_layers`` decoder layers, final norm and head.
The paired target is the original with every later layer's contribution to the residual stream
multiplied by ε (their output projections ``o_proj`` and ``down_proj`` scaled; Llama has no
biases, so this scales each layer's whole update). At ε = 0 the two models are the same function
and acceptance is 1; as ε grows the target drifts from the draft. docs/facts.md records about 98%
acceptance at ε = 0.005 and about 70% at ε = 0.05 with this construction.

    >>> pair = make_eps_draft(zoo.target, tmp / "eps", eps=0.01, num_layers=1)  # doctest: +SKIP
    >>> pair.target.name, pair.draft.name                                     # doctest: +SKIP
    ('target', 'draft')
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, PreTrainedModel

from picker.errors import UserError
from picker.zoo.train import save_quietly

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


@dataclass(frozen=True)
class EpsPair:
    """Folders of the ε-scaled target and its truncated draft (both ``from_pretrained``-able)."""

    target: Path
    draft: Path
    eps: float
    num_layers: int


def _copy_tokenizer(src: Path, dst: Path) -> None:
    for name in TOKENIZER_FILES:
        if (src / name).is_file():
            shutil.copy2(src / name, dst / name)


@torch.no_grad()
def _scale_later_layers(model: PreTrainedModel, num_layers: int, eps: float) -> None:
    """Multiply the residual-writing projections of layers ``num_layers..`` by ``eps``."""
    for layer in model.model.layers[num_layers:]:
        layer.self_attn.o_proj.weight.mul_(eps)
        layer.mlp.down_proj.weight.mul_(eps)


def make_eps_draft(target_dir: Path, out_dir: Path, eps: float, num_layers: int) -> EpsPair:
    """Write ``out_dir/target`` (ε-scaled) and ``out_dir/draft`` (first ``num_layers`` layers).

    Use the pair together: the draft predicts the scaled target, not the original one.
    """
    target_dir, out_dir = Path(target_dir), Path(out_dir)
    if eps < 0:
        raise UserError(f"eps must be >= 0, got {eps}", field="eps")
    target = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32)
    total = target.config.num_hidden_layers
    if not 1 <= num_layers < total:
        raise UserError(f"num_layers must be in 1..{total - 1}, got {num_layers}", field="num_layers")
    _scale_later_layers(target, num_layers, eps)
    pair = EpsPair(target=out_dir / "target", draft=out_dir / "draft", eps=eps, num_layers=num_layers)
    save_quietly(target, pair.target)

    # The draft shares every tensor it keeps with the original target; the later layers are cut.
    draft = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32)
    draft.model.layers = draft.model.layers[:num_layers]
    draft.config.num_hidden_layers = num_layers
    if getattr(draft.config, "layer_types", None):
        draft.config.layer_types = draft.config.layer_types[:num_layers]
    save_quietly(draft, pair.draft)
    for folder in (pair.target, pair.draft):
        _copy_tokenizer(target_dir, folder)
    return pair

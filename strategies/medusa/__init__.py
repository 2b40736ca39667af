"""The `medusa` strategy: declared capabilities; the drafter and the trainer are imported lazily.

Lazy so that `specpick recommend` (which only reads ``PLUGIN.capabilities``) never imports torch.

    >>> PLUGIN.capabilities.trainable_heads, PLUGIN.capabilities.artifact
    (True, 'medusa_heads')
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from picker.engine.plugins import Capabilities, StrategyPlugin

if TYPE_CHECKING:
    from collections.abc import Sequence

    from picker.zoo.heads import DistillData
    from strategies.medusa.drafter import MedusaDrafter


def make_drafter(
    *,
    target_backend: Any,
    artifact: str | Path | None = None,
    choices: Sequence[Sequence[int]] | None = None,
    sample_drafts: bool = True,
) -> MedusaDrafter:
    """Medusa heads from the folder ``artifact`` on ``target_backend``'s model.

    ``choices`` (Medusa-style rank paths) overrides the tree stored with the heads;
    ``sample_drafts=False`` keeps top-k tokens (``p=None``) at temperature > 0 too.
    """
    from strategies.medusa.drafter import make_drafter as build

    return build(target_backend=target_backend, artifact=artifact, choices=choices,
                 sample_drafts=sample_drafts)


def train_heads(target: Any, data: DistillData, out_dir: Path, *, steps: int, seed: int,
                on_step: Any = None) -> dict[str, Any]:
    """The zoo's head-training hook (``picker.zoo.heads``); see ``strategies.medusa.train``."""
    from strategies.medusa.train import train_heads as run

    return run(target, data, out_dir, steps=steps, seed=seed, on_step=on_step)


PLUGIN = StrategyPlugin(
    name="medusa",
    summary="Extra decoding heads on the target last hidden state propose a static token tree (Medusa, Cai 2024).",
    # artifact_heads: heads a trained set holds when the profile does not say (Medusa-1 ships 4-5, Cai et al. 2024).
    capabilities=Capabilities(needs_hidden_states=True, trainable_heads=True, tree=True, artifact="medusa_heads", artifact_heads=4, draft_cost="heads", engines={"sglang": None, "vllm": "medusa", "tensorrt_llm": "Medusa", "llama_cpp": None}),
    make_drafter=make_drafter,
)

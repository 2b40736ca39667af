"""The `eagle3` strategy: declared capabilities; the drafter and the trainer are imported lazily.

Lazy so that `specpick recommend` (which only reads ``PLUGIN.capabilities``) never imports torch.

    >>> PLUGIN.capabilities.needs_hidden_states, PLUGIN.capabilities.artifact
    (True, 'eagle3_head')
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from picker.engine.plugins import Capabilities, StrategyPlugin

if TYPE_CHECKING:
    from picker.zoo.heads import DistillData
    from strategies.eagle3.drafter import Eagle3Drafter


def make_drafter(
    *,
    target_backend: Any,
    artifact: str | Path | None = None,
    topk: int | None = None,
    depth: int | None = None,
    num_draft_tokens: int | None = None,
    sample_drafts: bool = True,
) -> Eagle3Drafter:
    """An EAGLE-3 head from the folder ``artifact`` on ``target_backend``'s model.

    ``topk`` (children per expanded node and nodes expanded per depth), ``depth`` (tree depth)
    and ``num_draft_tokens`` (kept nodes + 1, SGLang's convention) override the stored defaults.
    ``sample_drafts=False`` keeps the top-k tree (``p=None``) at temperature > 0 too, instead of
    a sampled chain sent with p.
    """
    from strategies.eagle3.drafter import make_drafter as build

    return build(target_backend=target_backend, artifact=artifact, topk=topk, depth=depth,
                 num_draft_tokens=num_draft_tokens, sample_drafts=sample_drafts)


def train_heads(target: Any, data: DistillData, out_dir: Path, *, steps: int, seed: int,
                on_step: Any = None) -> dict[str, Any]:
    """The zoo's head-training hook (``picker.zoo.heads``); see ``strategies.eagle3.train``."""
    from strategies.eagle3.train import train_heads as run

    return run(target, data, out_dir, steps=steps, seed=seed, on_step=on_step)


PLUGIN = StrategyPlugin(
    name="eagle3",
    summary="A one-layer draft transformer on fused target hidden states grows a dynamic tree (EAGLE-3, Li 2025).",
    capabilities=Capabilities(needs_hidden_states=True, trainable_heads=True, tree=True, sampled_tree=False, artifact="eagle3_head", draft_cost="target_layer", engines={"sglang": "EAGLE3", "vllm": "eagle3", "tensorrt_llm": "Eagle3", "llama_cpp": None}),
    make_drafter=make_drafter,
)

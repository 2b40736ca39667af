"""The `vanilla` strategy: declared capabilities; the drafter itself is imported lazily.

Lazy so that `specpick recommend` (which only reads ``PLUGIN.capabilities``) never imports torch.

    >>> PLUGIN.capabilities.deterministic_draft, PLUGIN.make_drafter is not None
    (False, True)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from picker.engine.plugins import Capabilities, StrategyPlugin

if TYPE_CHECKING:
    from strategies.vanilla.drafter import DraftModelDrafter


def make_drafter(
    *,
    target_backend: Any = None,
    artifact: Any = None,
    num_draft_tokens: int = 4,
    draft_backend: Any = None,
) -> DraftModelDrafter:
    """``artifact`` is the draft model's local folder (same tokenizer as the target)."""
    from strategies.vanilla.drafter import make_drafter as build

    return build(
        target_backend=target_backend,
        artifact=artifact,
        num_draft_tokens=num_draft_tokens,
        draft_backend=draft_backend,
    )


PLUGIN = StrategyPlugin(
    name="vanilla",
    summary="A separate small draft model with the same tokenizer proposes a chain (Leviathan 2023).",
    capabilities=Capabilities(needs_draft_model=True, artifact="draft_model", draft_cost="draft_model", engines={"sglang": "STANDALONE", "vllm": "draft_model", "tensorrt_llm": "DraftTarget", "llama_cpp": "draft-simple"}),
    make_drafter=make_drafter,
)

"""The `ngram` strategy: declared capabilities; the drafter itself is imported lazily.

Lazy so that `specpick recommend` (which only reads ``PLUGIN.capabilities``) never imports torch.

    >>> PLUGIN.capabilities.deterministic_draft, PLUGIN.make_drafter is not None
    (True, True)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from picker.engine.plugins import Capabilities, StrategyPlugin

if TYPE_CHECKING:
    from strategies.ngram.drafter import PromptLookupDrafter


def make_drafter(
    *,
    target_backend: Any = None,
    artifact: Any = None,
    num_draft_tokens: int = 8,
    n_max: int = 4,
    n_min: int = 1,
) -> PromptLookupDrafter:
    """No model, no artifact: ``num_draft_tokens`` and the match sizes ``n_max``..``n_min`` are its knobs."""
    from strategies.ngram.drafter import make_drafter as build

    return build(
        target_backend=target_backend,
        artifact=artifact,
        num_draft_tokens=num_draft_tokens,
        n_max=n_max,
        n_min=n_min,
    )


PLUGIN = StrategyPlugin(
    name="ngram",
    summary="Prompt lookup: match the last n tokens in prompt and output, propose what followed (Saxena 2023).",
    capabilities=Capabilities(deterministic_draft=True, draft_cost="cpu_lookup", engines={"sglang": "NGRAM", "vllm": "ngram", "tensorrt_llm": "NGram", "llama_cpp": "ngram-simple"}),
    make_drafter=make_drafter,
)

"""The `lookahead` strategy: declared capabilities; the drafter itself is imported lazily.

Lazy so that `specpick recommend` (which only reads ``PLUGIN.capabilities``) never imports torch.

    >>> PLUGIN.capabilities.deterministic_draft, PLUGIN.make_drafter is not None
    (True, True)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from picker.engine.plugins import Capabilities, StrategyPlugin

if TYPE_CHECKING:
    from strategies.lookahead.drafter import LookaheadDrafter


def make_drafter(
    *,
    target_backend: Any = None,
    artifact: Any = None,
    window: int = 4,
    ngram: int = 3,
    verify_set: int = 4,
) -> LookaheadDrafter:
    """No model, no artifact: window W, n-gram size N and verification set G are its knobs."""
    from strategies.lookahead.drafter import make_drafter as build

    return build(
        target_backend=target_backend,
        artifact=artifact,
        window=window,
        ngram=ngram,
        verify_set=verify_set,
    )


PLUGIN = StrategyPlugin(
    name="lookahead",
    summary="Jacobi iteration fills an n-gram pool whose candidates are verified in the same forward (Fu 2024).",
    capabilities=Capabilities(deterministic_draft=True, draft_cost="in_forward", engines={"sglang": "NGRAM", "vllm": None, "tensorrt_llm": "Lookahead", "llama_cpp": None}),
    make_drafter=make_drafter,
)

"""The `lookahead` strategy: declared capabilities; its drafter is named, imported on first use.

Named, not imported, so that `specpick recommend` (which only reads ``PLUGIN.capabilities``) never
imports torch; the registry resolves ``make_drafter`` when a drafter is built.

    >>> PLUGIN.capabilities.deterministic_draft, PLUGIN.draft_options.chain(3)
    (True, ({'ngram': 4}, 64))
"""

from __future__ import annotations

from picker.engine.plugins import Capabilities, DraftOptions, StrategyPlugin

PLUGIN = StrategyPlugin(
    name="lookahead",
    summary="Jacobi iteration fills an n-gram pool whose candidates are verified in the same forward (Fu 2024).",
    capabilities=Capabilities(deterministic_draft=True, draft_cost="in_forward",
                              engines={"sglang": "NGRAM", "vllm": None, "tensorrt_llm": "Lookahead",
                                       "llama_cpp": None}),
    # No model, no artifact: window W, n-gram size N and verification set G are its knobs.
    make_drafter="strategies.lookahead.drafter:make_drafter",
    # An n-gram of n tokens proposes n - 1 drafts; all G candidates ride in one forward (uncapped).
    draft_options=DraftOptions(length="ngram", length_offset=1, capped=False),
    engine_configs={"sglang": "strategies.lookahead.engines:sglang",
                    "tensorrt_llm": "strategies.lookahead.engines:tensorrt_llm"},
)

"""The `ngram` strategy: declared capabilities; its drafter is named, imported on first use.

Named, not imported, so that `specpick recommend` (which only reads ``PLUGIN.capabilities``) never
imports torch; the registry resolves ``make_drafter`` when a drafter is built.

    >>> PLUGIN.capabilities.deterministic_draft, PLUGIN.draft_options.length
    (True, 'num_draft_tokens')
"""

from __future__ import annotations

from picker.engine.plugins import Capabilities, StrategyPlugin

PLUGIN = StrategyPlugin(
    name="ngram",
    summary="Prompt lookup: match the last n tokens in prompt and output, propose what followed (Saxena 2023).",
    capabilities=Capabilities(deterministic_draft=True, draft_cost="cpu_lookup",
                              engines={"sglang": "NGRAM", "vllm": "ngram", "tensorrt_llm": "NGram",
                                       "llama_cpp": "ngram-simple"}),
    # No model, no artifact: num_draft_tokens and the match sizes n_max..n_min are its knobs.
    make_drafter="strategies.ngram.drafter:make_drafter",
    engine_configs={engine: f"strategies.ngram.engines:{engine}"
                    for engine in ("sglang", "vllm", "tensorrt_llm", "llama_cpp")},
)

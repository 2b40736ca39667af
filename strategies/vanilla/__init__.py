"""The `vanilla` strategy: declared capabilities; its drafter is named, imported on first use.

Named, not imported, so that `specpick recommend` (which only reads ``PLUGIN.capabilities``) never
imports torch; the registry resolves ``make_drafter`` when a drafter is built.

    >>> PLUGIN.capabilities.deterministic_draft, PLUGIN.make_drafter
    (False, 'strategies.vanilla.drafter:make_drafter')
"""

from __future__ import annotations

from picker.engine.plugins import Capabilities, StrategyPlugin

PLUGIN = StrategyPlugin(
    name="vanilla",
    summary="A separate small draft model with the same tokenizer proposes a chain (Leviathan 2023).",
    capabilities=Capabilities(needs_draft_model=True, artifact="draft_model", draft_cost="draft_model",
                              engines={"sglang": "STANDALONE", "vllm": "draft_model", "tensorrt_llm": "DraftTarget",
                                       "llama_cpp": "draft-simple"}),
    # artifact: the draft model's local folder (same tokenizer as the target); num_draft_tokens: N.
    make_drafter="strategies.vanilla.drafter:make_drafter",
    # SGLang and TensorRT-LLM take the generic config (algorithm, draft path, length).
    engine_configs={"vllm": "strategies.vanilla.engines:vllm", "llama_cpp": "strategies.vanilla.engines:llama_cpp"},
)

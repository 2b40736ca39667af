"""The `eagle3` strategy: declared capabilities; drafter and trainer named, imported on first use.

Named, not imported, so that `specpick recommend` (which only reads ``PLUGIN.capabilities``) never
imports torch; the registry resolves each hook when it is called.

    >>> PLUGIN.capabilities.needs_hidden_states, PLUGIN.capabilities.artifact
    (True, 'eagle3_head')
    >>> PLUGIN.draft_options.chain(3)
    ({'depth': 3, 'topk': 1, 'num_draft_tokens': 4}, 3)
"""

from __future__ import annotations

from picker.engine.plugins import Capabilities, DraftOptions, StrategyPlugin

PLUGIN = StrategyPlugin(
    name="eagle3",
    summary="A one-layer draft transformer on fused target hidden states grows a dynamic tree (EAGLE-3, Li 2025).",
    capabilities=Capabilities(needs_hidden_states=True, trainable_heads=True, tree=True, sampled_tree=False,
                              artifact="eagle3_head", draft_cost="target_layer",
                              engines={"sglang": "EAGLE3", "vllm": "eagle3", "tensorrt_llm": "Eagle3",
                                       "llama_cpp": None}),
    # artifact: the head folder; topk, depth, num_draft_tokens override its stored drafting defaults.
    make_drafter="strategies.eagle3.drafter:make_drafter",
    # A tree of depth x topk with num_draft_tokens = kept nodes + 1 (SGLang's convention); a chain
    # of N is the top-1 tree of depth N.
    draft_options=DraftOptions(depth="depth", topk="topk", length="num_draft_tokens", length_offset=1),
    train_heads="strategies.eagle3.train:train_heads",
    # SGLang and vLLM take the generic config; TensorRT-LLM writes its dynamic tree.
    engine_configs={"tensorrt_llm": "strategies.eagle3.engines:tensorrt_llm"},
)

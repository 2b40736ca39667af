"""The `mtp` strategy: declared capabilities and engine mappings; drafter and trainer named, imported on use.

Named, not imported, so that `specpick recommend` (which only reads ``PLUGIN.capabilities`` and the
engine hooks) never imports torch; the registry resolves each hook when it is called.

    >>> PLUGIN.capabilities.needs_hidden_states, PLUGIN.capabilities.artifact
    (True, 'mtp')
    >>> PLUGIN.draft_options.chain(3)
    ({'num_draft_tokens': 3}, 3)
"""

from __future__ import annotations

from picker.engine.plugins import Capabilities, DraftOptions, StrategyPlugin

PLUGIN = StrategyPlugin(
    name="mtp",
    summary=("The target's own multi-token-prediction modules (one block per depth on its hidden state) "
             "draft a chain (DeepSeek-V3, 2024)."),
    # One decoder-sized block per drafted token: the cost model prices it like EAGLE's layer. The
    # artifact is the modules (drafters.mtp: their count, or built into the checkpoint).
    capabilities=Capabilities(needs_hidden_states=True, trainable_heads=True, artifact="mtp",
                              draft_cost="target_layer",
                              engines={"sglang": "NEXTN", "vllm": "mtp", "tensorrt_llm": "MTP",
                                       "llama_cpp": "draft-mtp"}),
    make_drafter="strategies.mtp.drafter:make_drafter",
    draft_options=DraftOptions(length="num_draft_tokens"),  # a chain of N: N drafted tokens
    train_heads="strategies.mtp.train:train_heads",
    engine_configs={engine: f"strategies.mtp.engines:{engine}"
                    for engine in ("sglang", "vllm", "tensorrt_llm", "llama_cpp")},
)

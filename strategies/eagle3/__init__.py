"""The `eagle3` strategy: declared capabilities; the drafter itself is imported lazily."""

from picker.plugins import Capabilities, StrategyPlugin

PLUGIN = StrategyPlugin(
    name="eagle3",
    summary="A one-layer draft transformer on fused target hidden states grows a dynamic tree (EAGLE-3, Li 2025).",
    capabilities=Capabilities(needs_hidden_states=True, trainable_heads=True, tree=True, artifact="eagle3_head", draft_cost="target_layer", engines={"sglang": "EAGLE3", "vllm": "eagle3", "tensorrt_llm": "Eagle3", "llama_cpp": None}),
)

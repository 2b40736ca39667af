"""The `medusa` strategy: declared capabilities; the drafter itself is imported lazily."""

from picker.plugins import Capabilities, StrategyPlugin

PLUGIN = StrategyPlugin(
    name="medusa",
    summary="Extra decoding heads on the target last hidden state propose a static token tree (Medusa, Cai 2024).",
    capabilities=Capabilities(needs_hidden_states=True, trainable_heads=True, tree=True, artifact="medusa_heads", draft_cost="heads", engines={"sglang": None, "vllm": "medusa", "tensorrt_llm": "Medusa", "llama_cpp": None}),
)

"""The `vanilla` strategy: declared capabilities; the drafter itself is imported lazily."""

from picker.plugins import Capabilities, StrategyPlugin

PLUGIN = StrategyPlugin(
    name="vanilla",
    summary="A separate small draft model with the same tokenizer proposes a chain (Leviathan 2023).",
    capabilities=Capabilities(needs_draft_model=True, artifact="draft_model", draft_cost="draft_model", engines={"sglang": "STANDALONE", "vllm": "draft_model", "tensorrt_llm": "DraftTarget", "llama_cpp": "draft-simple"}),
)

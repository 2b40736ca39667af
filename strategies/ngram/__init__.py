"""The `ngram` strategy: declared capabilities; the drafter itself is imported lazily."""

from picker.plugins import Capabilities, StrategyPlugin

PLUGIN = StrategyPlugin(
    name="ngram",
    summary="Prompt lookup: match the last n tokens in prompt and output, propose what followed (Saxena 2023).",
    capabilities=Capabilities(deterministic_draft=True, draft_cost="cpu_lookup", engines={"sglang": "NGRAM", "vllm": "ngram", "tensorrt_llm": "NGram", "llama_cpp": "ngram-simple"}),
)

"""The `lookahead` strategy: declared capabilities; the drafter itself is imported lazily."""

from picker.plugins import Capabilities, StrategyPlugin

PLUGIN = StrategyPlugin(
    name="lookahead",
    summary="Jacobi iteration fills an n-gram pool whose candidates are verified in the same forward (Fu 2024).",
    capabilities=Capabilities(deterministic_draft=True, draft_cost="in_forward", engines={"sglang": "NGRAM", "vllm": None, "tensorrt_llm": "Lookahead", "llama_cpp": None}),
)

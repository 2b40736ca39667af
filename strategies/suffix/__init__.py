"""The `suffix` strategy: declared capabilities, engine mappings; its drafter is named, imported on use.

Named, not imported, so that `specpick recommend` (which only reads ``PLUGIN.capabilities`` and the
engine hooks) never imports the drafter.

    >>> PLUGIN.capabilities.tree, PLUGIN.capabilities.deterministic_draft
    (True, True)
    >>> PLUGIN.draft_options.chain(3)
    ({'max_depth': 3, 'topk': 1, 'num_draft_tokens': 3}, 3)
    >>> PLUGIN.draft_options.tree(4, 2, 8)
    {'max_depth': 4, 'topk': 2, 'num_draft_tokens': 7}
"""

from __future__ import annotations

from picker.engine.plugins import Capabilities, DraftOptions, StrategyPlugin

PLUGIN = StrategyPlugin(
    name="suffix",
    summary=("Suffix trees over the request and a cache of earlier responses propose a frequency-scored "
             "tree sized by the match (Suffix Decoding, Oliaro 2024)."),
    # No model, no artifact: a host-side lookup. Engines: vLLM's own suffix method; TensorRT-LLM's
    # suffix automaton; SGLang's and llama.cpp's nearest n-gram caches (each flagged in engines.py).
    capabilities=Capabilities(deterministic_draft=True, tree=True, draft_cost="cpu_lookup",
                              engines={"sglang": "NGRAM", "vllm": "suffix", "tensorrt_llm": "SA",
                                       "llama_cpp": "ngram-cache"},
                              chain_only_engines=("tensorrt_llm",),  # SA drafts one chain (llm_args.py)
                              # Only vLLM runs Suffix Decoding itself (Arctic Inference's).
                              approximate_engines=("sglang", "tensorrt_llm", "llama_cpp")),
    make_drafter="strategies.suffix.drafter:make_drafter",
    # num_draft_tokens caps the tree's nodes (the root not counted); max_depth and topk bound its shape.
    draft_options=DraftOptions(length="num_draft_tokens", depth="max_depth", topk="topk"),
    engine_configs={engine: f"strategies.suffix.engines:{engine}"
                    for engine in ("sglang", "vllm", "tensorrt_llm", "llama_cpp")},
)

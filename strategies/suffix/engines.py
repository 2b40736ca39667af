"""Suffix decoding's engine configs (the ``engine_configs`` hooks of ``strategies.suffix``).

Only vLLM runs Suffix Decoding itself (Arctic Inference's implementation behind ``{"method":
"suffix"}``); the other engines run their nearest relative, and each config says how it differs.

    >>> from picker.engine.deploy import DeployRequest
    >>> cfg = vllm(DeployRequest(engine="vllm", version="0.32.0", algorithm="suffix", depth=8))
    >>> cfg.config["method"], cfg.config["suffix_decoding_max_spec_factor"], cfg.versions
    ('suffix', 1.0, '>=0.11.1')
"""

from __future__ import annotations

from picker.engine.deploy import DeployRequest, EngineConfig, Unsupported, sglang_ngram_args

# vllm/config/speculative.py: "suffix" and its suffix_decoding_* keys are absent in 0.11.0 and present
# from 0.11.1 to 0.32.0 with the same defaults (tree depth 24, 10 000 cached requests, spec factor
# 1.0, min token prob 0.1); _validate_suffix_decoding() raises ImportError without arctic-inference.
VLLM_SUFFIX_SINCE = "0.11.1"
VLLM_TREE_DEPTH = 24
VLLM_CACHED_REQUESTS = 10_000
VLLM_SPEC_FACTOR = 1.0
VLLM_MIN_TOKEN_PROB = 0.1
ARCTIC = "arctic-inference==0.1.1"  # the pin vLLM's own error message names (0.11.1 and 0.32.0)


def vllm(req: DeployRequest) -> EngineConfig:
    if not req.at_least(VLLM_SUFFIX_SINCE):
        raise Unsupported(f"vLLM {req.version} has no suffix method (it arrived in {VLLM_SUFFIX_SINCE})")
    return EngineConfig(
        config={"method": req.algorithm, "num_speculative_tokens": req.depth,
                # The tree depth bounds match + speculation: leave room for the longest draft.
                "suffix_decoding_max_tree_depth": max(VLLM_TREE_DEPTH, req.depth + 1),
                "suffix_decoding_max_cached_requests": VLLM_CACHED_REQUESTS,
                "suffix_decoding_max_spec_factor": VLLM_SPEC_FACTOR,
                "suffix_decoding_min_token_prob": VLLM_MIN_TOKEN_PROB},
        versions=f">={VLLM_SUFFIX_SINCE}",
        notes=(f"vllm: install {ARCTIC} beside vLLM (its suffix method refuses to start without it); "
               "num_speculative_tokens is the most it drafts, the match length decides each step's",))


def sglang(req: DeployRequest) -> EngineConfig:
    """NGRAM with frequency ranking; BFS breadth = the tree's top-k (SGLang derives steps from it)."""
    return EngineConfig(args=sglang_ngram_args(req, breadth=req.topk, match_type="PROB"), approximation=(
        "SGLang 0.5.23 has no suffix algorithm; its NGRAM worker keeps one n-gram trie across requests "
        "(--speculative-ngram-capacity, fed the last max-trie-depth tokens of prompt and output each step) "
        "and, with match type PROB, ranks continuations by frequency, but the draft size does not follow "
        "the match length (speculative/ngram_worker.py, arg_groups/fields/spec.py)"))


def tensorrt_llm(req: DeployRequest) -> EngineConfig:
    """SADecodingConfig: the longest suffix-automaton match, over every request's state with the global pool."""
    return EngineConfig(
        config={"decoding_type": req.algorithm, "max_draft_len": req.depth, "max_matching_ngram_size": -1,
                "enable_global_pool": True},
        notes=("tensorrt_llm: SADecodingConfig read in tensorrt_llm/llmapi/llm_args.py on main at commit "
               "0004396 (2026), not in the 1.4.0rc4 release",),
        approximation=(
            "TensorRT-LLM's suffix automaton (SA) proposes the continuation of the longest match as one chain, "
            "with no frequency scores and a fixed length; enable_global_pool searches the other requests' "
            "automata and keeps finished ones until global_pool_size slots are full, oldest out first"))


def llama_cpp(req: DeployRequest) -> EngineConfig:
    return EngineConfig(
        args=("--spec-type", req.algorithm),
        notes=("llama_cpp: ngram-cache drafts 8 tokens whatever --spec-draft-n-max says "
               "(n_draft is fixed in common/speculative.cpp)",),
        approximation=(
            "llama.cpp's ngram-cache drafts from 1- to 4-gram counts over the request (LLAMA_NGRAM_MAX 4, "
            "common/ngram-cache.h); earlier responses count only through --lookup-cache-dynamic FILE, "
            "which llama-server reads at start and never updates"))

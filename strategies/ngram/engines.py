"""Prompt lookup's engine configs (the ``engine_configs`` hooks of ``strategies.ngram``).

    >>> from picker.engine.deploy import DeployRequest
    >>> vllm(DeployRequest(engine="vllm", version="0.32.0", algorithm="ngram", depth=4)).config
    {'method': 'ngram', 'num_speculative_tokens': 4, 'prompt_lookup_min': 2, 'prompt_lookup_max': 5}
"""

from __future__ import annotations

from picker.engine.deploy import DeployRequest, EngineConfig, sglang_ngram_args

# vLLM prompt lookup window (its own default is 5/5); min 2 avoids matching on one common token.
VLLM_PROMPT_LOOKUP = (2, 5)
TRT_NGRAM_MATCH = 2  # NGramDecodingConfig.max_matching_ngram_size default
# llama.cpp ngram-simple lookup length (its default 12 rarely matches); between vLLM's min and max.
LLAMA_NGRAM_LOOKUP = 3


def sglang(req: DeployRequest) -> EngineConfig:
    """SGLang NGRAM as a chain (BFS breadth 1): the shape the policy modelled."""
    return EngineConfig(args=sglang_ngram_args(req))


def vllm(req: DeployRequest) -> EngineConfig:
    """``{"method": "ngram"}`` with prompt_lookup_min/max (vllm/config/speculative.py, 0.10.1 to 0.32.0)."""
    lo, hi = VLLM_PROMPT_LOOKUP
    return EngineConfig(config={"method": req.algorithm, "num_speculative_tokens": req.depth,
                                "prompt_lookup_min": lo, "prompt_lookup_max": hi})


def tensorrt_llm(req: DeployRequest) -> EngineConfig:
    """NGramDecodingConfig: a chain of ``max_draft_len`` after a match of ``max_matching_ngram_size``."""
    return EngineConfig(config={"decoding_type": req.algorithm, "max_draft_len": req.depth,
                                "max_matching_ngram_size": TRT_NGRAM_MATCH})


def llama_cpp(req: DeployRequest) -> EngineConfig:
    """ngram-simple drafts size_m tokens (default 48) and ignores --spec-draft-n-max (speculative.cpp).

    It drafts nothing when size_m < size_n (common_ngram_simple_draft: copy_max < n_draft_min), so a
    chain shorter than the lookup looks up only as many tokens as it drafts (seen: N=2 with size_n=3
    proposed 0 drafts in 658 steps on the real Qwen pair).
    """
    n = req.depth
    return EngineConfig(args=("--spec-type", req.algorithm,
                              "--spec-ngram-simple-size-n", str(min(LLAMA_NGRAM_LOOKUP, n)),
                              "--spec-ngram-simple-size-m", str(n)))

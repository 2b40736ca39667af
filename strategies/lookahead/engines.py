"""Lookahead decoding's engine configs (the ``engine_configs`` hooks of ``strategies.lookahead``).

SGLang 0.5.23 has no lookahead algorithm of its own; its NGRAM worker (an n-gram trie over what
requests generated) is what it offers, run here as a chain. TensorRT-LLM has Lookahead proper.
"""

from __future__ import annotations

from picker.engine.deploy import DeployRequest, EngineConfig, sglang_ngram_args

# TensorRT-LLM's Lookahead (W, G) defaults (executor.h); N follows the draft length.
TRT_LOOKAHEAD_WINDOW = 4
TRT_LOOKAHEAD_VERIFICATION_SET = 4


def sglang(req: DeployRequest) -> EngineConfig:
    return EngineConfig(args=sglang_ngram_args(req), approximation=(
        "SGLang runs an n-gram trie over generated text (NGRAM), not Jacobi lookahead: the guesses come "
        "from earlier text rather than from the parallel window"))


def tensorrt_llm(req: DeployRequest) -> EngineConfig:
    """LookaheadDecodingConfig (W, N, G): one verified n-gram adds at most N - 1 tokens."""
    return EngineConfig(
        config={"decoding_type": req.algorithm, "max_window_size": TRT_LOOKAHEAD_WINDOW,
                "max_ngram_size": req.depth + 1, "max_verification_set_size": TRT_LOOKAHEAD_VERIFICATION_SET},
        notes=("tensorrt_llm: Lookahead runs on the TensorRT engine backend (trtllm-build), not PyTorch",),
        schedule=False)  # no runtime draft-length control

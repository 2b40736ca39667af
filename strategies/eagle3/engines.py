"""EAGLE-3's engine configs (the ``engine_configs`` hooks of ``strategies.eagle3``).

SGLang and vLLM take the generic config (algorithm, head path, tree flags or length); TensorRT-LLM
grows an EAGLE-2 dynamic tree when the decision is a tree.
"""

from __future__ import annotations

from picker.engine.deploy import DeployRequest, EngineConfig


def tensorrt_llm(req: DeployRequest) -> EngineConfig:
    """Eagle3DecodingConfig; a tree is the dynamic one: max_draft_len <= total nodes <= topK * max_draft_len."""
    cfg = {"decoding_type": req.algorithm, "max_draft_len": req.depth, "speculative_model": req.artifact}
    if req.chain:
        return EngineConfig(config=cfg)
    total = min(max(req.depth, req.num_draft_tokens - 1), req.depth * req.topk)
    cfg.update(use_dynamic_tree=True, dynamic_tree_max_topK=req.topk, max_total_draft_tokens=total)
    return EngineConfig(config=cfg, schedule=False)  # draft_len_schedule: linear drafting only

"""MTP's engine configs (the ``engine_configs`` hooks of ``strategies.mtp``).

Every engine runs a checkpoint's own MTP modules; ``req.artifact`` is where they are (the target's
own path when the profile says ``drafters.mtp.builtin``) and ``artifact_info["modules"]`` how many.

    >>> from picker.engine.deploy import DeployRequest
    >>> old = vllm(DeployRequest(engine="vllm", version="0.10.1", algorithm="mtp", depth=1,
    ...                          artifact="deepseek-ai/DeepSeek-V3", artifact_info={"modules": 1, "builtin": True}))
    >>> old.config, old.versions
    ({'method': 'deepseek_mtp', 'num_speculative_tokens': 1}, '<0.11.0')
"""

from __future__ import annotations

from picker.engine.deploy import DeployRequest, EngineConfig, Unsupported, default_config

# vllm/config/speculative.py: method "mtp" is absent in 0.10.2 (vllm/config/__init__.py) and present
# from 0.11.0; 0.10.1 and 0.10.2 know "deepseek_mtp" (0.10.2 also ernie_mtp, qwen3_next_mtp) and read
# the modules from the target when it is DeepSeek-V3 or MiMo. From 0.10.1 to 0.32.0 a draft longer
# than the checkpoint's modules must be a multiple of their count (n_predict).
VLLM_MTP_SINCE = "0.11.0"


def _modules(req: DeployRequest) -> int | None:
    count = req.artifact_info.get("modules")
    return int(count) if count is not None else None


def sglang(req: DeployRequest) -> EngineConfig:
    """NEXTN (an alias of EAGLE in 0.5.23) on the MTP weights: the three tree flags, a chain.

    SGLang fills the draft path with the target's own for DeepSeek-V3/V3.2/V4, GLM-4.5 MoE,
    BailingMoE and Qwen4-Exp checkpoints (arg_groups/speculative_hook.py) and warns when it is given;
    Qwen3-Next and other MTP checkpoints need it, so it is always passed.
    """
    return default_config(req)


def vllm(req: DeployRequest) -> EngineConfig:
    modules = _modules(req)
    if modules and req.depth > modules and req.depth % modules:
        raise Unsupported(f"vLLM drafts past the checkpoint's {modules} MTP modules only in multiples of "
                          f"{modules} (num_speculative_tokens {req.depth}; vllm/config/speculative.py)")
    builtin = bool(req.artifact_info.get("builtin"))
    spec: dict[str, object] = {"method": req.algorithm, "num_speculative_tokens": req.depth}
    if not builtin and req.artifact is not None:
        spec["model"] = req.artifact  # separately trained modules; built-in ones are read from the target
    if req.at_least(VLLM_MTP_SINCE):
        return EngineConfig(config=spec, versions=f">={VLLM_MTP_SINCE}")
    spec["method"] = "deepseek_mtp"
    return EngineConfig(config=spec, versions=f"<{VLLM_MTP_SINCE}", notes=(
        f"vllm: {req.version} names the method deepseek_mtp and finds built-in modules only in DeepSeek-V3 "
        "and MiMo checkpoints (vllm/config/__init__.py)",))


def tensorrt_llm(req: DeployRequest) -> EngineConfig:
    """MTPDecodingConfig: ``max_draft_len`` on main, where ``num_nextn_predict_layers`` is its deprecated
    spelling (remapped); older releases read the draft length from ``num_nextn_predict_layers``, so both go in."""
    cfg: dict[str, object] = {"decoding_type": req.algorithm, "max_draft_len": req.depth,
                              "num_nextn_predict_layers": req.depth}
    modules = _modules(req)
    notes = ["tensorrt_llm: MTPDecodingConfig read on TensorRT-LLM main (llm_args.py at commit 0004396); a "
             "single-module checkpoint drafts past one token in MTP-Eagle mode (the module reused)"]
    if modules is not None and modules > 1:
        notes.append(f"tensorrt_llm: with {modules} modules TensorRT-LLM runs them in sequence (vanilla MTP)")
    return EngineConfig(config=cfg, notes=tuple(notes))


def llama_cpp(req: DeployRequest) -> EngineConfig:
    """draft-mtp loads the nextn layers from the target GGUF itself (common.cpp: load_mtp)."""
    return EngineConfig(args=("--spec-type", req.algorithm, "--spec-draft-n-max", str(req.depth)),
                        notes=("llama_cpp: draft-mtp needs a GGUF converted with its MTP layers",))

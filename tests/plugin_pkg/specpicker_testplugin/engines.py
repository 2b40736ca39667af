"""The test plugin's own engine configs: what ``repeat-last`` asks each engine to run.

vLLM 0.22.0 and later load a proposer class by its import path (``{"method": "custom_class",
"model": "pkg.Class"}``, ``vllm/config/speculative.py`` and ``v1/spec_decode/custom_class_proposer.py``);
this package ships one (``specpicker_testplugin.vllm_proposer``). SGLang 0.5.23 has no way to name
an outside drafter on its command line, so the nearest it runs is its NGRAM trie, which proposes a
repeated token once it has seen it repeat -- an approximation, said so.

    >>> from picker.engine.deploy import DeployRequest
    >>> vllm(DeployRequest(engine="vllm", version="0.32.0", algorithm="custom_class", depth=3)).config["model"]
    'specpicker_testplugin.vllm_proposer.RepeatLastProposer'
"""

from __future__ import annotations

from picker.engine.deploy import DeployRequest, EngineConfig, Unsupported, sglang_ngram_args

PROPOSER = "specpicker_testplugin.vllm_proposer.RepeatLastProposer"
VLLM_CUSTOM_CLASS_SINCE = "0.22.0"  # absent from vllm/config/speculative.py in 0.21.0, present in 0.22.0


def vllm(req: DeployRequest) -> EngineConfig:
    if not req.at_least(VLLM_CUSTOM_CLASS_SINCE):
        raise Unsupported(f"vLLM {req.version} loads no outside proposer (method custom_class arrived in "
                          f"{VLLM_CUSTOM_CLASS_SINCE})")
    return EngineConfig(config={"method": req.algorithm, "model": PROPOSER, "num_speculative_tokens": req.depth},
                        versions=f">={VLLM_CUSTOM_CLASS_SINCE}",
                        notes=("vllm: install specpicker-testplugin beside vLLM so it can import the proposer",))


def sglang(req: DeployRequest) -> EngineConfig:
    return EngineConfig(args=sglang_ngram_args(req), approximation=(
        "SGLang cannot load an outside drafter from its command line; its NGRAM trie proposes a repeated "
        "token only after seeing the repeat"))

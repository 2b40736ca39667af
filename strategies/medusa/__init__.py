"""The `medusa` strategy: declared capabilities; drafter, trainer and depth hook named, imported on use.

Named, not imported, so that `specpick recommend` (which only reads ``PLUGIN.capabilities``) never
imports torch; the registry resolves each hook when it is called.

    >>> PLUGIN.capabilities.trainable_heads, PLUGIN.capabilities.artifact
    (True, 'medusa_heads')
    >>> PLUGIN.draft_options.chain(2)
    ({'choices': [[0], [0, 0]]}, 2)
"""

from __future__ import annotations

from picker.engine.plugins import Capabilities, DraftOptions, StrategyPlugin

PLUGIN = StrategyPlugin(
    name="medusa",
    summary="Extra decoding heads on the target last hidden state propose a static token tree (Medusa, Cai 2024).",
    # artifact_heads: heads a trained set holds when the profile does not say (Medusa-1 ships 4-5, Cai et al. 2024).
    capabilities=Capabilities(needs_hidden_states=True, trainable_heads=True, tree=True, artifact="medusa_heads",
                              artifact_heads=4, draft_cost="heads",
                              engines={"sglang": None, "vllm": "medusa", "tensorrt_llm": "Medusa", "llama_cpp": None}),
    # artifact: the heads folder; choices (rank paths) overrides the tree stored with the heads.
    make_drafter="strategies.medusa.drafter:make_drafter",
    # No length option: a chain is each head's top guess, a tree its rank paths.
    draft_options=DraftOptions(length=None, choices="choices"),
    train_heads="strategies.medusa.train:train_heads",
    # One head per depth: no draft deeper than the heads folder's head count.
    artifact_depth="strategies.medusa.artifact:max_depth",
    engine_configs={"tensorrt_llm": "strategies.medusa.engines:tensorrt_llm"},
)

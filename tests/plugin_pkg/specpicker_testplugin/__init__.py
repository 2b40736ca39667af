"""A third-party test strategy, `repeat-last`: guess that the last token repeats, k times.

Registered through the ``specpicker.strategies`` entry point of its own distribution
(``specpicker-testplugin``), exactly as an outside plugin would be. Its drafter factory is named
as ``"module:attr"`` and imported by the host's registry only when a drafter is built.

    >>> PLUGIN.name, PLUGIN.capabilities.deterministic_draft
    ('repeat-last', True)
    >>> PLUGIN.draft_options.chain(2)
    ({'num_draft_tokens': 2}, 2)
"""

from __future__ import annotations

from picker.engine.plugins import Capabilities, DraftOptions, StrategyPlugin

PLUGIN = StrategyPlugin(
    name="repeat-last",
    summary="Test plugin: proposes the last token again, k times (deterministic).",
    # vLLM loads the plugin's own proposer class; SGLang runs its nearest algorithm (engines.py).
    capabilities=Capabilities(deterministic_draft=True, draft_cost="cpu_lookup",
                              engines={"vllm": "custom_class", "sglang": "NGRAM"}),
    make_drafter="specpicker_testplugin.drafter:make_drafter",
    draft_options=DraftOptions(length="num_draft_tokens"),  # the default, declared for readers
    engine_configs={"vllm": "specpicker_testplugin.engines:vllm", "sglang": "specpicker_testplugin.engines:sglang"},
)

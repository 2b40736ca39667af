"""A third-party test strategy, `repeat-last`: guess that the last token repeats, k times.

Registered through the ``specpicker.strategies`` entry point of its own distribution
(``specpicker-testplugin``), exactly as an outside plugin would be.

    >>> PLUGIN.name, PLUGIN.capabilities.deterministic_draft
    ('repeat-last', True)
"""

from __future__ import annotations

from typing import Any

from picker.engine.plugins import Capabilities, StrategyPlugin


def make_drafter(*, target_backend: Any = None, artifact: Any = None, num_draft_tokens: int = 3) -> Any:
    from specpicker_testplugin.drafter import RepeatLastDrafter

    return RepeatLastDrafter(num_draft_tokens)


PLUGIN = StrategyPlugin(
    name="repeat-last",
    summary="Test plugin: proposes the last token again, k times (deterministic).",
    # One engine mapping, as if vLLM served it under this name: lets tests recommend it end to end.
    capabilities=Capabilities(deterministic_draft=True, draft_cost="cpu_lookup", engines={"vllm": "repeat_last"}),
    make_drafter=make_drafter,
)

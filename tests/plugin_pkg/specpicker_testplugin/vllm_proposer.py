"""``repeat-last`` as a vLLM proposer (``{"method": "custom_class"}``, vLLM 0.22.0 and later).

vLLM builds it with its ``VllmConfig`` and calls ``propose(sampled_token_ids, num_tokens_no_spec,
token_ids_cpu, slot_mappings=...)`` once per step, one list of draft ids per running request
(``v1/worker/gpu_model_runner.py``, ``propose_draft_token_ids``, vLLM 0.32.0). No vLLM import here:
the class only reads the config it is given.

    >>> from types import SimpleNamespace
    >>> cfg = SimpleNamespace(speculative_config=SimpleNamespace(num_speculative_tokens=3))
    >>> RepeatLastProposer(cfg).propose([[7, 9], []], None, None)
    [[9, 9, 9], []]
"""

from __future__ import annotations

from typing import Any


class RepeatLastProposer:
    """Each request's last sampled token, ``num_speculative_tokens`` times (nothing when none was sampled)."""

    def __init__(self, vllm_config: Any) -> None:
        self.k = int(vllm_config.speculative_config.num_speculative_tokens)

    def propose(self, sampled_token_ids: list[list[int]], num_tokens_no_spec: Any, token_ids_cpu: Any,
                slot_mappings: Any = None) -> list[list[int]]:
        return [[ids[-1]] * self.k if ids else [] for ids in sampled_token_ids]

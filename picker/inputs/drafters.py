"""The profile's ``drafters`` section: what speculation can draw on, and which strategies are off.

    drafters:
      draft_model: {name: meta-llama/Llama-3.2-1B-Instruct, params_b: 1.2}
      mtp: {modules: 1, builtin: true}   # MTP modules shipped in the target checkpoint
      training_budget_gpu_hours: 0
      disabled: [lookahead]        # registered strategy names (`specpick strategies`)

The old per-strategy switches (``allow_ngram: false``, any ``allow_<strategy>``) are still read, as
deprecated spellings of ``disabled``; ``specpick recommend`` reports them in a warning and decides
exactly as before. Names are checked against the strategy registry where it is loaded (recommend).

    >>> DraftersSpec.model_validate({"allow_lookahead": False}).disabled_by("lookahead")
    'drafters.allow_lookahead: false'
    >>> DraftersSpec.model_validate({"disabled": ["ngram"]}).disabled_by("ngram")
    'drafters.disabled'
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator
from pydantic.json_schema import SkipJsonSchema

from picker.inputs.fields import Heads, Name, NonNegFloat, Params, Section
from picker.inputs.yamlio import fail_at

LEGACY_PREFIX = "allow_"


class DraftModelSpec(Section):
    """A smaller causal LM sharing the target's tokenizer (vanilla speculative decoding)."""

    name: Name = Field(description="Draft model name, e.g. meta-llama/Llama-3.2-1B-Instruct.")
    params_b: Params = Field(description="Draft parameter count in billions (its memory and cost).")
    path: Name | None = Field(None, description="Local path or hub id as the engine will load it.")


class HeadSpec(Section):
    """Trained speculation heads for the target, by name or path (at least one)."""

    name: Name | None = Field(None, description=(
        "Hub id of the heads, e.g. yuhuili/EAGLE3-LLaMA3.1-Instruct-8B."))
    path: Name | None = Field(None, description="Local path as the engine will load it.")

    @model_validator(mode="after")
    def _named(self) -> HeadSpec:
        if self.name is None and self.path is None:
            raise ValueError("give name or path")
        return self


class MedusaHeadsSpec(HeadSpec):
    """Trained Medusa heads."""

    num_heads: Heads = Field(description="Number of Medusa heads (tokens proposed beyond the next one).")


class MtpSpec(Section):
    """Multi-token prediction modules: in the target checkpoint (DeepSeek-V3, Qwen3-Next, GLM-4.5,
    MiMo) or trained separately (then named by ``name`` or ``path``)."""

    modules: Heads = Field(description=(
        "Number of MTP modules (DeepSeek-V3 ships 1); each drafts one token further, a longer chain "
        "reuses the last one."))
    builtin: bool = Field(False, description=(
        "The modules are part of the target checkpoint: engines load them from the model's own path."))
    name: Name | None = Field(None, description="Hub id of separately trained modules.")
    path: Name | None = Field(None, description="Local path of separately trained modules, as the engine loads it.")

    @model_validator(mode="after")
    def _located(self) -> MtpSpec:
        if not self.builtin and self.name is None and self.path is None:
            raise ValueError("say builtin: true (the modules are in the checkpoint) or give name or path")
        if self.builtin and (self.name is not None or self.path is not None):
            raise ValueError("builtin modules live in the target checkpoint: drop name and path")
        return self


class DraftersSpec(Section):
    """What speculation can draw on. Omitted entries are not available."""

    draft_model: DraftModelSpec | None = Field(None, description="A separate draft model, if one exists.")
    eagle3_head: HeadSpec | None = Field(None, description="A trained EAGLE-3 head for the target.")
    medusa_heads: MedusaHeadsSpec | None = Field(None, description="Trained Medusa heads for the target.")
    mtp: MtpSpec | None = Field(None, description=(
        "The target's multi-token prediction modules: built into the checkpoint, or trained separately."))
    training_budget_gpu_hours: NonNegFloat = Field(0.0, description=(
        "GPU-hours you would spend training heads; > 0 makes EAGLE-3 and Medusa feasible without "
        "existing heads (the recommendation then says they must be trained first)."))
    disabled: tuple[Name, ...] = Field((), description=(
        "Strategies never to recommend, by registered name (`specpick strategies`), e.g. [lookahead]."))
    # Filled from the deprecated `allow_<strategy>: true|false` keys (see _read_allow); not written by hand.
    legacy_allow: SkipJsonSchema[dict[str, bool]] = Field(default_factory=dict, exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _read_allow(cls, data: Any) -> Any:
        """Read the deprecated ``allow_<strategy>`` switches (shipped profiles and users' still use them)."""
        if not isinstance(data, dict):
            return data
        if "legacy_allow" in data:
            fail_at(("legacy_allow",), "unknown field; write drafters.disabled: [STRATEGY, ...]", data["legacy_allow"])
        allow = {k: v for k, v in data.items() if isinstance(k, str) and k.startswith(LEGACY_PREFIX)}
        for key, value in allow.items():
            if not isinstance(value, bool):
                fail_at((key,), f"must be true or false (got {value!r})", value)
        rest = {k: v for k, v in data.items() if k not in allow}
        return {**rest, "legacy_allow": {k.removeprefix(LEGACY_PREFIX): v for k, v in allow.items()}}

    def disabled_by(self, strategy: str) -> str | None:
        """The profile field that disables ``strategy``, or None when it is allowed."""
        if strategy in self.disabled:
            return "drafters.disabled"
        key = strategy.replace("-", "_")  # allow_<name> keys are identifiers
        if self.legacy_allow.get(key) is False:
            return f"drafters.{LEGACY_PREFIX}{key}: false"
        return None

    def named_strategies(self) -> dict[str, str]:
        """Every strategy the profile names -> the field naming it (to check against the registry)."""
        out = dict.fromkeys(self.disabled, "drafters.disabled")
        out.update({key: f"drafters.{LEGACY_PREFIX}{key}" for key in self.legacy_allow})
        return out

    def deprecated_fields(self) -> list[str]:
        """The deprecated keys this profile uses, dotted."""
        return [f"drafters.{LEGACY_PREFIX}{key}" for key in self.legacy_allow]

    @property
    def allow_ngram(self) -> bool:  # deprecated reader, kept for code written against the old fields
        return self.disabled_by("ngram") is None

    @property
    def allow_lookahead(self) -> bool:  # deprecated reader, kept for code written against the old fields
        return self.disabled_by("lookahead") is None

    @property
    def can_train_heads(self) -> bool:
        return self.training_budget_gpu_hours > 0

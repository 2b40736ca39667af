"""Model catalog: the shapes of widely served open models, so a profile can just name one.

Each entry is the model's Hugging Face hub id, its published parameter count (the model card's
figure) and the shape keys of its ``config.json`` on the Hugging Face Hub, spelled as there, so a
catalog entry and a user's own ``config.json`` go through the same reader
(``picker.inputs.model.shape_from_hf_config``). ``tests/test_model_catalog.py`` checks that each
shape's estimated parameter count lands within 1 % of the published one.

    >>> entry = find_model("llama-3.1-8b-instruct")
    >>> entry.hub_id, entry.config["num_key_value_heads"]
    ('meta-llama/Llama-3.1-8B-Instruct', 8)
    >>> find_model("meta-llama/Llama-3.1-8B-Instruct") is entry    # the hub id works too
    True

Names are matched case-insensitively, with or without the organisation prefix.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class CatalogModel:
    """One catalog model: hub id, published size and the shape keys of its config.json."""

    hub_id: str
    params_b: float              # the model card's parameter count, billions
    config: dict[str, Any] = field(hash=False)  # config.json shape keys, as published

    @property
    def key(self) -> str:
        """The catalog name: the hub id without its organisation, lower case."""
        return self.hub_id.rsplit("/", 1)[-1].lower()


def _llama(hub: str, params_b: float, layers: int, hidden: int, heads: int, kv: int, inter: int,
           vocab: int, *, head_dim: int | None = None, tied: bool = False) -> CatalogModel:
    config: dict[str, Any] = {
        "num_hidden_layers": layers, "hidden_size": hidden, "num_attention_heads": heads,
        "num_key_value_heads": kv, "intermediate_size": inter, "vocab_size": vocab,
        "tie_word_embeddings": tied, "torch_dtype": "bfloat16"}
    if head_dim is not None:
        config["head_dim"] = head_dim
    return CatalogModel(hub, params_b, config)


def _moe(model: CatalogModel, experts: int, per_token: int, expert_inter: int | None = None) -> CatalogModel:
    """A mixture-of-experts entry: Mixtral spells the count num_local_experts and sizes each expert
    with intermediate_size; Qwen3-MoE spells it num_experts and sizes experts with moe_intermediate_size."""
    extra: dict[str, Any] = {"num_experts_per_tok": per_token}
    if expert_inter is None:
        extra["num_local_experts"] = experts
    else:
        extra.update({"num_experts": experts, "moe_intermediate_size": expert_inter})
    return CatalogModel(model.hub_id, model.params_b, {**model.config, **extra})


# Shapes: config.json of each hub id on the Hugging Face Hub (Instruct variants share their base
# model's shape). Parameter counts: each model card. Qwen2.5 and Qwen3 attention biases / q-k norms
# are not in the shape (< 0.1 % of the weights).
_ENTRIES: tuple[CatalogModel, ...] = (
    _llama("meta-llama/Llama-3.2-1B-Instruct", 1.24, 16, 2048, 32, 8, 8192, 128256, head_dim=64, tied=True),
    _llama("meta-llama/Llama-3.2-3B-Instruct", 3.21, 28, 3072, 24, 8, 8192, 128256, head_dim=128, tied=True),
    _llama("meta-llama/Llama-3.1-8B-Instruct", 8.03, 32, 4096, 32, 8, 14336, 128256),
    _llama("meta-llama/Llama-3.1-70B-Instruct", 70.6, 80, 8192, 64, 8, 28672, 128256),
    _llama("meta-llama/Llama-3.3-70B-Instruct", 70.6, 80, 8192, 64, 8, 28672, 128256),
    _llama("meta-llama/Llama-3.1-405B-Instruct", 405.9, 126, 16384, 128, 8, 53248, 128256),
    _llama("Qwen/Qwen2.5-0.5B-Instruct", 0.49, 24, 896, 14, 2, 4864, 151936, tied=True),
    _llama("Qwen/Qwen2.5-1.5B-Instruct", 1.54, 28, 1536, 12, 2, 8960, 151936, tied=True),
    _llama("Qwen/Qwen2.5-7B-Instruct", 7.61, 28, 3584, 28, 4, 18944, 152064),
    _llama("Qwen/Qwen2.5-14B-Instruct", 14.7, 48, 5120, 40, 8, 13824, 152064),
    _llama("Qwen/Qwen2.5-32B-Instruct", 32.5, 64, 5120, 40, 8, 27648, 152064),
    _llama("Qwen/Qwen2.5-72B-Instruct", 72.7, 80, 8192, 64, 8, 29568, 152064),
    _llama("Qwen/Qwen2.5-Coder-0.5B-Instruct", 0.49, 24, 896, 14, 2, 4864, 151936, tied=True),
    _llama("Qwen/Qwen2.5-Coder-1.5B-Instruct", 1.54, 28, 1536, 12, 2, 8960, 151936, tied=True),
    _llama("Qwen/Qwen2.5-Coder-7B-Instruct", 7.61, 28, 3584, 28, 4, 18944, 152064),
    _llama("Qwen/Qwen2.5-Coder-32B-Instruct", 32.5, 64, 5120, 40, 8, 27648, 152064),
    _llama("Qwen/Qwen3-0.6B", 0.6, 28, 1024, 16, 8, 3072, 151936, head_dim=128, tied=True),
    _llama("Qwen/Qwen3-8B", 8.2, 36, 4096, 32, 8, 12288, 151936, head_dim=128),
    _llama("Qwen/Qwen3-32B", 32.8, 64, 5120, 64, 8, 25600, 151936, head_dim=128),
    _moe(_llama("Qwen/Qwen3-30B-A3B", 30.5, 48, 2048, 32, 4, 6144, 151936, head_dim=128), 128, 8, 768),
    _llama("mistralai/Mistral-7B-Instruct-v0.3", 7.25, 32, 4096, 32, 8, 14336, 32768),
    _moe(_llama("mistralai/Mixtral-8x7B-Instruct-v0.1", 46.7, 32, 4096, 32, 8, 14336, 32000), 8, 2),
)

CATALOG: dict[str, CatalogModel] = {m.key: m for m in _ENTRIES}


def find_model(name: str) -> CatalogModel | None:
    """The catalog entry for a catalog name or hub id (any case), or None."""
    return CATALOG.get(name.strip().rsplit("/", 1)[-1].lower())


def catalog_names() -> list[str]:
    """Every catalog name, in catalog order (small to large within each family)."""
    return list(CATALOG)

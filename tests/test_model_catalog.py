"""The model catalog: every entry's shape reproduces its published size, and loads as a profile's model."""

from __future__ import annotations

import pytest

from picker.inputs.model import ModelSpec, estimate_params
from picker.inputs.model_catalog import CATALOG, catalog_names, find_model


@pytest.mark.parametrize("key", catalog_names())
def test_shape_gives_the_published_parameter_count(key: str) -> None:
    entry = CATALOG[key]
    spec = ModelSpec.model_validate({"name": key})
    assert spec.name == entry.hub_id and spec.params_b == entry.params_b
    inner = spec.intermediate_size or spec.expert_intermediate_size
    assert inner is not None and spec.num_layers and spec.hidden_size and spec.num_attention_heads and spec.vocab_size
    estimated = estimate_params(spec.num_layers, spec.hidden_size, spec.num_attention_heads, spec.resolved_num_kv_heads,
                                spec.resolved_head_dim, spec.vocab_size, inner, tied=bool(spec.tie_word_embeddings),
                                num_experts=spec.num_experts, expert_intermediate_size=spec.expert_intermediate_size)
    assert estimated / 1e9 == pytest.approx(entry.params_b, rel=0.01), (key, estimated / 1e9)


def test_names_resolve_with_or_without_the_organisation() -> None:
    entry = find_model("Qwen/Qwen2.5-7B-Instruct")
    assert entry is not None and entry is find_model("qwen2.5-7b-instruct") is find_model(" QWEN2.5-7B-Instruct ")
    assert find_model("no-such-model") is None


def test_moe_entries_carry_their_experts() -> None:
    mixtral = ModelSpec.model_validate({"name": "mixtral-8x7b-instruct-v0.1"})
    qwen_moe = ModelSpec.model_validate({"name": "qwen3-30b-a3b"})
    assert (mixtral.num_experts, mixtral.num_experts_per_tok, mixtral.expert_intermediate_size) == (8, 2, None)
    assert (qwen_moe.num_experts, qwen_moe.num_experts_per_tok, qwen_moe.expert_intermediate_size) == (128, 8, 768)

"""Workload profiles: the shipped ones load, the schema is sound, and every bad input fails clearly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from picker.errors import UserError
from picker.inputs.workload import TASK_TYPES, WorkloadProfile, estimate_params, load_profile, workload_json_schema
from tests.bad_inputs import BASE_PROFILE, CASES, HF_MODEL, LLAMA_CONFIG, BadInput, materialize, valid_profile_text

PROFILES_DIR = Path(__file__).resolve().parent.parent / "profiles"
SHIPPED = sorted(PROFILES_DIR.glob("*.yaml"))


# --------------------------------------------------------------------------- shipped profiles

def test_at_least_six_profiles_ship() -> None:
    names = {p.name for p in SHIPPED}
    assert {"chat-70b-h100.yaml", "code-assistant-8b-a100.yaml", "rag-summarization.yaml",
            "json-extraction.yaml", "creative-writing.yaml", "offline-batch.yaml"} <= names


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_profile_loads(path: Path) -> None:
    profile = load_profile(path)
    assert profile.name == path.stem  # the file name and the profile's name agree
    shape = profile.model_shape()
    assert shape.params > 1e8 and shape.num_layers > 0 and shape.head_dim > 0
    assert shape.num_attention_heads % shape.num_kv_heads == 0
    assert abs(sum(profile.traffic.task_weights().values()) - 1) < 1e-6
    assert "#" in path.read_text()  # documented with comments


def test_shipped_profiles_vary_engines_and_drafters() -> None:
    profiles = [load_profile(p) for p in SHIPPED]
    assert {p.engine.name for p in profiles} == {"sglang", "vllm", "tensorrt_llm", "llama_cpp"}
    assert any(p.drafters.eagle3_head for p in profiles)
    assert any(p.drafters.medusa_heads for p in profiles)
    assert any(p.drafters.draft_model for p in profiles)
    assert any(p.drafters.can_train_heads for p in profiles)


def test_real_model_shapes_match_their_published_sizes() -> None:
    # Parameter counts estimated from the shapes land on the published sizes.
    for path in SHIPPED:
        profile = load_profile(path)
        s, m = profile.model_shape(), profile.model
        if s.intermediate_size is None or m.params_b is None:
            continue
        est = estimate_params(s.num_layers, s.hidden_size, s.num_attention_heads, s.num_kv_heads,
                              s.head_dim, s.vocab_size, s.intermediate_size,
                              tied=bool(m.tie_word_embeddings))
        assert est / 1e9 == pytest.approx(m.params_b, rel=0.01), path.name


def test_profile_is_frozen() -> None:
    profile = load_profile(PROFILES_DIR / "chat-70b-h100.yaml")
    with pytest.raises(ValidationError):
        profile.hardware.count = 8


# --------------------------------------------------------------------------- schema

def _walk(node: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    if isinstance(node, dict):
        found.append(node)
        for value in node.values():
            found.extend(_walk(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(_walk(value))
    return found


def test_schema_is_json_and_forbids_extras() -> None:
    schema = workload_json_schema()
    json.dumps(schema)
    objects = [s for s in _walk(schema) if s.get("type") == "object" and "properties" in s]
    assert len(objects) >= 10
    assert all(s.get("additionalProperties") is False for s in objects)
    refs = {s["$ref"] for s in _walk(schema) if "$ref" in s}
    assert refs and all(r.removeprefix("#/$defs/") in schema["$defs"] for r in refs)
    # Every field has a description: `specpick schema` is the field reference.
    for obj in objects:
        for name, prop in obj["properties"].items():
            assert prop.get("description"), name
    assert schema["$defs"]["ConcurrencyBucket"]["properties"].keys() >= {"min", "max", "batch_size"}


def test_schema_meta_validates_and_accepts_shipped_profiles() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = workload_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    import yaml
    for path in SHIPPED:
        jsonschema.validate(yaml.safe_load(path.read_text()), schema)


# --------------------------------------------------------------------------- semantics

def _load_text(tmp_path: Path, text: str) -> WorkloadProfile:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    return load_profile(path)


def test_defaults_and_aliases(tmp_path: Path) -> None:
    data = valid_profile_text(hardware={"gpu": "H100_SXM", "count": 2}, slo={}, drafters={})
    profile = _load_text(tmp_path, data)
    assert profile.hardware.gpu == "h100-sxm" and profile.hardware.spec.memory_gib == 80.0
    assert profile.drafters.allow_ngram and profile.drafters.allow_lookahead
    assert not profile.drafters.can_train_heads
    assert profile.slo.ttft_ms is None
    weights = profile.traffic.task_weights()
    assert tuple(weights) == TASK_TYPES and weights["math"] == 0.0
    bucket = profile.traffic.concurrency[0]
    assert (bucket.low, bucket.high) == (1, 8)
    assert profile.traffic.prompt_tokens.expected() == 1000


def test_head_dim_and_kv_heads_default(tmp_path: Path) -> None:
    model = {k: v for k, v in BASE_PROFILE["model"].items() if k not in ("head_dim", "num_kv_heads")}
    shape = _load_text(tmp_path, valid_profile_text(model=model)).model_shape()
    assert shape.head_dim == 128 and shape.num_kv_heads == 32
    assert shape.bytes_per_param == 2.0 and not shape.params_estimated
    assert set(shape.roofline_kwargs()) == {"params", "num_layers", "hidden_size", "num_kv_heads",
                                           "head_dim", "vocab_size", "bytes_per_param"}


def test_token_points_expected(tmp_path: Path) -> None:
    points = {"points": [{"value": 100, "weight": 0.25}, {"value": 300, "weight": 0.75}]}
    profile = _load_text(tmp_path, valid_profile_text(traffic__output_tokens=points))
    assert profile.traffic.output_tokens.expected() == pytest.approx(250)


def test_hf_config_fills_the_shape(tmp_path: Path) -> None:
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.json").write_text(LLAMA_CONFIG)
    model = {"name": "local/llama", "hf_config": "cfg/config.json"}
    shape = _load_text(tmp_path, valid_profile_text(model=model)).model_shape()
    assert (shape.num_layers, shape.hidden_size, shape.num_kv_heads, shape.head_dim) == (32, 4096, 8, 128)
    assert shape.params_estimated and shape.params / 1e9 == pytest.approx(8.03, rel=0.005)


def test_hf_config_profile_values_win_and_text_config_is_read(tmp_path: Path) -> None:
    wrapped = json.dumps({"architectures": ["X"], "torch_dtype": "float16",
                          "text_config": json.loads(LLAMA_CONFIG)})
    (tmp_path / "config.json").write_text(wrapped)
    profile = _load_text(tmp_path, valid_profile_text(model={**HF_MODEL, "num_layers": 16}))
    assert profile.model.num_layers == 16 and profile.model.vocab_size == 128256
    assert profile.model.dtype == "fp16"
    assert profile.model_shape().params == 8.0e9  # params_b given: not estimated


def test_yaml_anchors_within_budget_are_fine(tmp_path: Path) -> None:
    text = valid_profile_text().replace("prompt_tokens:\n", "prompt_tokens: &len\n")
    text = text.replace("output_tokens:\n    mean: 200\n    p90: 500\n", "output_tokens: *len\n")
    assert _load_text(tmp_path, text).traffic.output_tokens.mean == 1000


# --------------------------------------------------------------------------- bad inputs

def test_enough_bad_cases() -> None:
    assert len(CASES) >= 35
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_bad_input(case: BadInput, tmp_path: Path) -> None:
    path = materialize(case, tmp_path)  # skips cases this user cannot make
    with pytest.raises(UserError) as info:
        load_profile(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(str(path) + ": ")
    for expected in case.expect:
        assert expected in message, f"{expected!r} not in {message!r}"

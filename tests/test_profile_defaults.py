"""Write the least, infer the rest: a profile of model, hardware, engine and task mix loads, every
default it leaves is listed, scalars stand for one value, and several problems are reported at once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from picker.errors import UserError, UserErrors
from picker.inputs.workload import PINNED_ENGINE_VERSIONS, WorkloadProfile, load_profile, workload_json_schema
from picker.recommend.engine_configs import ENGINE_VERSIONS
from tests.bad_inputs import LLAMA_CONFIG

# The issue's example: Llama-3.1-8B-Instruct on one H100 with vLLM, 70% chat / 30% code,
# concurrency 32, a 50 ms p99 ITL SLO and temperature 0.7.
ISSUE_EXAMPLE = """\
model: llama-3.1-8b-instruct
hardware: H100
engine: vllm
traffic:
  task_mix: {chat: 0.7, code: 0.3}
  concurrency: 32
  temperature: 0.7
slo:
  itl_p99_ms: 50
"""


def _load(tmp_path: Path, text: str, name: str = "p.yaml") -> WorkloadProfile:
    path = tmp_path / name
    path.write_text(text)
    return load_profile(path)


def test_the_issue_example_loads_in_one_try_and_lists_its_defaults(tmp_path: Path) -> None:
    assert len(ISSUE_EXAMPLE.splitlines()) <= 12
    p = _load(tmp_path, ISSUE_EXAMPLE, "llama8b-chat.yaml")
    assert p.name == "llama8b-chat" and p.model.name == "meta-llama/Llama-3.1-8B-Instruct"
    shape = p.model_shape()
    assert (shape.num_layers, shape.hidden_size, shape.num_kv_heads, shape.vocab_size) == (32, 4096, 8, 128256)
    assert (p.hardware.gpu, p.hardware.count, p.engine.name, p.engine.version) == ("h100-sxm", 1, "vllm", "0.32.0")
    assert [(b.batch_size, b.weight) for b in p.traffic.concurrency] == [(32, 1.0)]
    assert [(t.value, t.weight) for t in p.traffic.temperature] == [(0.7, 1.0)]
    assert p.slo.itl_p99_ms == 50
    fields = [d.field for d in p.defaults_applied]
    assert fields == ["name", "model", "hardware.gpu", "hardware.count", "engine.version", "traffic.prompt_tokens",
                      "traffic.output_tokens", "drafters", "memory_headroom_gib"]
    lines = {d.field: d.line() for d in p.defaults_applied}
    assert "h100-pcie" in lines["hardware.gpu"]  # which variant was assumed, and how to pick the other
    assert lines["engine.version"].startswith("engine.version = 0.32.0 (")
    assert lines["memory_headroom_gib"].startswith("memory_headroom_gib = 8 (")


def test_shipped_profiles_need_no_defaults() -> None:
    for path in sorted((Path(__file__).resolve().parents[1] / "profiles").glob("*.yaml")):
        assert load_profile(path).defaults_applied == (), path.name


def test_pinned_versions_are_the_engine_configs_versions() -> None:
    assert PINNED_ENGINE_VERSIONS == ENGINE_VERSIONS


def test_scalars_mean_the_one_value_they_name(tmp_path: Path) -> None:
    short = _load(tmp_path, ISSUE_EXAMPLE.replace("  temperature: 0.7\n", "  temperature: 1\n  prompt_tokens: 1500\n"
                                                  "  output_tokens: 300\n"))
    long = _load(tmp_path, ISSUE_EXAMPLE.replace("  concurrency: 32\n  temperature: 0.7\n", (
        "  concurrency: [{batch_size: 32, weight: 1}]\n  temperature: [{value: 1.0, weight: 1}]\n"
        "  prompt_tokens: {mean: 1500}\n  output_tokens: {mean: 300}\n")), "q.yaml")
    assert short.traffic == long.traffic
    one_task = _load(tmp_path, ISSUE_EXAMPLE.replace("{chat: 0.7, code: 0.3}", "code"))
    assert one_task.traffic.task_mix == {"code": 1.0}


def test_traffic_defaults_are_stated_values(tmp_path: Path) -> None:
    p = _load(tmp_path, "model: qwen2.5-7b-instruct\nhardware: a100-80gb\nengine: sglang\ntraffic: {task_mix: rag}\n")
    t = p.traffic
    assert (t.prompt_tokens.mean, t.output_tokens.mean) == (1024, 256)
    assert [(b.batch_size, b.weight) for b in t.concurrency] == [(1, 1.0)]
    assert [(x.value, x.weight) for x in t.temperature] == [(1.0, 1.0)]
    fields = {d.field for d in p.defaults_applied}
    assert {"traffic.concurrency", "traffic.temperature", "slo", "hardware.count", "model"} <= fields
    assert "hardware.gpu" not in fields  # a100-80gb names one part: nothing assumed


@pytest.mark.parametrize("written, gpu, count, note", [
    ("H100", "h100-sxm", 1, "h100-pcie"), ("4x H100", "h100-sxm", 4, "h100-pcie"),
    ("2 x a100", "a100-80gb", 2, "a100-40gb"),
    ("h100-pcie", "h100-pcie", 1, None), ("{gpu: h200, count: 8}", "h200", 8, None),
])
def test_hardware_names(tmp_path: Path, written: str, gpu: str, count: int, note: str | None) -> None:
    p = _load(tmp_path, ISSUE_EXAMPLE.replace("hardware: H100", f"hardware: {written}"))
    assert (p.hardware.gpu, p.hardware.count) == (gpu, count)
    notes = [d.why for d in p.defaults_applied if d.field == "hardware.gpu"]
    assert (notes[0] if notes else None) is None if note is None else note in notes[0]


@pytest.mark.parametrize("written, name", [("llama.cpp", "llama_cpp"), ("vLLM", "vllm"), ("trt-llm", "tensorrt_llm")])
def test_engine_spellings(tmp_path: Path, written: str, name: str) -> None:
    p = _load(tmp_path, ISSUE_EXAMPLE.replace("engine: vllm", f"engine: {written}"))
    assert p.engine.name == name and p.engine.version == ENGINE_VERSIONS[name]


@pytest.mark.parametrize("form", ["folder", "config", "hf_config-folder", "hf_config-file"])
def test_model_from_a_hugging_face_folder(tmp_path: Path, form: str) -> None:
    (tmp_path / "My-Llama").mkdir()
    (tmp_path / "My-Llama" / "config.json").write_text(LLAMA_CONFIG)
    model = {"folder": "./My-Llama", "config": "My-Llama/config.json",
             "hf_config-folder": "{name: org/my-llama, hf_config: My-Llama}",
             "hf_config-file": "{name: org/my-llama, hf_config: My-Llama/config.json}"}[form]
    p = _load(tmp_path, ISSUE_EXAMPLE.replace("model: llama-3.1-8b-instruct", f"model: {model}"))
    s = p.model_shape()
    got = (s.num_layers, s.hidden_size, s.num_attention_heads, s.num_kv_heads, s.vocab_size)
    assert got == (32, 4096, 32, 8, 128256)
    assert s.params_estimated and s.params / 1e9 == pytest.approx(8.03, rel=0.005)
    assert "config.json" in next(d.why for d in p.defaults_applied if d.field == "model")


def test_moe_experts_are_read_and_counted(tmp_path: Path) -> None:
    mixtral = json.loads(LLAMA_CONFIG) | {"vocab_size": 32000, "num_local_experts": 8, "num_experts_per_tok": 2}
    (tmp_path / "config.json").write_text(json.dumps(mixtral))
    p = _load(tmp_path, ISSUE_EXAMPLE.replace("model: llama-3.1-8b-instruct", "model: config.json"))
    s = p.model_shape()
    assert (s.num_experts, s.num_experts_per_tok) == (8, 2)
    assert s.params / 1e9 == pytest.approx(46.7, rel=0.01)  # Mixtral-8x7B's published size


def test_an_unknown_model_with_a_size_takes_the_nearest_catalog_shape(tmp_path: Path) -> None:
    p = _load(tmp_path, ISSUE_EXAMPLE.replace("model: llama-3.1-8b-instruct", "model: {name: org/ft-8b, params_b: 8}"))
    assert p.model.name == "org/ft-8b" and p.model.params_b == 8 and p.model.num_layers == 32
    assert "nearest" in next(d.why for d in p.defaults_applied if d.field == "model")


def test_profile_values_win_over_the_catalog(tmp_path: Path) -> None:
    p = _load(tmp_path, ISSUE_EXAMPLE.replace("model: llama-3.1-8b-instruct",
                                              "model: {name: llama-3.1-70b-instruct, dtype: fp8, num_layers: 40}"))
    assert (p.model.num_layers, p.model.hidden_size, p.model.dtype) == (40, 8192, "fp8")


def test_headroom_default_is_what_the_weights_leave(tmp_path: Path) -> None:
    big = _load(tmp_path, ISSUE_EXAMPLE.replace("llama-3.1-8b-instruct", "llama-3.1-70b-instruct")
                .replace("H100", "rtx-4090"))
    assert big.memory_headroom_gib == 0.0  # 131 GiB of bf16 weights on a 24 GiB card leave nothing
    small = _load(tmp_path, ISSUE_EXAMPLE.replace("H100", "rtx-4090"))
    assert small.memory_headroom_gib == 2.4  # 10% of 24 GiB, under the 9 GiB the 15 GiB of weights leave


def test_validating_without_a_file_fills_the_same_values() -> None:
    data = yaml.safe_load(ISSUE_EXAMPLE)
    plain = WorkloadProfile.model_validate(data)
    recorded = WorkloadProfile.model_validate(data, context={})
    assert plain.model_dump() == recorded.model_dump() and plain.name == "workload" and plain.memory_headroom_gib == 8
    assert plain.defaults_applied == () and len(recorded.defaults_applied) == 9


def test_the_schema_offers_the_short_forms(tmp_path: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = workload_json_schema()
    jsonschema.validate(yaml.safe_load(ISSUE_EXAMPLE), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"model": "x", "hardware": "h100", "engine": "vllm", "traffic": {"task_mix": "poetry"}},
                            schema)


FIVE_ERRORS = """\
model: llama-3.1-8b-instruct
hardware: tpu-v5
engine: tgi
traffic:
  task_mix: {chat: 0.7, code: 0.2}
  concurrency: 0
  temperature: 3
"""


def test_five_planted_errors_give_five_lines(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(FIVE_ERRORS)
    with pytest.raises(UserErrors) as info:
        load_profile(path)
    lines = str(info.value).splitlines()
    assert len(lines) == 5 and all(line.startswith(f"{path}: ") for line in lines)
    expected = ["hardware.gpu: must be one of h100-sxm, h100-pcie", "engine.name: must be one of sglang, vllm",
                "traffic.task_mix: weights must sum to 1 (got 0.9)", "traffic.concurrency: must be >= 1 (got 0)",
                "traffic.temperature: must be <= 2 (got 3)"]
    for line, want in zip(lines, expected, strict=True):  # in the file's order
        assert want in line, (want, line)


def test_one_problem_is_one_plain_user_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(ISSUE_EXAMPLE.replace("engine: vllm", "engine: tgi"))
    with pytest.raises(UserError) as info:
        load_profile(path)
    assert not isinstance(info.value, UserErrors) and "\n" not in str(info.value)

"""Bad workload-profile inputs, as data, with the error text each must produce.

Shared by the loader tests (``tests/test_workload.py``) and the CLI tests, which check that the
same inputs exit with code 2 and one ``error:`` line, no traceback::

    from tests.bad_inputs import CASES, materialize
    @pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
    def test_cli_bad_input(case, tmp_path):
        path = materialize(case, tmp_path)
        ...  # run `specpick recommend path`, expect exit 2 and every string of case.expect

Most cases start from :data:`BASE_PROFILE` (a small valid profile) and change one thing, so each
error is the only error in its file. ``expect`` holds substrings of the one-line message: the
dotted field path and, where the field has a closed set of values, those values.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest
import yaml

PROFILE_NAME = "profile.yaml"

BASE_PROFILE: dict[str, Any] = {
    "name": "tiny",
    "description": "a small valid profile that the bad cases each break in one place",
    "model": {
        "name": "meta-llama/Llama-3.1-8B-Instruct",
        "params_b": 8.03, "num_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
        "num_kv_heads": 8, "head_dim": 128, "vocab_size": 128256, "dtype": "bf16",
    },
    "hardware": {"gpu": "a100-80gb", "count": 1},
    "engine": {"name": "vllm", "version": "0.17.0"},
    "traffic": {
        "task_mix": {"chat": 0.5, "code": 0.5},
        "prompt_tokens": {"mean": 1000, "p90": 3000},
        "output_tokens": {"mean": 200, "p90": 500},
        "concurrency": [{"min": 1, "max": 8, "weight": 0.5}, {"batch_size": 16, "weight": 0.5}],
        "temperature": [{"value": 0.0, "weight": 0.5}, {"value": 0.7, "weight": 0.5}],
    },
    "slo": {"ttft_ms": 500, "itl_p50_ms": 20, "itl_p99_ms": 60},
    "drafters": {
        "draft_model": {"name": "meta-llama/Llama-3.2-1B-Instruct", "params_b": 1.24},
        "eagle3_head": {"name": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"},
        "training_budget_gpu_hours": 0, "allow_ngram": True, "allow_lookahead": True,
    },
    "memory_headroom_gib": 8,
}

# A model section that takes its shape from a config.json beside the profile.
HF_MODEL = {"name": "local/llama", "hf_config": "config.json", "params_b": 8.0}
LLAMA_CONFIG = (
    '{"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 32, "hidden_size": 4096, '
    '"num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256, '
    '"intermediate_size": 14336, "torch_dtype": "bfloat16"}'
)

Make = Literal["file", "missing", "directory", "unreadable", "fifo", "huge"]
_DELETE = object()


@dataclass(frozen=True)
class BadInput:
    """One bad input: how to make the file, and substrings its error line must contain."""

    id: str
    expect: tuple[str, ...]
    content: str | bytes = ""        # the profile's text (make="file" or "unreadable")
    make: Make = "file"              # what to put at the profile's path
    extra_files: tuple[tuple[str, str | bytes], ...] = ()  # (name, content) beside the profile
    needs_non_root: bool = False     # root reads files whatever their mode


def valid_profile_text(**edits: Any) -> str:
    """YAML text of BASE_PROFILE with dotted-path edits ("traffic.concurrency.0.weight").

    A value of ``DELETE`` removes the key. Keys are given with ``__`` for dots, since dotted
    names cannot be keyword arguments: ``valid_profile_text(engine__name="tgi")``.
    """
    data = copy.deepcopy(BASE_PROFILE)
    for dotted, value in edits.items():
        *parents, last = dotted.split("__")
        node: Any = data
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
        key: Any = int(last) if isinstance(node, list) else last
        if value is _DELETE:
            del node[key]
        else:
            node[key] = value
    return str(yaml.safe_dump(data, sort_keys=False))


DELETE = _DELETE


def _edit(case_id: str, expect: tuple[str, ...], **edits: Any) -> BadInput:
    return BadInput(case_id, expect, valid_profile_text(**edits))


def _with_config(case_id: str, expect: tuple[str, ...], config: str | bytes | None) -> BadInput:
    files = () if config is None else (("config.json", config),)
    return BadInput(case_id, expect, valid_profile_text(model=HF_MODEL), extra_files=files)


_BOMB = "".join(
    f"{name}: &{name} [{', '.join([prev] * 9)}]\n"
    for name, prev in zip("bcdefghi", ["*a"] + [f"*{c}" for c in "bcdefgh"], strict=True)
)
_ALIAS_BOMB = 'a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n' + _BOMB
_ENGINES = "sglang, vllm, tensorrt_llm, llama_cpp"
_TASKS = "chat, code, structured, math, summarization, rag, translation, creative"
_DTYPES = "bf16, fp16, fp8, int8, int4"
_GOOD = valid_profile_text()

CASES: tuple[BadInput, ...] = (
    # ---- the file itself
    BadInput("missing-file", ("not found",), make="missing"),
    BadInput("directory", ("is a directory",), make="directory"),
    BadInput("unreadable", ("permission denied",), _GOOD, make="unreadable", needs_non_root=True),
    BadInput("fifo", ("not a regular file",), make="fifo"),
    BadInput("huge-file", ("over the 1 MiB limit",), make="huge"),
    BadInput("empty-file", ("empty",), ""),
    BadInput("whitespace-only", ("empty",), "   \n\n"),
    BadInput("comments-only", ("empty",), "# nothing here yet\n"),
    BadInput("null-document", ("empty",), "~\n"),
    BadInput("non-utf8", ("not valid UTF-8", "line 1"), b"name: caf\xe9\n"),
    BadInput("control-character", ("line 1", "not allowed"), "name: \"a\x01b\"\n"),
    # ---- YAML syntax and structure
    BadInput("malformed-flow", ("invalid YAML at line 3", "flow sequence at line 2, column 8"),
             "name: x\nmodel: [1, 2\nhardware: 3\n"),
    BadInput("malformed-indent", ("invalid YAML at line 4", "column 2"),
             "name: x\nmodel:\n  name: a\n bad: 1\n"),
    BadInput("unclosed-quote", ("invalid YAML",), 'name: "unterminated\n'),
    BadInput("multi-document", ("single document",), _GOOD + "---\nname: second\n"),
    BadInput("top-level-list", ("expected a mapping", "a list"), "- name: x\n- name: y\n"),
    BadInput("top-level-scalar", ("expected a mapping", "a string"), "just some words\n"),
    BadInput("duplicate-top-key", ("duplicate key 'name'", "line"), _GOOD + "name: again\n"),
    BadInput("duplicate-nested-key", ("duplicate key 'count'",),
             _GOOD.replace("  count: 1\n", "  count: 1\n  count: 2\n")),
    BadInput("alias-bomb", ("alias",), _ALIAS_BOMB),
    BadInput("recursive-alias", ("alias",), "a: &a [*a, *a]\n"),
    BadInput("deep-flow-nesting", ("nested more than 100 deep",),
             "a: " + "[" * 20000 + "]" * 20000 + "\n"),
    BadInput("deep-block-nesting", ("nested too deeply",),
             "".join(" " * i + f"k{i}:\n" for i in range(1100))),
    BadInput("undefined-alias", ("line 2", "undefined alias 'nope'"), "a: 1\nb: *nope\n"),
    BadInput("python-tag", ("line 1", "could not determine a constructor"),
             "name: !!python/object:os.system ls\n"),
    # ---- unknown fields, at each level, naming what is allowed
    _edit("unknown-top-field", ("colour: unknown field", "memory_headroom_gib"), colour="blue"),
    _edit("unknown-model-field", ("model.layers: unknown field", "num_layers"), model__layers=32),
    _edit("unknown-hardware-field", ("hardware.tp: unknown field", "count"), hardware__tp=2),
    _edit("unknown-engine-field", ("engine.flags: unknown field", "version"), engine__flags="-x"),
    _edit("unknown-traffic-field", ("traffic.qps: unknown field", "concurrency"), traffic__qps=3),
    _edit("unknown-bucket-field", ("traffic.concurrency[1].size: unknown field", "batch_size, min, max"),
          traffic__concurrency__1__size=4),
    _edit("unknown-token-field", ("traffic.prompt_tokens.p99: unknown field", "p90"),
          traffic__prompt_tokens__p99=9),
    _edit("unknown-slo-field", ("slo.ttft: unknown field", "ttft_ms"), slo__ttft=100),
    _edit("unknown-drafters-field", ("drafters.medusa: unknown field", "medusa_heads"),
          drafters__medusa={"x": 1}),
    _edit("unknown-draft-model-field", ("drafters.draft_model.size: unknown field", "params_b"),
          drafters__draft_model__size=1),
    # ---- missing required fields (name, engine.version, memory_headroom_gib and a catalog model's
    # shape have defaults: tests/test_workload.py checks them)
    _edit("missing-traffic", ("traffic: required field is missing",), traffic=DELETE),
    _edit("missing-task-mix", ("traffic.task_mix: required field is missing",), traffic={"concurrency": 4}),
    _edit("missing-model", ("model: required field is missing",), model=DELETE),
    _edit("missing-num-layers", ("model.num_layers: required field is missing", "catalog model"),
          model__name="my-org/custom-8b", model__num_layers=DELETE),
    _edit("missing-params-and-mlp", ("model.params_b", "intermediate_size"), model__params_b=DELETE),
    _edit("missing-bucket-weight", ("traffic.concurrency[0].weight: required field is missing",),
          traffic__concurrency__0__weight=DELETE),
    _edit("missing-medusa-num-heads", ("drafters.medusa_heads.num_heads: required field is missing",),
          drafters__medusa_heads={"path": "/m"}),
    # ---- wrong types
    _edit("count-is-text", ("hardware.count: must be an integer", "'four'"), hardware__count="four"),
    _edit("count-is-bool", ("hardware.count: must be an integer (got true)",), hardware__count=True),
    _edit("count-is-quoted-number", ("hardware.count: must be an integer", "'4'"), hardware__count="4"),
    _edit("model-is-list", ("model: must be a mapping",), model=["a", "b"]),
    _edit("concurrency-is-mapping", ("traffic.concurrency: must be a list (got a mapping)",),
          traffic__concurrency={"a": 1}),
    _edit("allow-ngram-is-text", ("drafters.allow_ngram: must be true or false",),
          drafters__allow_ngram="yes"),
    _edit("version-is-number", ("engine.version", "quoted string"), engine__version=0.5),
    _edit("concurrency-list-of-numbers", ("traffic.concurrency[0]: must be a mapping", "concurrency: N"),
          traffic__concurrency=[32]),
    _edit("model-is-number", ("model: must be a mapping",), model=8),
    _edit("name-is-empty", ("name: must not be empty",), name="  "),
    # ---- out of range
    _edit("negative-count", ("hardware.count: must be >= 1", "-1"), hardware__count=-1),
    _edit("concurrency-zero", ("traffic.concurrency: must be >= 1 (got 0)",), traffic__concurrency=0),
    _edit("temperature-scalar-above-2", ("traffic.temperature: must be <= 2 (got 3)",), traffic__temperature=3),
    _edit("prompt-tokens-negative", ("traffic.prompt_tokens.mean: must be > 0",), traffic__prompt_tokens=-5),
    _edit("temperature-above-2", ("traffic.temperature[1].value: must be <= 2", "2.5"),
          traffic__temperature__1__value=2.5),
    _edit("negative-weight", ("traffic.concurrency[0].weight: must be >= 0",),
          traffic__concurrency__0__weight=-0.5),
    _edit("task-share-above-1", ("traffic.task_mix.chat: must be <= 1",),
          traffic__task_mix={"chat": 1.5}),
    _edit("negative-headroom", ("memory_headroom_gib: must be >= 0",), memory_headroom_gib=-1),
    _edit("negative-budget", ("drafters.training_budget_gpu_hours: must be >= 0",),
          drafters__training_budget_gpu_hours=-5),
    _edit("zero-ttft", ("slo.ttft_ms: must be > 0",), slo__ttft_ms=0),
    _edit("p99-below-p50", ("slo.itl_p99_ms: must be >= itl_p50_ms",), slo__itl_p99_ms=10),
    _edit("p90-below-mean", ("traffic.output_tokens.p90: must be >= mean",),
          traffic__output_tokens__p90=100),
    # ---- closed sets: the message lists what is allowed
    _edit("unknown-engine", (f"engine.name: must be one of {_ENGINES} (got 'tgi')",), engine__name="tgi"),
    _edit("unknown-dtype", (f"model.dtype: must be one of {_DTYPES} (got 'fp4')",), model__dtype="fp4"),
    _edit("unknown-task-type", ("traffic.task_mix.poetry", _TASKS, "'poetry'"),
          traffic__task_mix={"chat": 0.5, "poetry": 0.5}),
    _edit("unknown-hardware", ("hardware.gpu: must be one of", "h100-sxm", "rtx-4090", "'tpu-v5'"),
          hardware__gpu="tpu-v5"),
    _edit("unknown-hardware-short", ("hardware.gpu: must be one of", "'tpu-v5'"), hardware="tpu-v5"),
    _edit("unknown-engine-short", (f"engine.name: must be one of {_ENGINES} (got 'tgi')",), engine="tgi"),
    _edit("unknown-model", ("model: 'no-such-model' is not in the model catalog", "llama-3.1-8b-instruct",
                            "config.json"), model="no-such-model"),
    _edit("unknown-task-short", ("traffic.task_mix.poetry", _TASKS), traffic__task_mix="poetry"),
    # ---- distributions
    _edit("task-mix-sum", ("traffic.task_mix: weights must sum to 1 (got 0.9)",),
          traffic__task_mix={"chat": 0.5, "code": 0.4}),
    _edit("task-mix-empty", ("traffic.task_mix", "at least 1"), traffic__task_mix={}),
    _edit("concurrency-sum", ("traffic.concurrency: weights must sum to 1 (got 0.8)",),
          traffic__concurrency__1__weight=0.3),
    _edit("temperature-sum", ("traffic.temperature: weights must sum to 1 (got 1.5)",),
          traffic__temperature__1__weight=1.0),
    _edit("concurrency-overlap", ("traffic.concurrency: buckets overlap: 1-8 and 4-4",),
          traffic__concurrency__1__batch_size=4),
    _edit("bucket-min-above-max", ("traffic.concurrency[0].max: must be >= min",),
          traffic__concurrency__0__min=10),
    _edit("bucket-both-forms", ("traffic.concurrency[1]", "batch_size, or both min and max"),
          traffic__concurrency__1__min=2),
    _edit("tokens-no-form", ("traffic.prompt_tokens", "either mean"), traffic__prompt_tokens={"p90": 10}),
    _edit("token-points-sum", ("traffic.prompt_tokens.points: weights must sum to 1",),
          traffic__prompt_tokens={"points": [{"value": 10, "weight": 0.3}]}),
    # ---- model shape and hf_config
    _edit("kv-heads-not-dividing", ("model.num_kv_heads: must divide num_attention_heads",),
          model__num_kv_heads=5),
    _edit("eagle3-head-unnamed", ("drafters.eagle3_head", "name or path"), drafters__eagle3_head={}),
    _with_config("hf-config-missing", ("model.hf_config", "config.json", "not found"), None),
    _with_config("hf-config-malformed", ("model.hf_config", "invalid JSON at line 1"),
                 '{"num_hidden_layers": 32,'),
    _with_config("hf-config-not-object", ("model.hf_config", "JSON object", "a list"), "[1, 2]"),
    _with_config("hf-config-empty", ("model.hf_config", "empty"), ""),
    _with_config("hf-config-not-utf8", ("model.hf_config", "UTF-8"), b'{"x": "\xff"}'),
    _with_config("hf-config-no-layers", ("model.hf_config", "num_hidden_layers", "model.num_layers"),
                 LLAMA_CONFIG.replace('"num_hidden_layers": 32, ', "")),
    _with_config("hf-config-bad-value",
                 ("model.hf_config", "hidden_size must be a positive integer", "'4096'"),
                 LLAMA_CONFIG.replace('"hidden_size": 4096', '"hidden_size": "4096"')),
)


def materialize(case: BadInput, tmp_path: Path) -> Path:
    """Create the case's file (and companions) under ``tmp_path``; return the profile's path.

    The path is returned even when the case is that nothing exists there. Cases that cannot be
    made here (an unreadable file when running as root, which reads anything) skip the calling
    test, so every user of the cases skips them alike.
    """
    if case.needs_non_root and hasattr(os, "geteuid") and os.geteuid() == 0:
        pytest.skip("running as root: root can read a file whatever its mode")
    path = Path(tmp_path) / PROFILE_NAME
    for name, content in case.extra_files:
        _write(Path(tmp_path) / name, content)
    if case.make == "missing":
        return path
    if case.make == "directory":
        path.mkdir()
    elif case.make == "fifo":
        os.mkfifo(path)
    elif case.make == "huge":
        # A valid profile padded with comments past the 1 MiB limit: refused on size alone.
        _write(path, _GOOD + "# padding\n" * (110 * 1024))
    else:
        _write(path, case.content)
        if case.make == "unreadable":
            path.chmod(0)
    return path


def _write(path: Path, content: str | bytes) -> None:
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")

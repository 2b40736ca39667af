"""Every profile the schema accepts ends in exit 0 or 2, never a traceback (issue 16, item 7).

Two generators, each with a bounded example count so the file runs in well under a minute:
profiles drawn from ``specpick schema`` itself (hypothesis-jsonschema; most are rejected by the
cross-field checks, which is the point: rejected cleanly), and the small valid profile of
``tests/bad_inputs.py`` with its numbers replaced by arbitrary well-typed ones (these reach the
cost model: the physically absurd but well-typed case that once divided by a zero speedup).
``estimate`` is driven with the same model, hardware, engine and batch sizes.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

hypothesis = pytest.importorskip("hypothesis")
hypothesis_jsonschema = pytest.importorskip("hypothesis_jsonschema")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from picker.cli.main import app  # noqa: E402
from picker.inputs.workload import workload_json_schema  # noqa: E402
from tests.bad_inputs import BASE_PROFILE  # noqa: E402

runner = CliRunner()
FUZZ = settings(max_examples=15, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
# Every number of the base profile, by path; each is replaced by a draw of the same JSON type.
NUMERIC_PATHS: tuple[tuple[str | int, ...], ...] = (
    ("model", "params_b"), ("model", "num_layers"), ("model", "hidden_size"),
    ("model", "num_attention_heads"), ("model", "num_kv_heads"), ("model", "head_dim"),
    ("model", "vocab_size"), ("hardware", "count"), ("traffic", "prompt_tokens", "mean"),
    ("traffic", "prompt_tokens", "p90"), ("traffic", "output_tokens", "mean"),
    ("traffic", "output_tokens", "p90"), ("traffic", "concurrency", 0, "min"),
    ("traffic", "concurrency", 0, "max"), ("traffic", "concurrency", 1, "batch_size"),
    ("slo", "ttft_ms"), ("drafters", "draft_model", "params_b"), ("memory_headroom_gib",),
)


def _no_traceback(args: list[str]) -> None:
    """Exit 0 or 2 and no traceback; a 2 is the project's ``error:`` lines, one per problem (option
    parsing errors of ``estimate`` too: ``picker.cli.common.OneLineUsageErrors``)."""
    result = runner.invoke(app, args)
    assert result.exit_code in (0, 2), (args, result.output, repr(result.exception))
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    if result.exit_code == 2:
        lines = result.stderr.splitlines()
        assert lines and all(line.startswith("error: ") for line in lines), result.stderr


def _check(profile: dict[str, Any], tmp: Path) -> None:
    path = tmp / "profile.yaml"
    path.write_text(yaml.safe_dump(profile, allow_unicode=True), encoding="utf-8")
    _no_traceback(["recommend", str(path), "--format", "json"])


def _number(value: Any) -> st.SearchStrategy[Any]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(value)
    # Anything of the type, and (more often) values inside the bounds but far from typical ones,
    # which pass validation and reach the cost model.
    if isinstance(value, int):
        return st.integers(min_value=-(2**63), max_value=2**63) | st.integers(1, 1 << 20) | st.integers(1, 64)
    return (st.floats(allow_nan=True, allow_infinity=True) | st.floats(min_value=1e-300, max_value=1e300)
            | st.floats(min_value=1e-6, max_value=1e4) | st.floats(min_value=1e-6, max_value=1e4))


def _set(profile: dict[str, Any], path: tuple[str | int, ...], value: Any) -> None:
    node: Any = profile
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


def _get(profile: dict[str, Any], path: tuple[str | int, ...]) -> Any:
    node: Any = profile
    for key in path:
        node = node[key]
    return node


@st.composite
def absurd_profiles(draw: st.DrawFn) -> dict[str, Any]:
    """The base profile with some of its numbers replaced by arbitrary well-typed ones."""
    profile = copy.deepcopy(BASE_PROFILE)
    for path in draw(st.lists(st.sampled_from(NUMERIC_PATHS), min_size=1, max_size=4, unique=True)):
        _set(profile, path, draw(_number(_get(BASE_PROFILE, path))))
    return profile


@FUZZ
@given(profile=hypothesis_jsonschema.from_schema(workload_json_schema()))
def test_recommend_on_schema_profiles(profile: dict[str, Any], tmp_path: Path) -> None:
    _check(profile, tmp_path)


@FUZZ
@given(profile=absurd_profiles())
def test_recommend_on_well_typed_absurd_profiles(profile: dict[str, Any], tmp_path: Path) -> None:
    _check(profile, tmp_path)


@FUZZ
@given(profile=absurd_profiles(), alpha=st.floats(0.0, 1.0), topk=st.integers(1, 8),
       strategy=st.sampled_from(["vanilla", "medusa", "eagle3", "lookahead", "ngram"]))
def test_estimate_on_the_same_numbers(profile: dict[str, Any], alpha: float, topk: int, strategy: str) -> None:
    m, c = profile["model"], profile["traffic"]["concurrency"]
    args = ["estimate", "--strategy", strategy, "--alpha", repr(alpha), "--model-params",
            repr(float(m["params_b"]) * 1e9), "--hardware", profile["hardware"]["gpu"],
            "--engine", profile["engine"]["name"], "--batch-size", str(c[1]["batch_size"]),
            "--num-devices", str(profile["hardware"]["count"]),
            "--context-len", str(int(min(profile["traffic"]["prompt_tokens"]["mean"], 1e18))),
            "--draft-params", repr(float(profile["drafters"]["draft_model"]["params_b"]) * 1e9),
            "--format", "json"]
    if strategy in ("medusa", "eagle3") and topk > 1:
        args += ["--tree-topk", str(topk)]
    _no_traceback(args)


@pytest.mark.parametrize("params", ["inf", "1e300"])
def test_estimate_refuses_models_larger_than_exist(params: str) -> None:
    result = runner.invoke(app, ["estimate", "--strategy", "eagle3", "--alpha", "0.7", "--model-params", params,
                                 "--hardware", "h100", "--format", "json"])
    assert result.exit_code == 2 and "--model-params" in result.output  # once: NaN speedup, exit 0


def test_the_known_crash_is_a_one_line_error(tmp_path: Path) -> None:
    profile = copy.deepcopy(BASE_PROFILE)
    profile["drafters"]["draft_model"]["params_b"] = 1e300  # once a ZeroDivisionError in recommend
    path = tmp_path / "profile.yaml"
    path.write_text(yaml.safe_dump(profile), encoding="utf-8")
    result = runner.invoke(app, ["recommend", str(path), "--format", "json"])
    assert result.exit_code == 2
    assert "drafters.draft_model.params_b" in result.stderr and "10000" in result.stderr
    assert json.dumps(workload_json_schema())  # the bound is part of the published schema
    assert workload_json_schema()["$defs"]["DraftModelSpec"]["properties"]["params_b"]["maximum"] == 10_000

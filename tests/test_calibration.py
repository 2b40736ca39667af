"""Calibration: the fit recovers known engine constants from synthetic timings, the file loads into
the roofline's overrides, bad files are one-line user errors, and the GPU script runs end to end on
the CPU (a dry run on a tiny model)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from picker.errors import UserError
from policies.calibration import (
    CalibrationFile,
    Constants,
    HardwareRecord,
    ShapeRecord,
    TimingPoint,
    calibration_for,
    fit_engine_constants,
    load_calibration,
    read_calibration,
)
from policies.roofline import ModelShape, forward_time, resolve_engine

H100 = SimpleNamespace(name="h100-sxm", memory_bandwidth_gbps=3350.0, bf16_tflops=989.0)
SHAPE = ModelShape.from_params(8e9)
TRUTH = {"bw_efficiency": 0.55, "flops_efficiency": 0.35, "fixed_s": 4e-4, "launch_s_per_layer": 0.0}
ROOT = Path(__file__).resolve().parents[1]


def synthetic(truth: dict[str, float], batches: tuple[int, ...], noise: float = 0.0,
              seed: int = 0) -> list[TimingPoint]:
    """Roofline times under ``truth`` with multiplicative noise, as a GPU run would give."""
    rng = random.Random(seed)
    return [TimingPoint(batch=b, tokens_per_seq=k, context_len=c,
                        seconds=forward_time(SHAPE, H100, b, k, c, "hf", calibration=truth).seconds
                        * (1.0 + rng.uniform(-noise, noise)))
            for b in batches for k in (1, 2, 4, 8, 16) for c in (512, 4096)]


def test_fit_recovers_constants_from_noisy_timings() -> None:
    fit = fit_engine_constants(synthetic(TRUTH, (1, 2, 4, 8, 16, 32, 64, 128, 256), noise=0.02), SHAPE, H100)
    for key in ("bw_efficiency", "flops_efficiency", "fixed_s"):
        assert fit.constants[key] == pytest.approx(TRUTH[key], rel=0.08), key
    assert fit.constants["launch_s_per_layer"] == 0.0  # folded into fixed_s
    assert fit.quality.median_rel_error < 0.02
    assert fit.quality.memory_bound_points > 0 and fit.quality.compute_bound_points > 0


def test_an_efficiency_no_point_is_bound_by_is_left_out() -> None:
    # Batch 1 only: every point is memory-bound, so the data say nothing about FLOP efficiency.
    fit = fit_engine_constants(synthetic(TRUTH, (1,)), SHAPE, H100)
    assert "flops_efficiency" not in fit.constants
    assert fit.constants["bw_efficiency"] == pytest.approx(TRUTH["bw_efficiency"], rel=0.02)
    assert resolve_engine("hf", fit.constants).flops_efficiency == resolve_engine("hf").flops_efficiency


def test_points_set_by_eager_launches_fit_no_efficiency_and_say_why() -> None:
    """Eager PyTorch on an H200: ~16 ms of launches per 8B forward whatever it computes (the issue's
    eager fit gave flops_efficiency 0.059). With the fixed time most of every point, neither
    efficiency is fitted, and the file says so; the fixed time itself is."""
    eager = {"bw_efficiency": 0.8, "flops_efficiency": 0.6, "fixed_s": 40e-3, "launch_s_per_layer": 0.0}
    fit = fit_engine_constants(synthetic(eager, (1, 2, 4, 8, 16, 32), noise=0.02), SHAPE, H100)
    assert "flops_efficiency" not in fit.constants and "bw_efficiency" not in fit.constants
    assert fit.quality.overhead_bound_points == fit.quality.points
    assert any(n.startswith("flops_efficiency not fitted") and "eager kernel launches" in n for n in fit.quality.notes)
    assert fit.constants["fixed_s"] == pytest.approx(40e-3, rel=0.25)
    # the same device without the launches: both fitted, nothing to say
    graphs = fit_engine_constants(synthetic({**eager, "fixed_s": 2e-4}, (1, 8, 64, 256), noise=0.02), SHAPE, H100)
    assert {"bw_efficiency", "flops_efficiency"} <= set(graphs.constants) and not graphs.quality.notes


def test_too_few_points_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least 3"):
        fit_engine_constants(synthetic(TRUTH, (1,))[:2], SHAPE, H100)


def _file(points: list[TimingPoint], **changes: Any) -> dict[str, Any]:
    fit = fit_engine_constants(points, SHAPE, H100)
    cal = CalibrationFile(
        engine="hf", device="synthetic", method="roofline under known constants", created="2026-01-01",
        hardware=HardwareRecord(name=H100.name, memory_bandwidth_gbps=3350.0, bf16_tflops=989.0),
        model=ShapeRecord(**{f: getattr(SHAPE, f) for f in ShapeRecord.model_fields}),
        constants=Constants(**fit.constants), fit=fit.quality, measurements=points)
    return {**cal.model_dump(), **changes}


def test_loaded_calibration_reproduces_the_measurements(tmp_path: Path) -> None:
    points = synthetic(TRUTH, (1, 4, 16, 64, 256))
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(_file(points)))
    overrides = load_calibration(path, engine="hf")
    assert resolve_engine("hf", overrides).status == "calibrated"
    shape = read_calibration(path).model.to_shape()
    for p in points:
        predicted = forward_time(shape, H100, p.batch, p.tokens_per_seq, p.context_len, "hf",
                                 calibration=overrides).seconds
        assert predicted == pytest.approx(p.seconds, rel=1e-3)


@pytest.mark.parametrize("text, field, message", [
    ("{not json", None, "not valid JSON"),
    ("[1, 2]", None, "JSON object"),
    (None, "engine", "unknown engine"),
    (None, "constants.fixed_s", "greater than or equal to 0"),
    (None, "schema_version", "Input should be 1"),
    (None, "surprise", "Extra inputs"),
])
def test_bad_files_are_user_errors(tmp_path: Path, text: str | None, field: str | None, message: str) -> None:
    if text is None:
        good = _file(synthetic(TRUTH, (1, 64)))
        bad = {"engine": {"engine": "tgi"}, "constants.fixed_s": {"constants": {**good["constants"], "fixed_s": -1.0}},
               "schema_version": {"schema_version": 2}, "surprise": {"surprise": 1}}[field or ""]
        text = json.dumps({**good, **bad})
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(UserError) as err:
        load_calibration(path)
    assert err.value.file == str(path) and message in err.value.message
    if field:
        assert err.value.field == field


def test_missing_file_and_wrong_engine(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not found"):
        load_calibration(tmp_path / "absent.json")
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(_file(synthetic(TRUTH, (1, 64)))))
    with pytest.raises(UserError, match="measured on engine 'hf', not 'sglang'"):
        load_calibration(path, engine="sglang")


def _tiny_llama(folder: Path) -> None:
    """A random 2-layer Llama saved as a Hugging Face folder (timing does not depend on weights)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1)
    LlamaForCausalLM(cfg).save_pretrained(folder)


def _calibrate(*args: str) -> Any:
    """``specpick calibrate ARGS`` in this process; the CliRunner result."""
    from typer.testing import CliRunner

    from picker.cli.main import app

    return CliRunner().invoke(app, ["calibrate", *args])


@pytest.mark.slow  # imports torch + transformers in a subprocess: ~10 s quiet, ~90 s under load
def test_calibrate_dry_run_on_cpu(tmp_path: Path) -> None:
    """The command's whole path (model, timing loop, cache rewind, fit, file) on a tiny CPU model."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    _tiny_llama(tmp_path / "model")
    out = tmp_path / "cal.json"
    result = _calibrate("--model", str(tmp_path / "model"), "--device", "cpu", "--hardware", "cpu", "--batches",
                        "1,2", "--tokens", "1,3", "--contexts", "8", "--repeats", "1", "--warmup", "0",
                        "--out", str(out))
    assert result.exit_code == 0, result.output
    cal = read_calibration(out)
    assert len(cal.measurements) == 4 and cal.engine == "hf" and "fixed_s" in load_calibration(out)
    assert "on cpu" in cal.method and json.loads(result.stdout)["constants"]["fixed_s"] == cal.constants.fixed_s


def test_cuda_names_map_to_the_hardware_catalog() -> None:
    from picker.calibrate.timing import guess_hardware

    assert guess_hardware("NVIDIA H100 80GB HBM3") == "h100-sxm"
    assert guess_hardware("NVIDIA H200") == "h200"
    assert guess_hardware("Frobnicator 9000") is None


def test_bad_calibrate_input_is_one_line_and_writes_nothing(tmp_path: Path) -> None:
    """Bad lists (every problem at once), drafters without the reference loop, a device this
    machine lacks: one ``error:`` line each, exit 2, no file."""
    torch = pytest.importorskip("torch")
    out = tmp_path / "cal.json"
    bad = _calibrate("--device", "cpu", "--batches", "0,2", "--tokens", "x", "--out", str(out))
    lines = bad.output.strip().splitlines()  # one line per problem, all at once
    assert bad.exit_code == 2 and len(lines) == 2 and "--batches" in lines[0] and "--tokens" in lines[1]
    drafter = _calibrate("--device", "cpu", "--shape", "llama-68m", "--eagle3", str(tmp_path), "--out", str(out))
    assert drafter.exit_code == 2 and "no config.json" in drafter.output
    _tiny_llama(tmp_path / "model")
    loop_only = _calibrate("--device", "cpu", "--hardware", "cpu", "--model", str(tmp_path / "model"),
                           "--draft", str(tmp_path / "model"), "--out", str(out))
    assert loop_only.exit_code == 2 and "add --forward reference" in loop_only.output
    device = _calibrate("--device", "tpu", "--out", str(out))
    assert device.exit_code == 2 and "--device" in device.output
    if not torch.cuda.is_available():
        cuda = _calibrate("--out", str(out))  # the default device is cuda
        assert cuda.exit_code == 2 and "no CUDA device here" in cuda.output
    assert not out.exists()


def test_reference_loop_constants_are_measured_from_serve(tmp_path: Path) -> None:
    """``--forward reference`` times the loop itself: its host work per sequence (plain, and what a
    speculative step adds), the n-gram lookup, with ``--draft`` the draft's fixed cost and the
    drafter's host work per sequence-forward, and what sampling adds to each host term; each lands
    in the file, applies to the hf curve, and none is carried to another engine."""
    pytest.importorskip("torch")
    from policies.loadcurve import engine_curve

    _tiny_llama(tmp_path / "model")
    _tiny_llama(tmp_path / "draft")
    out = tmp_path / "cal.json"
    result = _calibrate("--model", str(tmp_path / "model"), "--draft", str(tmp_path / "draft"), "--device", "cpu",
                        "--hardware", "cpu", "--forward", "reference", "--batches", "1,2", "--tokens", "1,3",
                        "--contexts", "8,16", "--repeats", "1", "--warmup", "0", "--loop-tokens", "4",
                        "--out", str(out))
    assert result.exit_code == 0, result.output
    cal = read_calibration(out)
    loop = ("host_s_per_seq", "spec_host_s_per_seq", "lookup_s_per_seq", "draft_fixed_s", "draft_host_s_per_seq",
            "sampling_host_s_per_seq", "sampling_spec_host_s_per_seq", "sampling_draft_host_s_per_seq")
    values = cal.overrides()
    assert all(values[k] > 0 for k in ("host_s_per_seq", "lookup_s_per_seq")), values
    assert all(k in values for k in loop) and "serve()" in cal.method
    curve = engine_curve("hf", calibration_for(out, "hf").overrides, label="cal")
    assert curve.host_s_per_seq == values["host_s_per_seq"] and curve.lookup_s_per_seq == values["lookup_s_per_seq"]
    assert values["draft_host_s_per_seq"] > 0 and curve.draft_host_s_per_seq == values["draft_host_s_per_seq"]
    assert not set(loop) & set(calibration_for(out, "vllm").overrides)  # the loop's, not the GPU's


def test_each_drafter_kind_gets_its_own_host_term_from_serve(tmp_path: Path) -> None:
    """With the zoo's EAGLE-3 head and Medusa heads, ``--forward reference`` times each drafter in
    ``serve()`` less its module's own forward: ``layer_host_s_per_seq`` (per priced draft forward)
    and ``heads_host_s_per_seq`` (per sequence-step), with what sampling adds to each; both reach the
    hf curve and neither is carried to vLLM. Without ``--draft`` the draft model's term stays unmeasured."""
    pytest.importorskip("torch")
    from policies.loadcurve import engine_curve

    out = tmp_path / "cal.json"
    result = _calibrate("--model", "zoo", "--eagle3", "zoo", "--medusa", "zoo", "--device", "cpu", "--hardware", "cpu",
                        "--forward", "reference", "--batches", "1,2", "--tokens", "1,3", "--contexts", "16",
                        "--repeats", "1", "--warmup", "0", "--loop-tokens", "6", "--out", str(out))
    assert result.exit_code == 0, result.output
    cal = read_calibration(out)
    values = cal.overrides()
    terms = ("layer_host_s_per_seq", "heads_host_s_per_seq")
    assert all(values[k] > 0 for k in terms), values
    assert all(f"sampling_{k}" in values for k in terms) and "draft_host_s_per_seq" not in values
    assert "EAGLE-3 drafter" in cal.method and "Medusa drafter" in cal.method
    curve = engine_curve("hf", calibration_for(out, "hf").overrides, label="cal")
    assert (curve.layer_host_s_per_seq, curve.heads_host_s_per_seq) == (values[terms[0]], values[terms[1]])
    assert not set(terms) & set(calibration_for(out, "vllm").overrides)

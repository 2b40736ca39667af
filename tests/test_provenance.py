"""Provenance: recorded by the profiler, checked by `recommend` against the profile (issue 19)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from picker.cli.main import app
from picker.errors import UserError
from picker.inputs.measurements import Measurements, load_measurements
from picker.inputs.provenance import (
    Provenance,
    check_measurements,
    compare,
    costs_transfer,
    read_provenance,
)
from picker.inputs.workload import load_profile
from picker.recommend.provenance_labels import merge_citations

ROOT = Path(__file__).resolve().parents[1]
CODE = ROOT / "profiles" / "code-assistant-8b-a100.yaml"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
runner = CliRunner()


def _prov(name: str = LLAMA, *, backend: str = "vllm", engine: str | None = "vllm", version: str | None = "0.17.0",
          gpu: str | None = "a100-80gb", count: int = 1, params: int | None = None) -> dict[str, Any]:
    return {"model": {"name": name, "params": params}, "backend": backend, "engine": engine,
            "engine_version": version, "hardware": {"gpu": gpu, "gpu_count": count, "device": "cuda"},
            "prompts": "builtin", "chat_template": "none", "date": "2026-12-01T00:00:00+00:00"}


def _cells(alpha: float = 0.9, tasks: tuple[str, ...] = ("code",), temps: tuple[float, ...] = (0.0,)) -> list[dict]:
    return [{"task": t, "strategy": s, "temperature": temp, "alpha": alpha, "alpha_ci": [alpha - 0.02, alpha + 0.02],
             "samples": 200, "num_draft_tokens": 4, "cost_ratio": 0.02, "speedup_vs_plain": 1.5}
            for t in tasks for s in ("ngram", "eagle3") for temp in temps]


def _summary(tmp_path: Path, prov: dict[str, Any] | None, cells: list[dict] | None = None) -> Path:
    run: dict[str, Any] = {"backend": prov["backend"] if prov else "vllm"}
    if prov is not None:
        run["provenance"] = prov
    path = tmp_path / "summary.json"
    path.write_text(json.dumps({"run": run, "cells": cells if cells is not None else _cells()}))
    return path


def test_exact_match_is_measured_and_keeps_costs() -> None:
    m = compare(Provenance.model_validate(_prov()), load_profile(CODE))
    assert (m.status, m.keep_costs, m.label) == ("measured", True, None)


@pytest.mark.parametrize("change, says", [
    ({"gpu": "h100-sxm"}, "hardware"),
    ({"count": 2}, "hardware"),
    ({"backend": "sglang", "engine": "sglang"}, "engine sglang"),
    ({"version": "0.9.0"}, "version 0.9.0"),
])
def test_same_model_elsewhere_keeps_alpha_drops_costs(change: dict[str, Any], says: str) -> None:
    m = compare(Provenance.model_validate(_prov(**change)), load_profile(CODE))
    assert m.status == "alpha-only" and m.keep_costs is False
    assert says in m.notes[0] and "step costs do not" in m.notes[0]


def test_a_local_folder_of_the_same_model_matches_but_not_another_size() -> None:
    prof = load_profile(CODE)
    assert compare(Provenance.model_validate(_prov("/models/llama-3.1-8b-instruct")), prof).status == "measured"
    other = Provenance.model_validate(_prov("/models/Llama-3.1-8B-Instruct", params=70_000_000_000))
    assert compare(other, prof).status == "other-model"


def test_old_files_have_unknown_provenance_and_keep_the_engine_rule(tmp_path: Path) -> None:
    meas = load_measurements(_summary(tmp_path, None))
    prof = load_profile(CODE)
    assert read_provenance(meas) is None
    assert compare(None, prof).status == "unknown"
    assert costs_transfer(prof, meas) is True  # run.backend vllm = the profile's engine, as before
    assert costs_transfer(prof, meas, explicit=False) is False


def test_costs_do_not_transfer_from_other_hardware(tmp_path: Path) -> None:
    from picker.recommend.evidence_index import index_evidence

    prof = load_profile(CODE)
    here = load_measurements(_summary(tmp_path, _prov()))
    assert index_evidence(prof, here).measured_costs is True
    (tmp_path / "h").mkdir()
    elsewhere = load_measurements(_summary(tmp_path / "h", _prov(gpu="h100-sxm")))
    assert index_evidence(prof, elsewhere).measured_costs is False


def test_another_model_is_refused_in_one_line(tmp_path: Path) -> None:
    path = _summary(tmp_path, _prov("zoo:ci/target", backend="torch", engine="torch reference loop", gpu=None))
    with pytest.raises(UserError) as err:
        check_measurements(load_measurements(path), load_profile(CODE))
    assert str(err.value).count("\n") == 0
    result = runner.invoke(app, ["recommend", str(CODE), "--measurements", str(path)])
    assert result.exit_code == 2
    line = result.stderr.strip()
    assert "\n" not in line and "Traceback" not in result.output
    assert "zoo:ci/target" in line and LLAMA in line and "--allow-other-model" in line and str(path) in line


def test_the_override_labels_every_number_resting_on_the_file(tmp_path: Path) -> None:
    path = _summary(tmp_path, _prov("zoo:ci/target", backend="torch", engine="torch reference loop", gpu=None))
    result = runner.invoke(app, ["recommend", str(CODE), "--measurements", str(path), "--allow-other-model",
                                 "--format", "json"])
    assert result.exit_code == 0, result.output
    rec = json.loads(result.stdout)
    assert rec["evidence"]["provenance"] == "other-model"
    assert rec["evidence"]["measured_on"] == "zoo:ci/target"
    code = next(r for r in rec["per_task"] if r["task"] == "code")
    assert code["evidence"] != "prior" and code["measured_on"] == "zoo:ci/target"
    assert all(r["measured_on"] is None for r in rec["per_task"] if r["evidence"] == "prior")
    assert any("measured on zoo:ci/target" in w for w in rec["warnings"])
    measured = [a for a in rec["alternatives"] if a["strategy"] in ("ngram", "eagle3")]
    assert measured and all("alpha measured on zoo:ci/target" in a["notes"] for a in measured)
    md = runner.invoke(app, ["recommend", str(CODE), "--measurements", str(path), "--allow-other-model"]).stdout
    assert "evidence: mixed, measured on zoo:ci/target" in md
    assert "| code | 75% |" in md and "measured on zoo:ci/target | " in md


def test_the_plan_says_costs_were_dropped_for_other_hardware(tmp_path: Path) -> None:
    path = _summary(tmp_path, _prov(gpu="h100-sxm"))
    rec = json.loads(runner.invoke(app, ["recommend", str(CODE), "--measurements", str(path),
                                         "--format", "json"]).stdout)
    assert rec["evidence"]["provenance"] == "alpha-only"
    assert any("acceptance (alpha) transfers, step costs do not" in w for w in rec["warnings"])
    code = next(r for r in rec["per_task"] if r["task"] == "code")
    assert code["measured_on"] is None and code["evidence"] in ("measured", "mixed")


def test_per_task_alpha_is_the_one_the_decision_used(tmp_path: Path) -> None:
    # The profile serves T = 0 (70%) and T = 0.2; measured only at T = 0. The table used to show the
    # prior of the median temperature (0.2, no cell within 0.15) while the decision ran on the cell.
    from picker.recommend.pipeline import recommend

    meas = Measurements.model_validate({"cells": _cells(0.93), "source": "m.json"})
    result = recommend(load_profile(CODE), meas)
    rec = result.recommendation
    code = next(r for r in rec.per_task if r.task == "code")
    assert code.strategy in ("ngram", "eagle3")
    assert code.alpha == 0.93 and code.evidence == "mixed"  # measured at T = 0, prior at T = 0.2
    shown = next(row for row in result.explain if row["task"] == "code")["candidates"]
    top = next(c for c in shown if c["strategy"] == code.strategy)
    assert top["evidence"]["alpha"] == code.alpha and top["evidence"]["source"] == "measured"


def test_citations_once_per_source() -> None:
    rec = json.loads(runner.invoke(app, ["recommend", str(ROOT / "profiles" / "chat-70b-h100.yaml"),
                                         "--format", "json"]).stdout)
    heads = [c.split(" [")[0] for c in rec["evidence"]["citations"]]
    assert len(heads) == len(set(heads))
    eagle2 = [c for c in rec["evidence"]["citations"] if "EAGLE-2" in c]
    assert len(eagle2) == 1 and "Table 1, temperature=0" in eagle2[0] and "Table 2, temperature=0" in eagle2[0]
    assert merge_citations(["B", "A [x]", "A [y; x]"]) == ["A [x; y]", "B"]


class _Echo:
    """A source with no records and a provenance hook, to see what the run writes."""

    name, concurrency, plain = "echo", 1, False

    def describe(self) -> dict[str, Any]:
        return {"backend": "echo"}

    def provenance(self) -> dict[str, Any]:
        return {"model": {"name": "org/m", "params": 7}, "engine": "echo", "engine_version": "1.0"}

    def configs(self, strategies: Any, ns: Any) -> list[Any]:
        return []

    def measure(self, cell: Any, prompts: Any, params: Any) -> Any:
        return iter(())

    def close(self) -> None:
        pass


def test_the_profiler_writes_provenance(tmp_path: Path) -> None:
    from picker.profiler.run import ProfileConfig, Profiler
    from picker.tasks import builtin_prompts

    prompts = {"code": builtin_prompts(["code"], 2)}
    cfg = ProfileConfig(out=tmp_path, tasks=["code"], temperatures=[0.0], strategies=[], num_draft_tokens=[4],
                        max_new_tokens=8, limit_per_task=2, plot=False,
                        meta={"backend": "echo", "target": "org/m", "prompts": "builtin"})
    Profiler(_Echo(), prompts, cfg).run()
    summary = json.loads((tmp_path / "summary.json").read_text())
    prov = Provenance.model_validate(summary["run"]["provenance"])
    assert (prov.model.name, prov.model.params, prov.engine_version) == ("org/m", 7, "1.0")
    assert prov.prompt_set_sha256 and len(prov.prompt_set_sha256) == 64 and prov.date and prov.chat_template
    assert read_provenance(load_measurements(tmp_path / "summary.json")) == prov


def test_the_torch_source_hashes_the_zoo_files() -> None:
    from picker.profiler.provenance import sha256_files
    from picker.profiler.torch_source import TorchSource
    from picker.zoo.resolve import resolve_target

    target, artifacts, _ = resolve_target("zoo")
    own = TorchSource(target, artifacts).provenance()
    assert own["model"]["name"] == "zoo:ci/target" and own["model"]["params"] > 1_000_000
    assert own["model"]["config_sha256"] == sha256_files([target / "config.json"])
    assert own["model"]["tokenizer_sha256"] and any(d["tokenizer_sha256"] for d in own["drafts"].values())
    assert own["hardware"]["cores"] and own["dtype"] == "fp32"

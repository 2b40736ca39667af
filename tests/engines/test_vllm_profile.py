"""``specpick profile --backend vllm --plain-url`` on real vLLM CPU servers of the zoo (marker ``engines``).

Two servers of the zoo target on loopback -- one with prompt lookup (``ngram``, N = 4), one without
speculation -- and the profiler against both: acceptance from the speculative server's ``/metrics``,
plain decoding timed on the other, so each cell carries ``speedup_vs_plain``. From those cells the
policy derives vLLM's own step cost for prompt lookup (``policies.cell_evidence.live_step_ratio``) and
``recommend`` scores with it instead of the roofline.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from bench.regret.vllm import serving
from picker.cli.main import app
from picker.engine.plugins import load_strategies
from picker.inputs.measurements import load_measurements
from picker.inputs.workload import load_profile
from picker.profiler.run import records_of
from picker.recommend.scoring import Scorer
from policies.cell_evidence import live_step_points
from tests.engines.support import ROOT, engine_python

pytestmark = pytest.mark.engines
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}


@pytest.fixture(scope="module")
def zoo() -> Any:
    from picker.zoo import build_zoo

    return build_zoo("ci", progress=False)


def test_profile_times_plain_on_a_second_server_and_recommend_uses_vllms_step_cost(zoo: Any, tmp_path: Path) -> None:
    out = tmp_path / "run"
    with serving(engine_python("vllm"), zoo.target, {"ngram": NGRAM}, tmp_path / "servers") as servers:
        result = CliRunner().invoke(app, [
            "profile", "--backend", "vllm", "--url", servers["ngram"].url, "--plain-url", servers["plain"].url,
            "--strategies", "ngram", "--tasks", "code,structured", "--temperatures", "0", "--limit-per-task", "4",
            "--max-new-tokens", "32", "--ignore-eos", "--concurrency", "1", "--no-early-stop", "--quiet", "--no-plot",
            "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["run"]["source"]["plain_url"] == servers["plain"].url
    assert {b["task"] for b in summary["baselines"]} == {"code", "structured"}
    records = records_of(out)
    assert {r.source for r in records if r.cell.is_plain} == {"vllm-plain-server"}
    for r in records:
        print(r.cell.strategy, r.cell.task, r.prompt_ids, r.tokens, round(r.wall_s, 3))
    cells = summary["cells"]
    assert {c["task"] for c in cells} == {"code", "structured"}
    for c in cells:
        print(c["task"], "alpha", c["alpha"], "tau", c["tau"], "speedup_vs_plain", c["speedup_vs_plain"])
        assert c["num_draft_tokens"] == 4 and c["tau"] > 1.0 and c["speedup_vs_plain"] > 0.0
    shipped = load_profile(ROOT / "profiles" / "code-assistant-8b-a100.yaml")  # engine: vllm
    meas = load_measurements(out / "summary.json")
    # The server runs the zoo, not the shipped profile's Llama: its costs are not that deployment's
    # (picker.inputs.provenance). A profile of the served model and engine build takes them.
    assert not Scorer(shipped, meas).measured_costs
    prov = meas.run["provenance"]  # type: ignore[attr-defined]
    profile = shipped.model_copy(update={
        "model": shipped.model.model_copy(update={"name": prov["model"]["name"]}),
        "engine": shipped.engine.model_copy(update={"version": prov.get("engine_version") or shipped.engine.version})})
    scorer = Scorer(profile, meas)
    assert scorer.measured_costs  # the measurements come from the model and engine the profile deploys
    ev = scorer.evidence(load_strategies()["ngram"], "code", 0.0)
    assert ev.source == "measured" and ev.cost is not None and ev.cost.step_points
    n, ratio = ev.cost.step_points[0]
    # The step cost recommend scores with is the one these cells imply (the engine's own), not a
    # prior. Its size is the machine's: vLLM's CPU build spent 14-33x a plain step per ngram step
    # here (0.1-7 s per 32-token request, plain 0.12-0.2 s), so only a floor is asserted on it.
    assert ev.cost.step_points == live_step_points(summary["cells"])
    print("vLLM ngram step ratio at N = 4:", ratio)
    assert n == 4 and ratio > 0.5

"""What sampling costs on the host reaches every price: the recommend cost source prices a bucket at
T > 0 with the load curve's ``sampling_*`` host terms, ``specpick estimate --temperature`` too.

The terms are the ones the shipped calibration of the reference loop measured
(``tests/data/zoo-ci-cpu-calibration-2026-12-03.json``, engine ``hf``, every ``sampling_*`` term
positive); every shipped engine curve has them at zero, so a deployment on one prices T > 0 as T = 0.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from picker.cli.main import app
from picker.engine.plugins import load_strategies
from picker.inputs.workload import load_profile
from picker.recommend.costs import CostSource, choose_costs, cost
from picker.recommend.evidence_index import EvidenceIndex, evidence, index_evidence
from picker.recommend.options import options_for
from picker.recommend.scoring import bucket_speedup
from picker.recommend.table import Bucket
from policies import calibration_for, speedup

ROOT = Path(__file__).resolve().parents[1]
CAL = ROOT / "tests" / "data" / "zoo-ci-cpu-calibration-2026-12-03.json"
PROFILE = ROOT / "profiles" / "code-assistant-qwen-llamacpp.yaml"  # hardware cpu, a draft model
runner = CliRunner()


def _sources(calibrated: bool) -> tuple[EvidenceIndex, CostSource]:
    profile = load_profile(PROFILE)
    index = index_evidence(profile, None)
    if not calibrated:
        return index, choose_costs(profile, index, None)
    return index, choose_costs(profile, index, None, calibration_for(CAL, "hf", "cpu"), engine="hf")


@pytest.mark.parametrize("strategy", ["vanilla", "medusa", "eagle3", "ngram"])
def test_a_sampled_bucket_is_priced_with_the_sampling_host_terms(strategy: str) -> None:
    index, costs = _sources(calibrated=True)
    option = next(o for o in options_for(load_profile(PROFILE), load_strategies(), costs.ctx.target)
                  if o.plugin.name == strategy and not o.config.is_tree and o.config.depth == 3)
    greedy, sampled = cost(index, costs, option, 16), cost(index, costs, option, 16, True)
    # Both a plain and a speculative step pay host_s_per_seq's twin; only the speculative one pays
    # the rest, so the speculative step grows by more (ngram's lookup has no sampling twin).
    assert sampled.plain_seconds > greedy.plain_seconds
    assert sampled.draft_seconds + sampled.verify_seconds - greedy.draft_seconds - greedy.verify_seconds \
        > sampled.plain_seconds - greedy.plain_seconds
    if strategy != "ngram":
        assert sampled.draft_seconds > greedy.draft_seconds
    hot = Bucket("code", 16, 1.0, 1.0)
    alpha = evidence(index, option.plugin, "code", 1.0, option.config.depth).alpha
    assert bucket_speedup(index, costs, option, hot)[0] == pytest.approx(speedup(option.config, alpha, sampled))
    assert bucket_speedup(index, costs, option, hot)[0] != pytest.approx(speedup(option.config, alpha, greedy))


def test_without_sampling_terms_a_sampled_bucket_costs_what_a_greedy_one_does() -> None:
    index, costs = _sources(calibrated=False)  # llama_cpp's shipped curve
    option = next(o for o in options_for(load_profile(PROFILE), load_strategies(), costs.ctx.target)
                  if o.plugin.name == "vanilla")
    assert cost(index, costs, option, 16, True) == cost(index, costs, option, 16)


def _estimate(*extra: str) -> dict[str, object]:
    args = ["estimate", "--strategy", "medusa", "--alpha", "0.6", "--num-draft-tokens", "4", "--model-params",
            "1351296", "--hardware", "cpu", "--batch-size", "16", "--format", "json", *extra]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_estimate_at_a_temperature_pays_sampling_on_a_calibrated_eager_loop() -> None:
    greedy = _estimate("--engine", "hf", "--calibration", str(CAL))
    sampled = _estimate("--engine", "hf", "--calibration", str(CAL), "--temperature", "0.7")
    assert (greedy["sampled"], sampled["sampled"]) == (False, True)
    assert sampled["breakdown"]["draft_seconds"] > greedy["breakdown"]["draft_seconds"]
    assert sampled["speedup"] < greedy["speedup"] and sampled["break_even_alpha"] >= greedy["break_even_alpha"]
    shipped = [_estimate("--engine", "vllm", "--temperature", t) for t in ("0", "1")]
    assert shipped[0]["speedup"] == shipped[1]["speedup"]


def test_estimate_refuses_a_temperature_outside_0_2() -> None:
    result = runner.invoke(app, ["estimate", "--strategy", "medusa", "--alpha", "0.6", "--model-params", "8e9",
                                 "--hardware", "h100-sxm", "--temperature", "3"])
    assert result.exit_code == 2 and "--temperature" in result.output

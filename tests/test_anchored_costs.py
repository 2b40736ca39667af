"""Per-step costs measured at one concurrency, carried to other batches by the load curve.

The shipped llama.cpp deployment (``profiles/code-assistant-qwen-llamacpp.yaml``) comes with its
measured cells (``profiles/measurements/...summary.json``): llama-server reports no step timings,
so its step ratio R is read off the measured tokens/s against plain at concurrency 1
(``policies.cell_evidence.live_step_points``). Two things must follow from that one number:

* at batch 1 the plan's break-even α, its "one step costs" line and the SDK's R table say the
  measured R the speedups were scored with, not the load curve's (which is far cheaper here);
* at a larger batch R grows as the load curve's does (two cores go compute-bound at a few
  sequences) instead of staying at its batch-1 value for every batch.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from picker.engine.plugins import load_strategies
from picker.inputs.measurements import load_measurements
from picker.inputs.workload import load_profile
from picker.recommend.costs import CostSource, choose_costs, model_cost, step_cost
from picker.recommend.evidence_index import EvidenceIndex, candidate, index_evidence
from picker.recommend.measured_load import AnchoredStepCost
from picker.recommend.options import options_for
from picker.recommend.pipeline import recommend
from picker.recommend.scoring import bucket_speedup
from picker.recommend.table import Bucket, Option, buckets, ranked
from policies import break_even, step_ratio
from policies.speedup_model import draft_step_share, drafted_length

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "profiles" / "code-assistant-qwen-llamacpp.yaml"
MEASURED = ROOT / "profiles" / "measurements" / "code-assistant-qwen-llamacpp.summary.json"


Sources = tuple[EvidenceIndex, CostSource]


def _ngram(sources: Sources, n: int) -> Option:
    return next(o for o in options_for(load_profile(PROFILE), load_strategies(), sources[1].ctx.target)
                if o.plugin.name == "ngram" and not o.config.is_tree and o.config.depth == n)


@pytest.fixture(scope="module")
def sources() -> Sources:
    profile, measurements = load_profile(PROFILE), load_measurements(MEASURED)
    index = index_evidence(profile, measurements)
    return index, choose_costs(profile, index, measurements)


@pytest.mark.parametrize("n", [1, 4])
def test_measured_ratio_holds_at_its_batch_and_follows_the_load_curve_beyond(sources: Sources, n: int) -> None:
    index, costs = sources
    o = _ngram(sources, n)
    ratio = {b: step_ratio(candidate(index, costs.ctx, o, Bucket("code", b, 0.0, 1.0))) for b in (1, 4, 16)}
    model = {b: model_cost(costs, o, b).step_ratio for b in (1, 4, 16)}
    assert ratio[1] > model[1] * 1.05  # the engine is dearer than the model at batch 1: measured, not modelled
    assert ratio[1] < ratio[4] < ratio[16]  # and dearer still as the verify goes compute-bound
    assert model[1] < model[4] < model[16]
    # The drafting steps' ratio moves by the model's factor; steps that drafted nothing stay at 1.
    cand = candidate(index, costs.ctx, o, Bucket("code", 4, 0.0, 1.0))
    f = draft_step_share(cand.evidence.cost.draft_share, drafted_length(cand))
    assert 0 < f < 1
    drafting = (ratio[1] - (1 - f)) / f
    assert ratio[4] == pytest.approx(f * drafting * model[4] / model[1] + (1 - f), rel=1e-9)
    speedups = [bucket_speedup(index, costs, o, Bucket("code", b, 0.0, 1.0))[0] for b in (1, 4, 16)]
    assert speedups[0] > speedups[1] > speedups[2]  # before: the same at every batch


def test_the_step_cost_the_plan_reports_is_the_one_it_scored_with(sources: Sources) -> None:
    index, costs = sources
    o = _ngram(sources, 1)
    bs = buckets(load_profile(PROFILE))
    cost = step_cost(index, costs, o, bs, 1)
    assert isinstance(cost, AnchoredStepCost) and cost.measured_at == 1
    weights = [(b.weight, step_ratio(candidate(index, costs.ctx, o, b))) for b in bs]  # all at batch 1
    assert cost.step_ratio == pytest.approx(sum(w * r for w, r in weights) / sum(w for w, _ in weights), rel=1e-6)
    assert cost.step_ratio > model_cost(costs, o, 1).step_ratio * 1.05
    # The shipped cells (re-measured with plain and ngram N = 1 interleaved, 6 ABBA rounds per task) put
    # ngram N = 1 below plain on this deployment: the plan leaves speculation off; the option it
    # weighed, ngram N=1, was scored with that cost, and its break-even α is that cost's. (Before they
    # were re-measured the plan enabled ngram N = 1, which scripts/real_llamacpp_regret.py measured at 0.79x.)
    result = recommend(load_profile(PROFILE), load_measurements(MEASURED))
    rec = result.recommendation
    assert rec.decision.strategy == "none" and rec.predicted_speedup.mean == 1.0
    assert any("ngram, N=1" in line for line in rec.rationale), rec.rationale
    lead = ranked(result.table.rows)[0]
    assert (lead.plugin.name, lead.config.depth) == ("ngram", 1)
    assert lead.cost.step_ratio == pytest.approx(cost.step_ratio, abs=1e-3)
    alt = rec.alternatives[0]
    assert (alt.strategy, alt.num_speculative_tokens) == ("ngram", 1)
    assert alt.break_even_alpha == pytest.approx(break_even(o.config, cost), abs=1e-3)


def test_at_four_requests_the_same_measurements_leave_it_off(tmp_path: Path) -> None:
    """The same deployment serving four requests at once: the load curve prices its verify as
    compute-bound, so the batch-1 gain of 1.02x does not carry over (before this change it did,
    and the plan enabled ngram at 1.04x)."""
    doc = yaml.safe_load(PROFILE.read_text())
    doc["traffic"]["concurrency"] = [{"batch_size": 4, "weight": 1.0}]
    path = tmp_path / "np4.yaml"
    path.write_text(yaml.safe_dump(doc))
    rec = recommend(load_profile(path), load_measurements(MEASURED)).recommendation
    assert rec.decision.strategy == "none"
    assert rec.predicted_speedup.mean == 1.0


@pytest.mark.parametrize("strategy", ["vanilla", "eagle3"])
def test_one_measured_length_carries_to_others_in_the_cost_models_shape(strategy: str) -> None:
    """Timings of one chain length (no probe to split the drafting into d₀ and d): a model
    drafter's chain of 1 is not a quarter of a measured chain of 4. Its catch-up forward and
    per-sequence host work are paid at every length, and the load curve's ratio between the two
    lengths carries the measurement instead. The measured length itself is unchanged."""
    from dataclasses import replace

    from policies import CostEvidence, Evidence
    from policies.evidence import Candidate

    profile = load_profile(PROFILE)
    index = index_evidence(profile, None)
    costs = choose_costs(profile, index, None)
    caps = load_strategies()[strategy].capabilities
    cost = CostEvidence(0.4, verify=((1.0, 1.0), (5.0, 1.6)), batch=1, unsplit_units=4.0)
    split = replace(cost, unsplit_units=0.0)  # the same numbers read the old way: all per forward

    def ratio(n: int, c: CostEvidence) -> float:
        ev = Evidence(0.7, 0.7, 0.7, cost=c)
        return step_ratio(Candidate(caps, n, 1, n + 1, 0.0, 1, 1024, "code", ev, costs.ctx))

    m1 = model_cost(costs, next(o for o in options_for(profile, load_strategies(), costs.ctx.target)
                                if o.plugin.name == strategy and o.config.depth == 1 and not o.config.is_tree), 1)
    m4 = model_cost(costs, next(o for o in options_for(profile, load_strategies(), costs.ctx.target)
                                if o.plugin.name == strategy and o.config.depth == 4 and not o.config.is_tree), 1)
    assert ratio(4, cost) == pytest.approx(ratio(4, split))
    shape = m1.draft_seconds / m4.draft_seconds
    assert shape > 0.25  # the model prices a fixed part
    assert ratio(1, cost) - ratio(1, split) == pytest.approx(4 * 0.4 * shape - 0.4, rel=1e-6)

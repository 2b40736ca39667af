"""The decision: schedule merging, and behaviour of the recommendation under workload changes."""

from __future__ import annotations

from pathlib import Path

import yaml

from picker.inputs.workload import load_profile
from picker.recommend.schedule import merge_schedule
from picker.recommend.pipeline import recommend

ROOT = Path(__file__).resolve().parents[1]


def test_merge_schedule_covers_every_batch() -> None:
    assert merge_schedule([(1, 4), (2, 4), (4, 3), (8, 0)]) == [(1, 2, 4), (3, 4, 3), (5, None, 0)]
    assert merge_schedule([(1, 5)]) == [(1, None, 5)]


def _variant(tmp_path: Path, name: str, **edits) -> Path:
    data = yaml.safe_load((ROOT / "profiles" / name).read_text())
    for dotted, value in edits.items():
        node = data
        *parents, leaf = dotted.split("__")
        for key in parents:
            node = node[key]
        node[leaf] = value
    out = tmp_path / name
    out.write_text(yaml.safe_dump(data))
    return out


def test_larger_batches_predict_less(tmp_path: Path) -> None:
    small = _variant(tmp_path, "code-assistant-8b-a100.yaml", traffic__concurrency=[{"batch_size": 1, "weight": 1.0}])
    big = tmp_path / "big"
    big.mkdir()
    large = _variant(big, "code-assistant-8b-a100.yaml", traffic__concurrency=[{"batch_size": 256, "weight": 1.0}])
    assert recommend(load_profile(small)).recommendation.predicted_speedup.mean > recommend(load_profile(large)).recommendation.predicted_speedup.mean


def test_no_drafters_and_no_lookup_means_off(tmp_path: Path) -> None:
    path = _variant(tmp_path, "code-assistant-8b-a100.yaml",
                    drafters={"allow_ngram": False, "allow_lookahead": False, "disabled": ["suffix"]})
    rec = recommend(load_profile(path)).recommendation
    assert rec.decision.strategy == "none"
    assert rec.decision.batch_schedule[0].num_speculative_tokens == 0
    assert rec.engine_configs == {}


def test_missing_head_is_not_deployed(tmp_path: Path) -> None:
    path = _variant(tmp_path, "chat-70b-h100.yaml", drafters={"allow_ngram": True, "allow_lookahead": True,
                                                              "draft_model": {"name": "d", "params_b": 1.24}})
    rec = recommend(load_profile(path)).recommendation
    assert rec.decision.strategy != "eagle3"
    eagle = [c for c in rec.alternatives if c.strategy == "eagle3"]
    assert eagle and not eagle[0].feasible


def test_batch_schedule_never_lengthens() -> None:
    for profile in sorted((ROOT / "profiles").glob("*.yaml")):
        ks = [r.num_speculative_tokens for r in recommend(load_profile(profile)).recommendation.decision.batch_schedule]
        assert ks == sorted(ks, reverse=True), (profile.name, ks)
        assert max(ks) == recommend(load_profile(profile)).recommendation.decision.num_speculative_tokens


def test_tight_itl_slo_excludes_slow_steps(tmp_path: Path) -> None:
    # A p99 ITL target plain decoding meets (21 ms a step at batch 1, no prefill in a gap) and the
    # best option's 27 ms step breaks: it is infeasible, with the reason (picker.recommend.latency),
    # and what is deployed meets the target.
    path = _variant(tmp_path, "chat-70b-h100.yaml", slo={"itl_p99_ms": 23.0},
                    traffic__concurrency=[{"batch_size": 1, "weight": 1.0}])
    rec = recommend(load_profile(path)).recommendation
    (check,) = rec.latency.slo if rec.latency is not None else ()
    assert check.met_by_plain and check.met_by_deployed and check.deployed_ms <= 23.0
    assert rec.decision.strategy != "eagle3"
    (eagle,) = [c for c in rec.alternatives if c.strategy == "eagle3"]
    assert not eagle.feasible
    assert any(n.startswith("it breaks the 23 ms p99 ITL SLO that plain decoding meets") for n in eagle.notes)


def test_temperature_switch_keeps_speculation_where_the_workload_runs(tmp_path: Path) -> None:
    """Evidence that is worse at low temperature than at the workload's own (the draft model
    measured at α = 0.9 at T = 1, at 0.05 at T = 0, where drafting then costs more than it
    saves): the switch is the highest temperature at which speculation still pays, scanned from
    the top. Scanning up from T = 0 stopped at the first dip and switched this T = 1 workload off
    above 0 (predicted 1.0x instead of ~2x)."""
    from picker.inputs.measurements import Measurements

    path = _variant(tmp_path, "creative-writing.yaml", drafters__allow_ngram=False,
                    traffic__temperature=[{"value": 1.0, "weight": 1.0}])
    cells = [{"task": task, "strategy": "vanilla", "temperature": t, "alpha": a, "alpha_ci": [a - 0.01, a + 0.01],
              "samples": 40, "num_draft_tokens": 4}
             for task in ("creative", "chat") for t, a in ((0.0, 0.05), (1.0, 0.9))]
    rec = recommend(load_profile(path), Measurements.model_validate({"cells": cells})).recommendation
    switch = rec.decision.temperature_switch
    assert rec.decision.strategy == "vanilla" and rec.predicted_speedup.mean > 1.5, switch
    assert switch.above is None or switch.above >= 1.0, switch


class _Curve:
    """A scored option reduced to what the switch reads: speedup = 2 - T - batch/100 (pure numbers)."""

    def scored_at(self, bs, batch=None, temperature=None) -> bool:
        return True

    def speedup_at(self, bs, batch=None, temperature=None, which=0) -> float:
        b = 1 if batch is None else batch
        t = 0.0 if temperature is None else temperature
        return 2.0 - t - b / 100.0


def test_a_batch_range_gets_its_own_lower_temperature_switch() -> None:
    from picker.recommend.schedule import range_switch as _range_switch
    from picker.recommend.schedule import temperature_switch

    curve = _Curve()
    overall = temperature_switch(curve, [], None)  # type: ignore[arg-type]
    assert overall.above == 0.9  # 2 - 0.9 - 0.01 >= 1 > 2 - 1.0 - 0.01
    assert temperature_switch(curve, [], 50).above == 0.5  # type: ignore[arg-type]
    assert _range_switch(curve, [], 50, overall) == 0.5  # type: ignore[arg-type]
    assert _range_switch(curve, [], 1, overall) is None  # type: ignore[arg-type]  # same as the global one


def test_schedule_ranges_say_when_their_range_does_not_decide() -> None:
    """Uncertain: the range's low end does not clear the bar while its high end reaches 1.0x; where
    the engine switches by batch size such a range is off and names its measurement."""
    from picker.recommend.uncertainty import ENABLE_LOW

    for profile in sorted((ROOT / "profiles").glob("*.yaml")):
        rec = recommend(load_profile(profile)).recommendation
        for r in rec.decision.batch_schedule:
            if rec.decision.strategy == "none":
                if r.uncertain:  # off because nothing is sure to pay: the range and the measurement say why
                    assert r.predicted_speedup_range is not None and r.measure
                    assert r.predicted_speedup_range[0] < ENABLE_LOW
                else:  # nothing scored on the batch grid
                    assert r.predicted_speedup_range is None
                continue
            assert r.predicted_speedup_range is not None
            low, high = r.predicted_speedup_range
            assert low <= high
            if r.uncertain:
                assert low < ENABLE_LOW and r.measure
            if r.num_speculative_tokens == 0:
                assert r.disable_above_temperature is None
                assert r.uncertain == (low < ENABLE_LOW and high >= 1.0)
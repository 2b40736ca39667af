"""bench/load/measured: the load curve against a profile's own curves prices what the profile
measured -- whole waves, the prefill included, at each task's own context."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.load.measured import Workload, predict, workloads
from picker.inputs.hardware import get_hardware
from policies.loadcurve import engine_curve
from policies.roofline import ModelShape

TARGET = ModelShape.from_params(1.35e6, 4.0)
ENTRY = {"task": "summarization", "temperature": 0.0, "strategy": "ngram", "num_draft_tokens": 4, "tree": None,
         "gain": [[1, 1.9], [4, 1.5], [16, 1.1]]}


def _cells(level: int) -> dict[str, object]:
    return {"task": "summarization", "strategy": "ngram", "temperature": 0.0, "num_draft_tokens": 4, "tree": None,
            "concurrency": level, "decode_steps": 100, "draft_steps": 80, "draft_tokens": 320}


def test_records_give_each_task_its_prompt_length_per_generation(tmp_path: Path) -> None:
    (tmp_path / "run.json").write_text(json.dumps({"max_new_tokens": 48}))
    rows = [{"cell": {"task": "rag"}, "extra": {"prompt_tokens": 600, "turns": 2}},
            {"cell": {"task": "rag"}, "extra": {"prompt_tokens": 200, "turns": 1}},
            {"cell": {"task": "chat"}, "extra": {}},  # a record from before prompt_tokens: no entry
            {"cell": {"task": "chat"}, "event": "stop"}]
    (tmp_path / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    work = workloads(tmp_path)
    assert work == {"rag": Workload(250.0, 48)} and work["rag"].context == 274


def test_the_anchor_holds_and_a_long_prompt_pulls_the_gain_towards_one() -> None:
    hw, curve = get_hardware("cpu"), engine_curve("hf")
    cells = [_cells(c) for c in (1, 4, 16)]
    decode = predict(ENTRY, TARGET, None, curve, hw, cells, Workload(None, 32))
    short = predict(ENTRY, TARGET, None, curve, hw, cells, Workload(20.0, 32))
    long = predict(ENTRY, TARGET, None, curve, hw, cells, Workload(2000.0, 32))
    for check in (decode, short, long):
        assert check.predicted[0] == pytest.approx(1.9)  # E[L] is fixed at the smallest level
    # The prefill is the same in both systems: the longer it is, the closer to 1 the gain stays
    # wherever the decode-only gain moves.
    assert abs(long.predicted[-1] - 1.0) < abs(short.predicted[-1] - 1.0)
    assert decode.predicted != short.predicted


def test_a_sampled_curve_pays_the_sampling_host_terms_and_a_greedy_one_does_not() -> None:
    """At T > 0 both systems sample; what sampling adds to a speculative step per sequence makes the
    gain fall faster with concurrency once the anchor at C = 1 has absorbed its batch-1 share."""
    from policies.loadcurve import with_constants

    hw, base = get_hardware("cpu"), engine_curve("hf")
    loop = with_constants(base, sampling_spec_host_s_per_seq=2e-4)
    cells = [_cells(c) for c in (1, 4, 16)]
    sampled = {**ENTRY, "temperature": 1.0}
    greedy = predict(ENTRY, TARGET, None, loop, hw, cells, Workload(20.0, 32))
    assert greedy.predicted == predict(ENTRY, TARGET, None, base, hw, cells, Workload(20.0, 32)).predicted
    warm = predict(sampled, TARGET, None, loop, hw, [{**c, "temperature": 1.0} for c in cells], Workload(20.0, 32))
    assert warm.predicted[0] == pytest.approx(1.9)
    assert warm.predicted[-1] < greedy.predicted[-1] - 0.01

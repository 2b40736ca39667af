"""``specpick check-load`` (``picker.profiler.load_check``): the load curve against a profile's own
curves prices what the profile measured -- whole waves, the prefill included, at each task's own
context, each wave as long as its slowest request and its prefill padded to its longest prompt."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from picker.inputs.hardware import get_hardware
from picker.profiler.load_check import Request, Workload, predict, requests, serve_time, workloads
from picker.profiler.records import CellKey, Record, stamp_wave
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


def _gen(prompt: int, c: int, steps: int, fed: int, turns: int = 1, task: str = "code") -> str:
    cell = CellKey(task, "ngram", 0.0, 4, concurrency=c)
    rec = Record(cell=cell, prompt_ids=(f"{task}-{prompt}",), tokens=32, forwards=steps + 1, steps=steps,
                 extra={"prompt_tokens": fed, "turns": turns})
    start = prompt - prompt % c  # the runner's wave id names the wave's first prompt
    return stamp_wave(rec, f"{cell.id}#{start}#ab12cd34", 0.0).to_json()


def test_requests_come_back_in_the_runs_prompt_order_and_multi_turn_cells_are_left_out(tmp_path: Path) -> None:
    # A resumed run appends its waves out of order: prompts 2-3 were measured before 0-1.
    rows = [_gen(2, 2, 9, 40), _gen(3, 2, 12, 41), _gen(0, 2, 7, 50), _gen(1, 2, 14, 51),
            _gen(0, 1, 7, 50, turns=2, task="chat")]
    (tmp_path / "records.jsonl").write_text("".join(r + "\n" for r in rows))
    got = requests(tmp_path)
    assert got == {("code", "ngram", 0.0, 4, None, 2): [Request(7, 50), Request(14, 51), Request(9, 40),
                                                         Request(12, 41)]}


def test_a_wave_lasts_as_long_as_its_slowest_request() -> None:
    """Same mean steps, one spread and one even: at C = 1 both are the anchor; at C > 1 the spread
    wave keeps paying steps after its short requests left, so its gain is lower, while requests of
    equal length give the mean model's prediction."""
    hw, curve = get_hardware("cpu"), engine_curve("hf")
    cells = [_cells(c) for c in (1, 4, 16)]
    even = [Request(12, 20)] * 16
    spread = [Request(s, 20) for s in (6, 18) * 8]
    mean = predict(ENTRY, TARGET, None, curve, hw, cells, Workload(20.0, 32))
    flat = predict(ENTRY, TARGET, None, curve, hw, cells, Workload(20.0, 32), even)
    tail = predict(ENTRY, TARGET, None, curve, hw, cells, Workload(20.0, 32), spread)
    assert flat.predicted == pytest.approx(mean.predicted)
    assert tail.predicted[0] == pytest.approx(1.9)
    assert tail.predicted[1] < flat.predicted[1] - 0.02 and tail.predicted[2] < flat.predicted[2] - 0.02


def test_a_waves_prefill_is_padded_to_its_longest_prompt() -> None:
    """Only the longest prompt of a wave sets its prefill: waves of 16 with one 400-token prompt
    among 20-token ones price as waves of 400-token prompts at every level (the anchor at C = 16
    included), and longer prefills pull the gain towards 1."""
    hw, curve = get_hardware("cpu"), engine_curve("hf")
    entry = {**ENTRY, "gain": [[16, 1.5], [32, 1.2]]}
    cells = [_cells(c) for c in (16, 32)]
    one_long = [Request(12, 400 if i % 16 == 0 else 20) for i in range(32)]
    all_long = [Request(12, 400)] * 32
    short = [Request(12, 20)] * 32
    at = {name: predict(entry, TARGET, None, curve, hw, cells, Workload(20.0, 32), reqs).predicted
          for name, reqs in (("one", one_long), ("all", all_long), ("short", short))}
    assert at["one"] == pytest.approx(at["all"])
    assert abs(at["all"][-1] - 1.0) < abs(at["short"][-1] - 1.0)


def test_refilled_waves_are_priced_join_by_join() -> None:
    """``--wave-rounds``: a freed row takes the wave's next prompt, prefilled in a forward of its own
    (padded to the longest prompt joining then) while the running rows wait, as the loop serves it."""
    reqs = [(1, 10), (3, 30), (1, 20), (2, 40)]  # (decode steps, prompt tokens)
    prefill, step = (lambda b, p: (b * p, 0.0)), (lambda b: float(b))
    # One wave of four, two in flight: prefill A+B (2 x 30), step both (A leaves), C joins alone (20),
    # step both (C leaves), D joins alone (40), step both (B leaves), D's last step alone.
    assert serve_time(2, 4, reqs, prefill, step) == (120.0, 0.0, 7.0)
    # Two static waves: each prefill padded to its wave's longest prompt, each wave drains.
    assert serve_time(2, 2, reqs, prefill, step) == (140.0, 0.0, 7.0)

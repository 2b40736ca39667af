"""Tests of the vLLM benchmarks (``bench/regret/vllm.py``, ``vllm_profile.py``): the one folder under
``tests/`` whose tests import ``bench`` -- the package and its tests never do."""

from __future__ import annotations

import pytest


def test_vllm_profile_rows_become_cells_with_per_position_acceptance_and_speedup() -> None:
    """Rows as bench/regret/vllm.py records them (counter deltas from /metrics) -> summary cells, through
    the profiler's conversion (the figures the bench's own conversion gave before it was replaced)."""
    from bench.regret.vllm_profile import cells_from_rows, per_pos_key
    from picker.inputs.measurements import Measurements
    from picker.profiler.vllm import ACCEPTED, DRAFT_TOKENS, DRAFTS
    from policies.cell_evidence import draft_share

    counters = {DRAFTS: 20.0, DRAFT_TOKENS: 40.0, ACCEPTED: 30.0, per_pos_key(0): 18.0, per_pos_key(1): 12.0}
    rows = [{"config": "plain", "workload": "code@T=0", "pass": 0, "tokens": 96, "wall_s": 2.0, "counters": {}},
            {"config": "ngram N=2", "workload": "code@T=0", "pass": 0, "tokens": 96, "wall_s": 1.0,
             "counters": counters}]
    (cell,) = cells_from_rows(rows, max_new_tokens=48)
    assert (cell["task"], cell["strategy"], cell["temperature"], cell["num_draft_tokens"]) == ("code", "ngram", 0.0, 2)
    # The profiler's own conversion: one row is one wave, the unit of the interval.
    assert cell["samples"] == 1 and cell["speedup_vs_plain"] == pytest.approx(2.0)
    assert cell["per_position"] == pytest.approx([18 / 20, 12 / 18])
    assert cell["alpha_iid"] == pytest.approx(30 / 38) and cell["tau"] == pytest.approx(2.5)
    assert cell["decode_steps"] == 96 - 2 - 30
    # 20 of the 64 steps drafted (prompt lookup drafts only on a match): phi is their output's share,
    # (20 + 30) / 94, not 1 -- with phi = 1 the scorer gave every step tau's 2.5 tokens.
    assert (cell["draft_steps"], cell["draft_tokens"], cell["accepted_tokens"]) == (20, 40, 30)
    assert draft_share(cell) == pytest.approx(50 / 94)
    Measurements.model_validate({"cells": [cell]})                     # what recommend reads


def test_vllm_runs_resume_by_configuration() -> None:
    from bench.regret.vllm import plan_groups

    fresh = plan_groups(["a", "b", "c"], [], 2)
    assert fresh == [(0, ["a", "b"]), (1, ["c"])]
    done = [{"config": c, "group": g} for g, cs in fresh for c in ("plain", *cs)]
    assert plan_groups(["a", "b", "c"], done, 2) == []
    # A new choice inserted before measured ones gets its own new group; nothing is re-measured.
    assert plan_groups(["a", "a2", "b", "c"], done, 2) == [(2, ["a2"])]


def test_vllm_metrics_page_becomes_flat_counters() -> None:
    """vLLM's Prometheus text (per-engine labels summed away, one series per draft position)."""
    from bench.regret.vllm import spec_counters
    from bench.regret.vllm_profile import per_pos_key
    from picker.profiler.vllm import ACCEPTED, DRAFTS, PER_POS

    text = "\n".join([
        "# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.",
        f'{DRAFTS}{{engine="0",model_name="m"}} 10.0',
        f'{ACCEPTED}{{engine="0",model_name="m"}} 12.0',
        f'{PER_POS}{{engine="0",model_name="m",position="0"}} 8.0',
        f'{PER_POS}{{engine="0",model_name="m",position="1"}} 4.0',
        'vllm:num_requests_running{engine="0",model_name="m"} 1.0',
    ])
    assert spec_counters(text) == {DRAFTS: 10.0, ACCEPTED: 12.0, per_pos_key(0): 8.0, per_pos_key(1): 4.0}
    assert spec_counters('vllm:num_requests_running{engine="0"} 1.0') == {}

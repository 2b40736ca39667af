"""Engine configs: SGLang's shape rules (ours, since SGLang only enforces some at run time), the
vLLM / TensorRT-LLM schedule encodings, and engines without an algorithm for a strategy."""

from __future__ import annotations

import json

import pytest

from picker.engine_configs import (
    ScheduleEntry, _trt_schedule, _vllm_schedule, build_engine_configs, check_sglang_tree, sglang_args,
)
from picker.plugins import load_strategies


@pytest.mark.parametrize("steps, topk, tokens", [(3, 1, 4), (5, 4, 8), (4, 2, 9), (1, 1, 2), (8, 8, 64)])
def test_valid_sglang_trees(steps: int, topk: int, tokens: int) -> None:
    check_sglang_tree(steps, topk, tokens)
    args = sglang_args("EAGLE3", num_steps=steps, topk=topk, num_draft_tokens=tokens, draft_path="h")
    # All three tree flags together, never one alone (SGLang asserts on partial settings).
    assert {"--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens"} <= set(args)


@pytest.mark.parametrize("steps, topk, tokens, why", [
    (3, 1, 5, "steps + 1"),           # topk 1 forces tokens = steps + 1
    (3, 4, 64, "steps * topk + 1"),   # passes SGLang's resolution, fails at run time
    (0, 1, 1, ">= 1"),
])
def test_invalid_sglang_trees(steps: int, topk: int, tokens: int, why: str) -> None:
    with pytest.raises(ValueError, match=why.replace("*", r"\*").replace("+", r"\+")):
        check_sglang_tree(steps, topk, tokens)


def test_ngram_keeps_a_chain() -> None:
    args = sglang_args("NGRAM", num_steps=4, topk=1, num_draft_tokens=5, draft_path=None)
    assert args[:2] == ["--speculative-algorithm", "NGRAM"]
    assert args[args.index("--speculative-ngram-max-bfs-breadth") + 1] == "1"
    assert "--speculative-draft-model-path" not in args


SCHEDULE = [ScheduleEntry(1, 8, 5), ScheduleEntry(9, 32, 3), ScheduleEntry(33, None, 0)]


def test_vllm_schedule_encoding() -> None:
    assert _vllm_schedule(SCHEDULE) == [[1, 8, 5], [9, 32, 3], [33, 1024, 0]]


def test_trt_schedule_maps_upper_bounds_and_stops_after() -> None:
    sched, conc = _trt_schedule(SCHEDULE)
    assert sched == {8: 5, 32: 3} and conc is None  # batch 33+ runs without speculation
    sched, conc = _trt_schedule([ScheduleEntry(1, 64, 4), ScheduleEntry(65, None, 0)])
    assert sched is None and conc == 64  # one length: max_concurrency says it all


def test_medusa_has_no_sglang_algorithm_and_says_so() -> None:
    plugin = load_strategies()["medusa"]
    cfgs = build_engine_configs(strategy="medusa", engines=plugin.capabilities.engines, num_speculative_tokens=4,
                                tree=(4, 4, 16), schedule=[ScheduleEntry(1, None, 4)], draft_path="heads")
    assert cfgs["sglang"]["supported"] is False and "no algorithm" in cfgs["sglang"]["reason"]
    assert cfgs["vllm"]["speculative_config"]["method"] == "medusa"
    assert cfgs["tensorrt_llm"]["speculative_config"]["decoding_type"] == "Medusa"
    assert "verifies chains only" in cfgs["vllm"]["note"]


def test_every_strategy_builds_for_every_engine() -> None:
    for name, plugin in load_strategies().items():
        cfgs = build_engine_configs(strategy=name, engines=plugin.capabilities.engines, num_speculative_tokens=3,
                                    tree=None, schedule=SCHEDULE, draft_path="d" if plugin.capabilities.artifact else None)
        for engine, cfg in cfgs.items():
            assert cfg["version"]
            if not cfg["supported"]:
                continue
            if engine == "vllm":
                spec = json.loads(cfg["args"][1])
                assert spec == cfg["speculative_config"]
                assert spec["num_speculative_tokens_per_batch_size"] == _vllm_schedule(SCHEDULE)
            if engine == "sglang":
                assert cfg["args"][1] == plugin.capabilities.engines["sglang"]


def test_sglang_adaptive_only_for_eagle_chains() -> None:
    caps = load_strategies()["eagle3"].capabilities
    chain = build_engine_configs(strategy="eagle3", engines=caps.engines, num_speculative_tokens=5, tree=None,
                                 schedule=SCHEDULE, draft_path="h")
    assert chain["sglang"]["adaptive_config"]["candidate_steps"] == [3, 5]
    assert "--speculative-adaptive-config" in chain["sglang"]["args"]
    tree = build_engine_configs(strategy="eagle3", engines=caps.engines, num_speculative_tokens=5,
                                tree=(5, 4, 16), schedule=SCHEDULE, draft_path="h")
    assert "adaptive_config" not in tree["sglang"]  # SGLang's adaptive mode needs topk == 1

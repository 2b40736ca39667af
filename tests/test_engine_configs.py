"""Engine configs: SGLang's shape rules (ours, since SGLang only enforces some at run time), the
batch-schedule encodings of each engine version, engines without an algorithm for a strategy, the
versions a profile names, and the plugin hook every strategy writes its config through. What the
engines' own code says about these configs is in ``tests/engines/``."""

from __future__ import annotations

import json

import pytest

from picker.engine.deploy import DeployRequest, EngineConfig, check_sglang_tree, in_range, sglang_tree_flags
from picker.engine.plugins import Capabilities, PluginError, StrategyPlugin, check_plugin, load_strategies
from picker.engine.tree_shapes import medusa_choices
from picker.recommend.engine_configs import (
    ENGINE_VERSIONS,
    OPEN_BATCH,
    ScheduleEntry,
    build_engine_configs,
    resolve_version,
    sglang_adaptive_config,
    trt_schedule,
    vllm_schedule,
)

SCHEDULE = [ScheduleEntry(1, 8, 5), ScheduleEntry(9, 32, 3), ScheduleEntry(33, None, 0)]
PLUGINS = load_strategies(only_builtin=True)


def _cfgs(strategy: str, n: int = 5, tree: tuple[int, int, int] | None = None,
          schedule: list[ScheduleEntry] | None = None, draft: str | None = "d",
          versions: dict[str, str] | None = None) -> dict:
    return build_engine_configs(strategy=strategy, plugin=PLUGINS[strategy], num_speculative_tokens=n, tree=tree,
                                schedule=schedule or [ScheduleEntry(1, None, n)], draft_path=draft, versions=versions)


@pytest.mark.parametrize("steps, topk, tokens", [(3, 1, 4), (5, 4, 8), (4, 2, 9), (1, 1, 2), (8, 8, 64)])
def test_valid_sglang_trees(steps: int, topk: int, tokens: int) -> None:
    check_sglang_tree(steps, topk, tokens)
    args = _cfgs("eagle3", n=steps, tree=(steps, topk, tokens))["sglang"]["args"]
    # All three tree flags together, never one alone (SGLang asserts on partial settings).
    assert list(sglang_tree_flags(steps, topk, tokens)) == args[4:10]


@pytest.mark.parametrize("steps, topk, tokens, why", [
    (3, 1, 5, "steps + 1"),           # topk 1 forces tokens = steps + 1
    (3, 4, 64, "steps * topk + 1"),   # passes SGLang's resolution, fails at run time
    (0, 1, 1, ">= 1"),
])
def test_invalid_sglang_trees(steps: int, topk: int, tokens: int, why: str) -> None:
    with pytest.raises(ValueError, match=why.replace("*", r"\*").replace("+", r"\+")):
        check_sglang_tree(steps, topk, tokens)


def _plugin(engines: dict[str, str | None], hooks: dict | None = None) -> StrategyPlugin:
    return StrategyPlugin(name="outside", summary="a plugin declared in a test",
                          capabilities=Capabilities(deterministic_draft=True, draft_cost="cpu_lookup", engines=engines),
                          engine_configs=hooks or {})


def _outside(plugin: StrategyPlugin, **kw: object) -> dict:
    return build_engine_configs(strategy="outside", plugin=plugin, num_speculative_tokens=3, tree=None,
                                schedule=[ScheduleEntry(1, None, 3)], draft_path=None, **kw)  # type: ignore[arg-type]


def test_unknown_sglang_algorithm_is_refused_with_the_engines_that_can() -> None:
    cfgs = _outside(_plugin({"sglang": "MEDUSA", "vllm": "ngram"}))
    assert cfgs["sglang"]["supported"] is False
    assert "no algorithm 'MEDUSA'" in cfgs["sglang"]["reason"] and "vllm" in cfgs["sglang"]["reason"]


def test_a_plugin_without_hooks_gets_each_engines_generic_config() -> None:
    cfgs = _outside(_plugin({"sglang": "NGRAM", "vllm": "ngram", "tensorrt_llm": "NGram", "llama_cpp": "ngram-mod"}))
    assert cfgs["vllm"]["speculative_config"] == {"method": "ngram", "num_speculative_tokens": 3}
    assert cfgs["tensorrt_llm"]["speculative_config"] == {"decoding_type": "NGram", "max_draft_len": 3}
    assert cfgs["llama_cpp"]["args"] == ["--spec-type", "ngram-mod", "--spec-draft-n-max", "3"]
    assert cfgs["sglang"]["args"][:2] == ["--speculative-algorithm", "NGRAM"]


def test_a_plugin_hook_writes_its_own_config_and_the_engine_finishes_it() -> None:
    seen: list[DeployRequest] = []

    def vllm(req: DeployRequest) -> EngineConfig:
        seen.append(req)
        return EngineConfig(config={"method": "custom_class", "model": "pkg.Proposer",
                                    "num_speculative_tokens": req.depth}, versions=">=0.22.0",
                            approximation="a test says so")

    plugin = _plugin({"vllm": "custom_class"}, {"vllm": vllm})
    check_plugin(plugin)
    cfg = build_engine_configs(strategy="outside", plugin=plugin, num_speculative_tokens=4, tree=None,
                               schedule=[ScheduleEntry(1, 8, 4), ScheduleEntry(9, None, 2)], draft_path=None)["vllm"]
    assert seen[0].algorithm == "custom_class" and seen[0].depth == 4 and seen[0].version == ENGINE_VERSIONS["vllm"]
    assert cfg["speculative_config"]["model"] == "pkg.Proposer"
    # Engine-wide: the batch schedule (vLLM >= 0.24.0), the versions, the caveat.
    assert cfg["speculative_config"]["num_speculative_tokens_per_batch_size"] == [[1, 8, 4], [9, OPEN_BATCH, 2]]
    assert cfg["valid_for"] == ">=0.24.0,<0.33.0" and cfg["approximation"] == "a test says so"


def test_a_hook_for_an_engine_the_capabilities_do_not_name_fails_at_registration() -> None:
    with pytest.raises(PluginError, match="does not name"):
        check_plugin(_plugin({"vllm": "ngram"}, {"sglang": "pkg.mod:sglang"}))


def test_ngram_keeps_a_chain_with_0523_flags() -> None:
    args = _cfgs("ngram", n=4, draft=None)["sglang"]["args"]
    flags = dict(zip(args[::2], args[1::2]))
    assert flags["--speculative-algorithm"] == "NGRAM" and flags["--speculative-num-draft-tokens"] == "5"
    assert flags["--speculative-ngram-min-bfs-breadth"] == flags["--speculative-ngram-max-bfs-breadth"] == "1"
    # SGLang derives topk and steps for NGRAM; the match-window flags of older versions are gone in 0.5.23.
    assert not {"--speculative-num-steps", "--speculative-eagle-topk", "--speculative-draft-model-path"} & set(flags)
    assert not any("match-window" in a for a in args)
    long = _cfgs("ngram", n=24, draft=None)["sglang"]["args"]
    assert long[long.index("--speculative-ngram-max-trie-depth") + 1] == "25"


def test_sglang_adaptive_config_is_keyed_by_range_start() -> None:
    # SGLang 0.5.23 routes a batch to the largest integer key <= it; step 0 turns speculation off.
    assert sglang_adaptive_config(SCHEDULE) == {"1": {"candidate_steps": [5]}, "9": {"candidate_steps": [3]},
                                                "33": {"candidate_steps": [0]}}
    assert sglang_adaptive_config([ScheduleEntry(1, None, 4)]) is None


def test_sglang_adaptive_only_for_eagle_chains() -> None:
    chain = _cfgs("eagle3", schedule=SCHEDULE)["sglang"]
    assert chain["adaptive_config"] == sglang_adaptive_config(SCHEDULE)
    assert chain["args"][-3:] == ["--speculative-adaptive", "--speculative-adaptive-config",
                                  "speculative_adaptive.json"]
    # Its steps must be one of the candidates, or SGLang refuses to start.
    assert chain["args"][chain["args"].index("--speculative-num-steps") + 1] == "5"
    tree = _cfgs("eagle3", tree=(5, 4, 16), schedule=SCHEDULE)["sglang"]
    assert "adaptive_config" not in tree and "topk > 1" in tree["note"]
    standalone = _cfgs("vanilla", schedule=SCHEDULE)["sglang"]
    assert "adaptive_config" not in standalone and "no batch-size schedule for STANDALONE" in standalone["note"]


def test_vllm_schedule_encoding() -> None:
    assert vllm_schedule(SCHEDULE) == [[1, 8, 5], [9, 32, 3], [33, OPEN_BATCH, 0]]
    # An open range starting above the usual cap still has end >= start (vLLM rejects start > end).
    assert vllm_schedule([ScheduleEntry(1, 99_999, 2), ScheduleEntry(100_000, None, 1)])[-1] == [100_000, 100_000, 1]


def test_trt_schedule_keys_are_range_ends_and_exclusive_with_max_concurrency() -> None:
    assert trt_schedule(SCHEDULE, 5) == ({8: 5, 32: 3}, None)  # batch 33+ is implicitly off
    assert trt_schedule([ScheduleEntry(1, 64, 4), ScheduleEntry(65, None, 0)], 4) == (None, 64)
    assert trt_schedule([ScheduleEntry(1, 8, 4), ScheduleEntry(9, None, 2)], 4) == ({8: 4, OPEN_BATCH: 2}, None)
    assert trt_schedule([ScheduleEntry(1, None, 4)], 4) == (None, None)
    with pytest.raises(ValueError, match="smallest batch range"):
        trt_schedule([ScheduleEntry(1, 8, 2), ScheduleEntry(9, None, 4)], 4)


def _check_trt_rules(spec: dict) -> None:
    """TensorRT-LLM 1.4 DecodingBaseConfig / EagleDecodingConfig validators, restated."""
    sched = spec.get("draft_len_schedule")
    assert not (sched and spec.get("max_concurrency") is not None), "mutually exclusive"
    if sched:
        assert all(k >= 1 and v >= 0 for k, v in sched.items())
        assert sched[min(sched)] == spec["max_draft_len"], "smallest key must map to max_draft_len"
        assert max(sched.values()) <= spec["max_draft_len"]
    if spec.get("use_dynamic_tree"):
        assert spec["dynamic_tree_max_topK"] > 0
        depth, topk = spec["max_draft_len"], spec["dynamic_tree_max_topK"]
        assert depth <= spec["max_total_draft_tokens"] <= depth * topk
        assert "draft_len_schedule" not in spec and "max_concurrency" not in spec  # linear drafting only


@pytest.mark.parametrize("tree", [None, (5, 4, 16), (3, 8, 8)])
@pytest.mark.parametrize("strategy", sorted(PLUGINS))
def test_every_strategy_builds_for_every_engine(strategy: str, tree: tuple[int, int, int] | None) -> None:
    caps = PLUGINS[strategy].capabilities
    n = tree[0] if tree else 5
    schedule = [ScheduleEntry(1, 8, n), ScheduleEntry(9, 32, n - 2), ScheduleEntry(33, None, 0)]
    cfgs = _cfgs(strategy, n=n, tree=tree if caps.tree else None, schedule=schedule,
                 draft="d" if caps.artifact else None)
    assert set(cfgs) == set(ENGINE_VERSIONS)
    for engine, cfg in cfgs.items():
        assert cfg["version"] == ENGINE_VERSIONS[engine]
        if not cfg["supported"]:
            assert caps.engines.get(engine) is None and "has no algorithm" in cfg["reason"]
            continue
        if engine == "sglang":
            assert cfg["args"][1] == caps.engines["sglang"]
        elif engine == "vllm":
            spec = json.loads(cfg["args"][1])
            assert spec == cfg["speculative_config"] and spec["method"] == caps.engines["vllm"]
            assert spec["num_speculative_tokens"] == n
            assert spec["num_speculative_tokens_per_batch_size"] == vllm_schedule(schedule)
        elif engine == "tensorrt_llm":
            assert cfg["speculative_config"]["decoding_type"] == caps.engines["tensorrt_llm"]
            _check_trt_rules(cfg["speculative_config"])
        else:
            assert "--spec-type" in cfg["args"] and "--draft-max" not in cfg["args"]


def test_medusa_has_no_sglang_algorithm_and_offers_vllm_and_trt() -> None:
    cfgs = _cfgs("medusa", n=4, tree=(4, 4, 16), draft="heads")
    reason = cfgs["sglang"]["reason"]
    assert cfgs["sglang"]["supported"] is False and "0.5.23" in reason and "vllm" in reason and "tensorrt_llm" in reason
    assert cfgs["vllm"]["speculative_config"]["method"] == "medusa"
    assert "verifies chains only" in cfgs["vllm"]["note"]
    trt = cfgs["tensorrt_llm"]["speculative_config"]
    assert trt["decoding_type"] == "Medusa" and len(trt["medusa_choices"]) == 15 == trt["max_draft_len"]
    assert trt["num_medusa_heads"] == 4


def test_default_medusa_tree_is_connected_and_bounded() -> None:
    tree = medusa_choices(depth=4, topk=3, nodes=20)
    assert len(tree) == len({tuple(p) for p in tree}) == 20
    assert all(len(p) <= 4 and max(p) < 3 for p in tree)
    assert all(p[:-1] in tree for p in tree if len(p) > 1)  # every node's parent is in the tree


def test_llama_cpp_flags_of_the_pinned_build() -> None:
    draft = _cfgs("vanilla", n=4, draft="d.gguf")["llama_cpp"]["args"]
    assert draft == ["-md", "d.gguf", "--spec-type", "draft-simple", "--spec-draft-n-max", "4"]
    ngram = _cfgs("ngram", n=6, draft=None)["llama_cpp"]["args"]
    # ngram-simple drafts --spec-ngram-simple-size-m tokens and ignores --spec-draft-n-max.
    assert ngram[ngram.index("--spec-ngram-simple-size-m") + 1] == "6"
    # ngram-simple proposes nothing when size_m < size_n (common/ngram-map.cpp): short chains look up
    # no more tokens than they draft.
    for n in (1, 2, 3, 8):
        args = _cfgs("ngram", n=n, draft=None)["llama_cpp"]["args"]
        size_n = int(args[args.index("--spec-ngram-simple-size-n") + 1])
        assert 1 <= size_n <= int(args[args.index("--spec-ngram-simple-size-m") + 1]) == n


def test_schedule_deeper_than_the_deployed_depth_is_refused() -> None:
    with pytest.raises(ValueError, match="deployed depth"):
        _cfgs("eagle3", n=3, schedule=[ScheduleEntry(1, None, 5)])


# --- versions ------------------------------------------------------------------------------------

def test_version_order_and_ranges() -> None:
    assert in_range("0.10.1", ">=0.10.1,<0.11.0") and not in_range("0.11.0", ">=0.10.1,<0.11.0")
    assert in_range("1.4.0rc4", ">=1.4.0rc4,<1.5.0") and not in_range("1.3.2", ">=1.4.0rc4")
    assert in_range("0.10.1.1.post2", ">=0.10.1,<0.10.2")
    assert in_range("b1-0c1e570", ">=1") is None  # an identifier has no order


def test_vllm_0101_gets_a_static_length_and_a_note() -> None:
    """vLLM 0.10.1 has no num_speculative_tokens_per_batch_size (vllm/config/__init__.py of 0.10.1)."""
    cfg = _cfgs("ngram", n=5, schedule=SCHEDULE, versions={"vllm": "0.10.1"})["vllm"]
    assert cfg["version"] == "0.10.1" and "warning" not in cfg
    assert "num_speculative_tokens_per_batch_size" not in cfg["speculative_config"]
    assert cfg["speculative_config"]["num_speculative_tokens"] == 5
    assert "0.10.1 has no batch-size schedule (it arrived in 0.24.0)" in cfg["note"]
    newer = _cfgs("ngram", n=5, schedule=SCHEDULE, versions={"vllm": "0.24.0"})["vllm"]
    assert newer["speculative_config"]["num_speculative_tokens_per_batch_size"] == vllm_schedule(SCHEDULE)
    assert newer["valid_for"] == ">=0.24.0,<0.33.0"


def test_a_version_outside_every_range_read_gets_a_one_line_warning() -> None:
    pinned, warning = resolve_version("vllm", "0.9.2")
    assert pinned == ENGINE_VERSIONS["vllm"] and warning is not None and "\n" not in warning
    assert "0.10.1 to 0.32.x" in warning and "0.9.2" in warning
    cfg = _cfgs("ngram", versions={"vllm": "0.40.0", "sglang": "0.4.0"})
    assert cfg["vllm"]["version"] == "0.32.0" and cfg["vllm"]["warning"].startswith("vllm 0.40.0 is not a version")
    assert cfg["sglang"]["warning"].endswith("written for 0.5.23")
    assert resolve_version("llama_cpp", "b1-0c1e570") == ("b1-0c1e570", None)
    assert resolve_version("llama_cpp", "b6500")[1] is not None


def test_a_version_that_cannot_run_the_strategy_says_which_can() -> None:
    old = _cfgs("vanilla", versions={"vllm": "0.14.1"})["vllm"]
    assert old["supported"] is False and "until 0.15.0" in old["reason"] and "sglang" in old["reason"]
    assert _cfgs("vanilla", versions={"vllm": "0.15.0"})["vllm"]["valid_for"] == ">=0.15.0,<0.33.0"


def test_a_strategy_the_profiles_engine_version_cannot_run_is_never_deployable(tmp_path) -> None:
    """vLLM 0.10.1 has no suffix method (0.11.1) and no separate draft model (0.15.0): a profile naming
    it never gets them enabled or as a deployable alternative, and says why; 0.32.0 can run suffix."""
    import yaml

    from picker.inputs.workload import load_profile
    from picker.recommend.pipeline import recommend

    def plan(version: str):
        raw = {"name": "old-vllm", "model": "llama-3.1-8b-instruct", "hardware": "H100",
               "engine": {"name": "vllm", "version": version},
               "traffic": {"task_mix": {"chat": 0.7, "code": 0.3}, "concurrency": 32, "temperature": 0.7},
               "drafters": {"draft_model": {"name": "meta-llama/Llama-3.2-1B-Instruct", "params_b": 1.24}}}
        path = tmp_path / f"p-{version}.yaml"
        path.write_text(yaml.safe_dump(raw))
        return recommend(load_profile(path)).recommendation

    old = plan("0.10.1")
    assert old.decision.strategy not in ("suffix", "vanilla")
    rows = {(c.strategy, c.num_speculative_tokens, c.tree is None): c for c in old.alternatives}
    for (name, _, _), c in rows.items():
        if name in ("suffix", "vanilla"):
            assert not c.engine_supported, c
            assert c.tree is not None or any("0.10.1" in n for n in c.notes), c  # a tree: vLLM verifies chains
    assert any(c.strategy in ("suffix", "vanilla") for c in old.alternatives)
    new = plan("0.32.0")
    assert any(c.strategy == "suffix" and c.engine_supported for c in new.alternatives) or \
        new.decision.strategy == "suffix"

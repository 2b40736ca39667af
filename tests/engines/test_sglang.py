"""Every SGLang config we emit, resolved by SGLang 0.5.23's own ``ServerArgs.resolve_once()``.

Cases: the config of every shipped profile (through ``recommend``), every configuration each
strategy with an SGLang algorithm can deploy (``policies.analytic.configs_for``: chains and trees),
batch schedules, and negative controls that SGLang's own code must reject (so the check has teeth).
A config SGLang rejects fails its test. SGLang accepts some shapes that fail later at run time
(draft tokens > steps·topk + 1), so our own rule is checked on what SGLang resolved, too.

All cases run in ONE subprocess in the SGLang venv (``sglang_resolve.py``): importing SGLang takes
tens of seconds, resolving a case milliseconds.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from picker.engine.deploy import check_sglang_tree
from picker.engine.plugins import load_strategies
from picker.inputs.workload import load_profile
from picker.recommend.engine_configs import (
    ENGINE_VERSIONS,
    SGLANG_ADAPTIVE_FILE,
    ScheduleEntry,
    build_engine_configs,
)
from picker.recommend.pipeline import recommend
from policies.analytic import configs_for
from tests.conformance.third_party import discoverable
from tests.engines.support import CHECKPOINT_ARTIFACTS, ROOT, engine_python, profile_hf_config, write_model_folder

pytestmark = pytest.mark.engines

DRAFT = "DRAFT_FOLDER"  # replaced by the local draft folder when the case runs
TARGET = "TARGET_FOLDER"  # replaced by the case's target folder: modules that live in the checkpoint
ALIASES = {"NEXTN": "EAGLE"}  # SGLang 0.5.23 resolves NEXTN to EAGLE (spec_registry._RESERVED_ALIASES)
SCHEDULE = [ScheduleEntry(1, 8, 5), ScheduleEntry(9, 32, 3), ScheduleEntry(33, 128, 1), ScheduleEntry(129, None, 0)]


def _case(case_id: str, cfg: dict[str, Any], *, strategy: str, schedule: list[ScheduleEntry] | None = None,
          target: Path | None = None, model: str | None = None) -> dict[str, Any]:
    """A resolvable case from an emitted SGLang config. The adaptive file and the draft path become
    placeholders: SGLang 0.5.23 reads the draft's config.json while resolving (a hub id fails
    offline), so the case points it at a local folder -- the target's own when the draft path is the
    model itself (MTP modules in the checkpoint). ``target``: a config.json shaped like the case's
    model (the profile's hf_config), else the tiny Llama's."""
    args = ["ADAPTIVE_CONFIG" if a == SGLANG_ADAPTIVE_FILE else a for a in cfg["args"]]
    if "--speculative-draft-model-path" in args:
        i = args.index("--speculative-draft-model-path") + 1
        args[i] = TARGET if model is not None and args[i] == model else DRAFT
    case: dict[str, Any] = {"id": case_id, "args": args, "strategy": strategy}
    if target is not None:
        case["target"] = str(target)
    if "adaptive_config" in cfg:
        case["adaptive_config"] = cfg["adaptive_config"]
        case["expect_steps"] = {str(b): k for b, k in _probe_batches(schedule or [])}
        case["batches"] = sorted(int(b) for b in case["expect_steps"])
    return case


def _probe_batches(schedule: list[ScheduleEntry]) -> list[tuple[int, int]]:
    """(batch, K) at both ends of every range (and past an open end)."""
    out = []
    for e in schedule:
        out += [(e.min_batch, e.num_speculative_tokens),
                (e.max_batch if e.max_batch is not None else e.min_batch * 4, e.num_speculative_tokens)]
    return out


def _profile_cases() -> tuple[list[dict[str, Any]], list[tuple[str, dict[str, Any]]], list[str]]:
    cases, unsupported, off = [], [], []
    for path in sorted((ROOT / "profiles").glob("*.yaml")):
        profile = load_profile(path)
        rec = recommend(profile).recommendation
        cfg = rec.engine_configs.get("sglang")
        if cfg is None:  # the decision is "leave speculation off": nothing to deploy
            assert rec.decision.strategy == "none", path
            off.append(path.stem)
            continue
        if not cfg["supported"]:
            unsupported.append((path.stem, rec.engine_configs))
            continue
        sched = [ScheduleEntry(r.min_batch, r.max_batch, r.num_speculative_tokens)
                 for r in rec.decision.batch_schedule]
        cases.append(_case(f"profile:{path.stem}", cfg, strategy=rec.decision.strategy, schedule=sched,
                           target=profile_hf_config(path), model=profile.model.name))
    return cases, unsupported, off


def _shape_cases() -> list[dict[str, Any]]:
    """Every registered strategy with an SGLang algorithm -- the third-party test plugin too, whose
    config comes from its own hook -- at every shape it can deploy, and under a batch schedule."""
    cases = []
    with discoverable():
        plugins = sorted(load_strategies(only_builtin=False).items())
    for name, plugin in plugins:
        caps = plugin.capabilities
        if caps.engines.get("sglang") is None:
            continue
        draft = DRAFT if caps.artifact else None
        # Modules that live in the checkpoint (MTP) resolve against a target that has them.
        target, info = CHECKPOINT_ARTIFACTS.get(caps.artifact or "", (None, None))
        if target is not None:
            draft = TARGET
        for config in configs_for(caps):
            cfgs = build_engine_configs(
                strategy=name, plugin=plugin, num_speculative_tokens=config.depth,
                tree=(config.depth, config.topk, config.num_draft_tokens),
                schedule=[ScheduleEntry(1, None, config.depth)], draft_path=draft, artifact_info=info)
            cases.append(_case(f"shape:{name}:{config.label}", cfgs["sglang"], strategy=name, target=target,
                               model=TARGET if target is not None else None))
        cfgs = build_engine_configs(strategy=name, plugin=plugin, num_speculative_tokens=5, tree=None,
                                    schedule=SCHEDULE, draft_path=draft, artifact_info=info)
        cases.append(_case(f"schedule:{name}", cfgs["sglang"], strategy=name, schedule=SCHEDULE, target=target,
                           model=TARGET if target is not None else None))
    return cases


EAGLE = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", DRAFT]
NEGATIVE = [  # (id, args, a fragment of SGLang's own error)
    ("neg:topk-without-steps", [*EAGLE, "--speculative-eagle-topk", "4"], "AssertionError"),
    ("neg:rejection-sampling-topk-4", [*EAGLE, "--speculative-num-steps", "3", "--speculative-eagle-topk", "4",
                                       "--speculative-num-draft-tokens", "8", "--speculative-use-rejection-sampling"],
     "requires --speculative-eagle-topk=1"),
    ("neg:medusa", ["--speculative-algorithm", "MEDUSA", "--speculative-draft-model-path", DRAFT],
     "Unknown speculative algorithm"),
    ("neg:adaptive-steps-not-a-candidate", [*EAGLE, "--speculative-num-steps", "4", "--speculative-eagle-topk", "1",
                                            "--speculative-num-draft-tokens", "5", "--speculative-adaptive",
                                            "--speculative-adaptive-config", "ADAPTIVE_CONFIG"],
     "is not in the adaptive config candidate_steps"),
]
# Accepted by SGLang although it cannot run (the tree holds at most 3·4 + 1 tokens): why our rule stays.
GAP = ("gap:tokens-beyond-tree", [*EAGLE, "--speculative-num-steps", "3", "--speculative-eagle-topk", "4",
                                  "--speculative-num-draft-tokens", "64"])

PROFILE_CASES, UNSUPPORTED, OFF = _profile_cases()
SHAPE_CASES = _shape_cases()
POSITIVE = PROFILE_CASES + SHAPE_CASES


@pytest.fixture(scope="module")
def resolved(config_folders: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Run every case through SGLang once; id -> result."""
    python = engine_python("sglang")
    work = tmp_path_factory.mktemp("sglang")
    draft = str(config_folders["draft"])
    folders = {t: str(write_model_folder(work / f"target-{i}", Path(t)))
               for i, t in enumerate(sorted({c["target"] for c in POSITIVE if "target" in c}))}

    def local(args: list[str], config: str | None = None) -> list[str]:
        target = folders[config] if config else str(config_folders["target"])
        swap = {DRAFT: draft, TARGET: target}
        return ["--model-path", target, "--device", "cpu", *[swap.get(a, a) for a in args]]

    cases = [{**c, "args": local(c["args"], c.get("target"))} for c in POSITIVE]
    cases += [{"id": i, "args": local(args)} for i, args, _ in NEGATIVE]
    for case in cases:
        if "ADAPTIVE_CONFIG" in case["args"] and "adaptive_config" not in case:  # the negative control
            case["adaptive_config"] = {"1": {"candidate_steps": [5]}}
    cases.append({"id": GAP[0], "args": local(GAP[1])})
    (work / "cases.json").write_text(json.dumps(cases))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TMPDIR": str(work)}  # nothing may reach a hub
    proc = subprocess.run([str(python), str(Path(__file__).with_name("sglang_resolve.py")),
                           str(work / "cases.json"), str(work / "results.json")],
                          cwd=work, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads((work / "results.json").read_text())
    assert out["sglang_version"] == ENGINE_VERSIONS["sglang"]
    return {r["id"]: r for r in out["results"]}


@pytest.mark.parametrize("case", POSITIVE, ids=lambda c: c["id"])
def test_sglang_accepts_what_we_emit(case: dict[str, Any], resolved: dict[str, Any]) -> None:
    result = resolved[case["id"]]
    assert result["ok"], f"SGLang rejected {case['args']}: {result['error']}"
    got = result["resolved"]
    ours = dict(zip(case["args"][::2], case["args"][1::2]))  # flag -> value (flags without values are last)
    algorithm = ours["--speculative-algorithm"]
    assert got["speculative_algorithm"] == ALIASES.get(algorithm, algorithm)
    steps, topk = got["speculative_num_steps"], got["speculative_eagle_topk"]
    tokens = got["speculative_num_draft_tokens"]
    assert tokens == int(ours["--speculative-num-draft-tokens"])  # SGLang kept our size, never adjusted it
    if "--speculative-num-steps" in ours:  # the EAGLE family: the tree flags we set are kept
        assert (steps, topk) == (int(ours["--speculative-num-steps"]), int(ours["--speculative-eagle-topk"]))
        check_sglang_tree(steps, topk, tokens)  # our rule, on what SGLang resolved
    else:  # NGRAM: SGLang derives topk = max BFS breadth and steps = draft tokens // topk
        breadth = int(ours["--speculative-ngram-max-bfs-breadth"])
        assert topk == breadth and steps == tokens // breadth
    if "adaptive_config" in case:
        assert got["speculative_adaptive"] is True, "SGLang switched adaptive mode off"
        assert result["steps_at_batch"] == case["expect_steps"], "SGLang routes batches to other step counts"


@pytest.mark.parametrize("case_id, fragment", [(i, f) for i, _, f in NEGATIVE], ids=[i for i, _, _ in NEGATIVE])
def test_sglang_rejects_negative_controls(case_id: str, fragment: str, resolved: dict[str, Any]) -> None:
    result = resolved[case_id]
    assert not result["ok"], f"{case_id} was accepted: the check has no teeth"
    assert fragment in result["error"], result["error"]


def test_sglang_accepts_trees_that_cannot_run_so_our_rule_stays(resolved: dict[str, Any]) -> None:
    assert resolved[GAP[0]]["ok"], resolved[GAP[0]]
    with pytest.raises(ValueError, match="tree cannot hold"):
        check_sglang_tree(3, 4, 64)


def test_every_profile_is_covered() -> None:
    # Every shipped profile emits a config SGLang resolves, one it cannot run (said so), or none at
    # all because the plan leaves speculation off.
    assert len(PROFILE_CASES) + len(UNSUPPORTED) + len(OFF) == len(list((ROOT / "profiles").glob("*.yaml")))


@pytest.mark.parametrize("profile, cfgs", UNSUPPORTED, ids=[p for p, _ in UNSUPPORTED])
def test_unsupported_in_sglang_says_so_and_offers_the_others(profile: str, cfgs: dict[str, Any]) -> None:
    reason = cfgs["sglang"]["reason"]
    offered = [e for e in ("vllm", "tensorrt_llm") if cfgs[e]["supported"]]
    assert offered and all(e in reason for e in offered), reason

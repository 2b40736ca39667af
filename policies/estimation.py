"""``specpick estimate``: one configuration's speedup, priced on the load curve.

The step's draft and verify forwards are timed by ``policies.loadcurve`` (a forward-time curve
per engine and hardware: floor, GEMM knee, CUDA-graph padding, speculative-path overhead); E[L]
comes from ``policies.theory`` for the chain or tree the strategy's declared draft cost implies.

    >>> from types import SimpleNamespace
    >>> h100 = SimpleNamespace(memory_bandwidth_gbps=3350.0, bf16_tflops=989.0)
    >>> out = estimate("target_layer", model_params=8e9, hardware=h100, alpha=0.8,
    ...                num_draft_tokens=4)
    >>> round(out["expected_tokens_per_verify"], 3), out["breakdown"]["bound"], out["regime"]
    (3.362, 'memory', 'memory')
    >>> 2.0 < out["speedup"] < 3.0
    True
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from picker.engine.plugins import DraftCost
from policies.costmodel import (
    DEFAULT_DRAFT_FRACTION,
    DRAFT_COSTS,
    LOOKAHEAD_GUESSES,
    LOOKAHEAD_WINDOW,
    MAX_CHAIN_DRAFT,
    MAX_TREE_NODES,
    StepCost,
    predict_speedup,
    tree_for_alpha,
)
from policies.loadcurve import LoadStepCost, engine_curve, load_step_cost
from policies.roofline import HardwareLike, ModelShape


@dataclass(frozen=True)
class _Layout:
    """How many tokens a step drafts and verifies, and E[L] as a function of α."""

    n_draft: int
    num_verify_tokens: int
    depth: int | None
    length_of_alpha: Callable[[float], float]


def _layout(kind: str, n: int, topk: int | None, alpha_for_shape: float) -> _Layout:
    from policies import theory  # lazy: keeps numpy out of `specpick recommend` start-up

    if topk is not None and topk > 1:
        def tree_length(a: float) -> float:
            return theory.expected_length_tree(*tree_for_alpha(a, topk, n))
        parents, _ = tree_for_alpha(alpha_for_shape, topk, n)
        depth = int(theory.tree_depths(parents).max()) if parents else 0
        return _Layout(n, n + 1, depth, tree_length)

    def chain_length(a: float) -> float:
        return float(theory.expected_length_iid(a, n))
    verify = 1 + (LOOKAHEAD_WINDOW + LOOKAHEAD_GUESSES) * n if kind == "in_forward" else n + 1
    return _Layout(n, verify, None, chain_length)


@dataclass(frozen=True)
class _Candidate:
    """One evaluated configuration: its layout, step cost, E[L] and predicted speedup."""

    layout: _Layout
    cost: StepCost
    length: float
    speedup: float


def _evaluate(
    kind: DraftCost, n: int, topk: int | None, alpha: float, ctx: dict[str, Any]
) -> _Candidate:
    layout = _layout(kind, n, topk, alpha)
    cost = load_step_cost(
        kind, ctx["target"], ctx["hw"], ctx["batch"], layout.n_draft, layout.num_verify_tokens,
        ctx["context_len"], ctx["curve"], ctx["draft"], layout.depth, ctx["num_devices"], sampled=ctx["sampled"])
    length = layout.length_of_alpha(alpha)
    return _Candidate(layout, cost, length, predict_speedup(length, cost))


def estimate(
    kind: str,
    *,
    model_params: float,
    hardware: HardwareLike | str,
    alpha: float | None = None,
    mean_accepted_tokens: float | None = None,
    num_draft_tokens: int | None = None,
    tree_topk: int | None = None,
    draft_params: float | None = None,
    engine: str = "sglang",
    batch_size: int = 1,
    context_len: int = 1024,
    num_devices: int = 1,
    bytes_per_param: float = 2.0,
    temperature: float = 0.0,
    calibration: Mapping[str, float] | None = None,
    calibration_label: str = "calibrated (calibration file)",
) -> dict[str, Any]:
    """Predicted speedup of one strategy configuration: the JSON behind ``specpick estimate``.

    ``kind`` is the strategy's ``Capabilities.draft_cost``. Give exactly one of ``alpha`` (per-token
    acceptance) or ``mean_accepted_tokens`` (τ, bonus included, measured at ``num_draft_tokens``).
    ``num_draft_tokens`` is N, the tokens drafted per step (tree nodes without the root for a tree;
    SGLang's ``--speculative-num-draft-tokens`` is N + 1); when omitted, the best N is searched.
    ``tree_topk`` > 1 makes it a tree (see :func:`tree_for_alpha` for the approximation).
    ``hardware`` is a catalog name (looked up in ``picker.inputs.hardware``) or an object with
    ``memory_bandwidth_gbps`` and ``bf16_tflops``; ``context_len`` is tokens already cached.
    ``temperature`` > 0 prices what sampling adds on the host (the ``sampling_*`` constants: zero on
    every shipped curve, measured by a calibration of the eager loop, ``hf``).
    ``calibration`` overrides curve constants (``policies.calibration.calibration_for``), each then
    marked ``calibration_label`` in ``curve_constants``.
    Returns plain JSON types; ``assumptions`` lists every approximation the numbers rest on.
    """
    if (alpha is None) == (mean_accepted_tokens is None):
        raise ValueError("give exactly one of alpha and mean_accepted_tokens")
    if not 0.0 <= temperature <= 2.0:
        raise ValueError("temperature must lie in [0, 2]")
    if kind not in DRAFT_COSTS:
        raise ValueError(f"unknown draft cost kind {kind!r}; known: {', '.join(DRAFT_COSTS)}")
    draft_kind = cast(DraftCost, kind)
    if isinstance(hardware, str):
        from picker.inputs.hardware import get_hardware  # lazy: keeps the policy importable on its own

        hardware = get_hardware(hardware)
    target = ModelShape.from_params(model_params, bytes_per_param)
    draft = None
    notes = [f"target shape inferred from the {target.name} family (nearest published size)"]
    if kind == "draft_model":
        params = draft_params if draft_params is not None else model_params * DEFAULT_DRAFT_FRACTION
        draft = ModelShape.from_params(params, bytes_per_param)
        if draft_params is None:
            notes.append(f"no draft size given: assumed {DEFAULT_DRAFT_FRACTION:g} x target params")
    ctx = {"target": target, "hw": hardware, "batch": batch_size, "context_len": context_len,
           "curve": engine_curve(engine, calibration, label=calibration_label),
           "draft": draft, "num_devices": num_devices, "calibrated": bool(calibration), "sampled": temperature > 0}

    alpha = _resolve_alpha(kind, alpha, mean_accepted_tokens, num_draft_tokens, tree_topk, notes)
    if num_draft_tokens is not None:
        best = _evaluate(draft_kind, num_draft_tokens, tree_topk, alpha, ctx)
    else:
        top = MAX_TREE_NODES if tree_topk and tree_topk > 1 else MAX_CHAIN_DRAFT
        candidates = [_evaluate(draft_kind, n, tree_topk, alpha, ctx) for n in range(1, top + 1)]
        best = max(candidates, key=lambda r: r.speedup)
        notes.append(f"num_draft_tokens searched over 1..{top}")
    if tree_topk and tree_topk > 1:
        notes.append("tree E[L]: i-th ranked child accepts with alpha*(1-alpha)^(i-1), best tree")
    if kind == "in_forward":
        notes.append(f"lookahead: verify carries (W+G)*N guess tokens, W={LOOKAHEAD_WINDOW}, "
                     f"G={LOOKAHEAD_GUESSES}; alpha is the acceptance of the best guess")
    if calibration:
        notes.append(f"curve constants {', '.join(sorted(calibration))} replaced: {calibration_label}")
    return _report(kind, alpha, tree_topk, best, ctx, notes)


def _resolve_alpha(
    kind: str, alpha: float | None, tau: float | None, n: int | None, topk: int | None, notes: list[str]
) -> float:
    """α as given, or inverted from τ (bonus included) through this layout's E[L](α)."""
    from policies import theory  # lazy: keeps numpy out of `specpick recommend` start-up

    if alpha is None:
        if n is None or tau is None:
            raise ValueError("mean_accepted_tokens needs num_draft_tokens (the N it was measured at)")
        layout = _layout(kind, n, topk, 0.5)
        if not 1.0 <= tau <= layout.length_of_alpha(1.0):
            raise ValueError(f"mean_accepted_tokens must lie in [1, {layout.length_of_alpha(1.0):g}]"
                             " (it includes the bonus token)")
        alpha = theory.solve_alpha(layout.length_of_alpha, float(tau))
        notes.append("alpha inverted from the mean accepted length (bonus token included)")
    if not 0.0 <= alpha <= 1.0:
        raise ValueError("alpha must lie in [0, 1]")
    return alpha


def _report(
    kind: str, alpha: float, topk: int | None, best: _Candidate, ctx: dict[str, Any],
    notes: list[str],
) -> dict[str, Any]:
    from policies import theory  # lazy: keeps numpy out of `specpick recommend` start-up

    cost, layout = best.cost, best.layout
    assert isinstance(cost, LoadStepCost)
    curve = ctx["curve"]
    # The α where E[L](α) = N·c + v at this configuration's step cost (for a tree, the tree is
    # re-optimised for each α while its draft depth stays that of the tree built for ``alpha``).
    break_even = theory.solve_alpha(layout.length_of_alpha, cost.step_ratio)
    tree = None
    if layout.depth is not None:
        tree = {"topk": topk, "num_draft_tokens": layout.n_draft, "depth": layout.depth}
    return {
        "strategy_kind": kind,
        "engine": curve.name,
        "engine_status": "load curve (policies/loadcurve.py); constants from policies/data/loadcurve.json, "
                         "each fitted (to what: curve_constants) or an assumption"
                         + ("; some calibrated from a file (marked in curve_constants)" if ctx["calibrated"] else ""),
        # What bounds the verify forward: memory | knee | compute | kv | overhead | eager (past the
        # largest CUDA graph); plain_regime is the same for one plain decode step.
        "regime": cost.regime,
        "plain_regime": cost.plain_regime,
        "target_shape": ctx["target"].name,
        "draft_shape": ctx["draft"].name if ctx["draft"] is not None else None,
        "batch_size": ctx["batch"],
        "context_len": ctx["context_len"],
        "sampled": ctx["sampled"],
        "alpha": float(alpha),
        "num_draft_tokens": layout.n_draft,
        "num_verify_tokens": layout.num_verify_tokens,
        "tree": tree,
        "expected_tokens_per_verify": float(best.length),
        "cost_ratio": cost.cost_ratio,
        "verify_ratio": cost.verify_ratio,
        "speedup": float(best.speedup),
        # 1.0 means no alpha < 1 pays at this batch size (see theory.break_even_alpha).
        "break_even_alpha": float(break_even),
        "breakdown": {
            "verify_seconds": cost.verify_seconds,
            "draft_seconds": cost.draft_seconds,
            "plain_seconds": cost.plain_seconds,
            "spec_overhead_seconds": cost.spec_overhead_seconds,  # included in verify_seconds
            "padded_verify_tokens": cost.padded_tokens,
            "bound": cost.bound,
        },
        "curve_constants": curve.describe(),
        "assumptions": notes,
    }

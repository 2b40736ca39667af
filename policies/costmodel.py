"""Per-strategy step costs on the roofline (``policies.roofline``), and their shared pieces.

:func:`step_cost` prices a step on the max(memory, compute) roofline (the recommend scorer's path
until it moves over); ``specpick estimate`` prices it on the load curve instead
(``policies.estimation``, over ``policies.loadcurve``: smooth GEMM knee, CUDA-graph padding,
speculative-path overhead growing with concurrency), checked against the published batch curves
(``docs/load-curve.md``).

A speculative step = draft (cost set by the strategy's declared ``Capabilities.draft_cost``) +
one target verify forward over N+1 tokens per sequence. Against plain decoding (one 1-token
forward per token):

    S = E[L] · T_plain / (T_draft + T_verify) = E[L] / (N·c + v)

with c = T_draft / (N · T_plain) (draft cost per proposed token) and v = T_verify / T_plain.

    >>> cost = StepCost("target_layer", draft_seconds=0.002, verify_seconds=0.011, plain_seconds=0.010,
    ...                 n_draft=4, num_verify_tokens=5, draft_steps=4, bound="memory")
    >>> round(cost.step_ratio, 2), round(predict_speedup(3.0, cost), 3)
    (1.3, 2.308)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal, get_args

from picker.engine.plugins import DraftCost
from policies.roofline import (
    Bound,
    EngineProfile,
    HardwareLike,
    ModelShape,
    forward_time,
    resolve_engine,
)

DRAFT_COSTS: tuple[str, ...] = get_args(DraftCost)  # one source of truth: picker.engine.plugins

# A separate draft (model or EAGLE layer) runs one extra forward per step over the tokens the target
# just accepted, so its KV cache catches up (SGLang's "draft extend"; vLLM folds it into the first
# draft forward, which this overcounts by one cheap forward).
CATCH_UP_FORWARDS = 1
# An eager drafter's host work per sequence per draft forward, by draft kind (a draft model's or EAGLE
# layer's steps + catch-up; Medusa's one pass of heads). Each constant's twin with a "sampling_"
# prefix is what sampling adds to it.
DRAFT_HOST_TERMS: dict[str, str] = {
    "draft_model": "draft_host_s_per_seq",
    "target_layer": "layer_host_s_per_seq",
    "heads": "heads_host_s_per_seq",
}
# Lookahead decoding (Fu et al., arXiv:2402.02057): a forward carries a lookahead window of W
# Jacobi branches and G guessed n-grams, each N-1 = n tokens long. W = G = 7 (with n-gram size 5)
# is a commonly used configuration in Spec-Bench-style scripts; an assumption, not tuned here.
LOOKAHEAD_WINDOW = 7
LOOKAHEAD_GUESSES = 7
# Without --draft-params, a separate draft is assumed ~100x smaller than the target
# (Leviathan et al. 2023: "around two orders of magnitude smaller ... usually performed best").
DEFAULT_DRAFT_FRACTION = 0.01
# Search ranges when the user gives no N.
MAX_CHAIN_DRAFT = 16
MAX_TREE_NODES = 64


@dataclass(frozen=True)
class StepCost:
    """Seconds of one speculative step for the whole batch, and its ratios to a plain forward."""

    kind: str
    draft_seconds: float
    verify_seconds: float
    plain_seconds: float  # one 1-token target forward over the same batch
    n_draft: int  # tokens proposed per sequence (chain length, or tree nodes without the root)
    num_verify_tokens: int  # tokens per sequence in the verify forward
    draft_steps: int  # sequential draft forwards (chain length or tree depth; 1 for heads)
    bound: Bound  # what bounds the verify forward

    @property
    def cost_ratio(self) -> float:
        """c: draft time per proposed token over one plain forward (0 with no drafts)."""
        return self.draft_seconds / (self.n_draft * self.plain_seconds) if self.n_draft else 0.0

    @property
    def verify_ratio(self) -> float:
        """v: verify forward over one plain forward."""
        return self.verify_seconds / self.plain_seconds

    @property
    def step_ratio(self) -> float:
        """(draft + verify) / plain = N·c + v: the E[L] a step must reach to break even."""
        return (self.draft_seconds + self.verify_seconds) / self.plain_seconds

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(cost_ratio=self.cost_ratio, verify_ratio=self.verify_ratio)
        return out


def eagle_layer_shape(target: ModelShape) -> ModelShape:
    """EAGLE's draft: one decoder layer of the target's width plus the LM head (full vocabulary;
    EAGLE-3's reduced draft vocabulary and its 3h→h feature fusion are not modelled)."""
    params = target.params_per_layer + target.vocab_size * target.hidden_size
    return ModelShape(
        params, 1, target.hidden_size, target.num_kv_heads, target.head_dim, target.vocab_size,
        target.bytes_per_param, target.kv_bytes_per_elem, name=f"eagle-layer({target.name})",
    )


def medusa_heads_shape(target: ModelShape, num_heads: int) -> ModelShape:
    """Medusa heads: each a residual h×h block plus its own h×vocab projection, all run once on
    the last hidden state (no attention, no KV cache)."""
    h = target.hidden_size
    params = max(num_heads, 1) * (h * h + h * target.vocab_size)
    return ModelShape(
        params, 0, h, 0, target.head_dim, target.vocab_size,
        target.bytes_per_param, target.kv_bytes_per_elem, name=f"medusa-heads({target.name})",
    )


def step_cost(
    kind: DraftCost,
    target: ModelShape,
    hw: HardwareLike,
    batch: int,
    n_draft: int,
    num_verify_tokens: int,
    context_len: int,
    engine: str | EngineProfile = "sglang",
    draft: ModelShape | None = None,
    tree_depth: int | None = None,
    num_devices: int = 1,
    *,
    calibration: Mapping[str, float] | None = None,
) -> StepCost:
    """Cost of one step of a strategy whose draft cost kind is ``kind`` (``Capabilities.draft_cost``).

    ``tree_depth`` (trees) sets the sequential draft steps; each step then drafts
    ceil(n_draft / depth) tokens per sequence (EAGLE-2 expands its top-k nodes per depth).
    """
    if kind not in DRAFT_COSTS:
        raise ValueError(f"unknown draft cost kind {kind!r}; known: {', '.join(DRAFT_COSTS)}")
    if n_draft < 0 or num_verify_tokens < 1:
        raise ValueError("n_draft must be >= 0 and num_verify_tokens >= 1")
    profile = resolve_engine(engine, calibration)

    def fwd(shape: ModelShape, tokens: int, role: Literal["target", "draft"]) -> float:
        return forward_time(
            shape, hw, batch, tokens, context_len, profile, num_devices, role=role).seconds

    plain = fwd(target, 1, "target")
    verify_cost = forward_time(target, hw, batch, num_verify_tokens, context_len, profile, num_devices)
    steps = tree_depth if tree_depth is not None else n_draft
    per_step = max(1, math.ceil(n_draft / steps)) if steps else 1
    draft_s = 0.0
    if kind in ("draft_model", "target_layer") and n_draft > 0:
        if kind == "draft_model":
            shape = draft if draft is not None else ModelShape.from_params(
                target.params * DEFAULT_DRAFT_FRACTION, target.bytes_per_param)
        else:
            shape = eagle_layer_shape(target)
        draft_s = (steps * fwd(shape, per_step, "draft") + CATCH_UP_FORWARDS * fwd(shape, 1, "draft")
                   + (steps + CATCH_UP_FORWARDS) * batch * getattr(profile, DRAFT_HOST_TERMS[kind]))
    elif kind == "heads" and n_draft > 0:
        heads = medusa_heads_shape(target, steps)
        draft_s = (forward_time(heads, hw, batch, 1, 0, profile, num_devices, role="draft").seconds
                   + batch * getattr(profile, DRAFT_HOST_TERMS[kind]))
        steps = 1
    elif kind == "cpu_lookup" and n_draft > 0:
        draft_s = batch * profile.lookup_s_per_seq
        steps = 1
    elif kind == "in_forward":
        steps = 0  # the guesses ride in the verify forward: its extra tokens are the whole cost
    host_s = batch * profile.host_s_per_seq  # per-sequence sampling and emitting, every step
    spec_s = batch * profile.spec_host_s_per_seq if n_draft > 0 else 0.0  # per-sequence verify and rollback
    return StepCost(kind, draft_s, verify_cost.seconds + host_s + spec_s, plain + host_s, n_draft, num_verify_tokens,
                    steps, verify_cost.bound)


def predict_speedup(expected_length: float, cost: StepCost) -> float:
    """S = E[L] · T_plain / (T_draft + T_verify) (tokens per second against plain decoding)."""
    return expected_length * cost.plain_seconds / (cost.draft_seconds + cost.verify_seconds)


def tree_for_alpha(alpha: float, topk: int, n_nodes: int) -> tuple[list[int], Any]:
    """The best ``n_nodes`` tree when the i-th ranked child accepts with α·(1 − α)^(i−1).

    Approximation (stated in every estimate): acceptance depends only on the sibling rank,
    not on depth or context (Sequoia's positional assumption) and the rank decay is geometric
    (:func:`policies.theory.sibling_acceptance`). With top-k = 1 it is the i.i.d. chain.
    """
    from policies import theory  # lazy: keeps numpy out of `specpick recommend` start-up

    return theory.best_tree(theory.sibling_acceptance(alpha, topk), n_nodes)

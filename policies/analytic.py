"""The analytic policy: enumerate configurations a strategy can run, and score them.

Pure cost model, no training data: E[L] from the acceptance model (chain or best tree under
Sequoia's positional assumption) over the roofline step cost of ``policies.costmodel``.
Everything here branches on declared capabilities, never on a strategy's name.

    >>> from picker.engine.plugins import Capabilities
    >>> caps = Capabilities(needs_draft_model=True)
    >>> [c.label for c in configs_for(caps)][:3]
    ['N=1', 'N=2', 'N=3']
"""

from __future__ import annotations

from dataclasses import dataclass

from picker.engine.plugins import Capabilities
from policies.costmodel import LOOKAHEAD_GUESSES, LOOKAHEAD_WINDOW, StepCost, predict_speedup
from policies.roofline import HardwareLike, ModelShape
from policies.scalar import chain_length, solve_alpha, tree_length

MAX_CHAIN = 8
TREE_DEPTHS = (3, 4, 5, 6, 8)
TREE_TOPKS = (2, 4, 8)
# SGLang's num_draft_tokens: tree nodes + the root (small trees pay at larger batches).
TREE_TOKENS = (6, 8, 12, 16, 32, 64)


@dataclass(frozen=True)
class Config:
    """One runnable configuration: a chain of ``depth`` drafts, or a tree (depth, topk, tokens)."""

    depth: int
    topk: int = 1
    num_draft_tokens: int = 0  # tree nodes + root; for a chain: depth + 1

    @property
    def nodes(self) -> int:
        return self.num_draft_tokens - 1

    @property
    def is_tree(self) -> bool:
        return self.topk > 1

    @property
    def label(self) -> str:
        if not self.is_tree:
            return f"N={self.depth}"
        return f"tree(depth={self.depth}, topk={self.topk}, tokens={self.num_draft_tokens})"


def chain(n: int) -> Config:
    return Config(depth=n, topk=1, num_draft_tokens=n + 1)


def configs_for(caps: Capabilities, max_depth: int | None = None) -> list[Config]:
    """Every configuration the strategy can run: chains, plus trees where it declares ``tree``.

    ``max_depth`` caps the depth (Medusa cannot draft deeper than its number of heads).
    """
    top = min(MAX_CHAIN, max_depth) if max_depth else MAX_CHAIN
    out = [chain(n) for n in range(1, top + 1)]
    if caps.tree:
        for depth in TREE_DEPTHS:
            if max_depth and depth > max_depth:
                continue
            for topk in TREE_TOPKS:
                for tokens in TREE_TOKENS:
                    # SGLang's rule: the tree must be able to hold the tokens.
                    if depth + 1 < tokens <= depth * topk + 1:
                        out.append(Config(depth, topk, tokens))
    return out


def expected_length(config: Config, alpha: float, siblings: tuple[float, ...] = ()) -> float:
    """E[L] (tokens per verify, bonus included) for i.i.d. per-token acceptance ``alpha``.

    Trees use the best ``nodes``-node tree of the given depth and top-k where the i-th ranked child
    is the accepted one with α(1−α)^(i−1) (``policies.theory.sibling_acceptance``), an
    approximation, or with the measured conditional sibling rates ``siblings`` (ranks 2..).
    """
    alpha = min(max(round(alpha, 3), 0.0), 1.0)  # rounding makes the cache effective
    if not config.is_tree:
        return chain_length(alpha, config.depth)
    return tree_length(alpha, config.depth, config.topk, config.nodes, tuple(round(s, 3) for s in siblings))


def alpha_for_length(config: Config, tau: float) -> float:
    """Invert :func:`expected_length`: the α at which this config reaches ``tau``."""
    return solve_alpha(lambda a: expected_length(config, a), tau)


@dataclass(frozen=True)
class CostContext:
    """Everything about the deployment that the step cost depends on, except the batch size."""

    target: ModelShape
    hardware: HardwareLike
    engine: str
    context_len: int
    num_devices: int = 1
    draft: ModelShape | None = None


def config_cost(caps: Capabilities, config: Config, ctx: CostContext, batch: int, *, sampled: bool = False) -> StepCost:
    """Seconds of one step of ``config`` at ``batch`` concurrent sequences, on the load curve
    (``policies.loadcurve``: a floor from weight and KV streaming, a smooth GEMM knee, CUDA-graph
    padding, the speculative path's overhead growing with concurrency, draft cost by strategy).
    The recommend scorer, the feature rows of the learned correction and the SDK plan all read it,
    so the batch schedule, break-even α per batch range and the controller's switch share one curve.
    ``sampled`` (temperature > 0) adds what sampling costs on the host (only an eager loop's curve,
    ``hf`` as calibrated, has such terms; every shipped engine's are zero)."""
    from policies.loadcurve import load_step_cost  # lazy: keeps the JSON read off recommend's start-up

    verify = config.num_draft_tokens
    if caps.draft_cost == "in_forward":
        # Lookahead: the Jacobi window and the guessed n-grams ride in the verify forward.
        verify = 1 + (LOOKAHEAD_WINDOW + LOOKAHEAD_GUESSES) * config.depth
    return load_step_cost(
        caps.draft_cost, ctx.target, ctx.hardware, batch, config.nodes, verify, ctx.context_len,
        ctx.engine, ctx.draft, config.depth if config.is_tree else None, ctx.num_devices, sampled=sampled)


def speedup(config: Config, alpha: float, cost: StepCost) -> float:
    """Predicted tokens/s against plain decoding."""
    return predict_speedup(expected_length(config, alpha), cost)


def break_even(config: Config, cost: StepCost) -> float:
    """The α below which this config is slower than plain decoding (1.0: it never pays)."""
    need = cost.step_ratio
    if expected_length(config, 1.0) < need:
        return 1.0
    return alpha_for_length(config, need)

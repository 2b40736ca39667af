"""Evidence and candidate rows: what the policy scores, before any model reads it.

A :class:`Candidate` is one configuration in its deployment context: a strategy described by its
declared capabilities (never its name), a configuration (chain of N, or a tree), the context
(temperature, batch size, context length, task type, hardware, model size, engine) and the
:class:`Evidence` behind it (α or per-position acceptance with a range, and measured step costs,
:class:`CostEvidence`, where they exist; read from measured cells by :mod:`policies.cell_evidence`).
The speedup model that scores a candidate is :mod:`policies.speedup_model`; the numeric rows of the
learned correction are :mod:`policies.encoding`.

    >>> from picker.engine.plugins import Capabilities
    >>> c = Candidate(Capabilities(needs_draft_model=True), depth=4, evidence=Evidence(0.8, 0.7, 0.9))
    >>> c.nodes, c.config.num_draft_tokens, c.evidence.at(0.4).alpha
    (4, 5, 0.4)
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from picker.engine.plugins import Capabilities
from policies.analytic import Config, CostContext

DRAFT_COST_KINDS = ("draft_model", "target_layer", "heads", "cpu_lookup", "in_forward")


@dataclass(frozen=True)
class CostEvidence:
    """Step costs measured on the serving engine, in units of one plain decode step."""

    draft_unit: float                 # d: seconds of one draft forward (or lookup) / plain step
    draft_share: float = 1.0          # φ: share of output tokens emitted by steps that drafted
    nodes_per_token: float = 1.0      # verified draft nodes per nominal draft token (lookahead: ~G)
    fixed_steps: float = 0.0          # F: per-generation fixed time (prefill, setup) in plain steps
    output_tokens: float = 0.0        # T: tokens per generation F is spread over (0: decode only)
    verify: tuple[tuple[float, float], ...] = ()  # (tokens in flight, T(m)/T(1)) measured
    draft_fixed: float = 0.0          # d₀: per-step drafting time besides the d per forward (policies.cell_evidence)
    # (N, R) measured end to end on a live engine that reports no step timings (cell_evidence.live_step_points);
    # when present they replace the draft/verify decomposition above.
    step_points: tuple[tuple[float, float], ...] = ()
    batch: int = 1                    # the concurrency these costs were measured at
    # Draft forwards per step of the measured cell when no probe split its drafting into d₀ and d
    # (0: split, or nothing drafted): a chain of another length then takes the cost model's shape.
    unsplit_units: float = 0.0


@dataclass(frozen=True)
class Evidence:
    """Acceptance (top-1, i.i.d. convention: accepted / examined positions) with its range."""

    alpha: float
    alpha_low: float
    alpha_high: float
    source: str = "prior"             # "measured" | "prior"
    per_position: tuple[float, ...] = ()  # conditional acceptance of positions 1..k (chains)
    cost: CostEvidence | None = None
    citations: tuple[str, ...] = ()
    tau: float | None = None          # measured tokens per drafting step at the profiled config
    # Trees: P(rank r accepted | ranks < r rejected), r = 2.., measured on the chain's rejections
    # (picker.engine.siblings: greedy top-k siblings at T = 0, sampled ones at T > 0); empty: the textbook
    # model (α for every rank).
    siblings: tuple[float, ...] = ()
    # φ measured with the acceptance (policies.cell_evidence.draft_share): a lookup that drafts only where
    # it finds a match emits most of its output one token per step; 1: every step drafts (priors).
    draft_share: float = 1.0

    def at(self, alpha: float) -> Evidence:
        """The same evidence with α moved to ``alpha`` (per-position rates scaled alike)."""
        scale = alpha / self.alpha if self.alpha > 0 else 0.0
        pp = tuple(min(1.0, p * scale) for p in self.per_position)
        return replace(self, alpha=alpha, per_position=pp)


@dataclass(frozen=True)
class Candidate:
    """One configuration to score. ``tokens`` counts verified tokens incl. the root (trees)."""

    caps: Capabilities
    depth: int
    topk: int = 1
    tokens: int = 0
    temperature: float = 0.0
    batch: int = 1
    context_len: int = 1024
    task: str = "chat"
    evidence: Evidence = Evidence(0.5, 0.5, 0.5)
    ctx: CostContext | None = None    # the roofline's view of the deployment

    @property
    def is_tree(self) -> bool:
        return self.topk > 1

    @property
    def nodes(self) -> int:
        """Draft nodes verified per step (chain: N)."""
        return (self.tokens - 1) if self.is_tree else self.depth

    @property
    def config(self) -> Config:
        return Config(self.depth, self.topk, self.tokens if self.is_tree else self.depth + 1)

"""What the SDK Controller reads from a Recommendation: the deployed strategy, the batch schedule,
the temperature switch, per-task α priors and a step-cost table R(N, batch) — as plain, JSON-able data.

The cost table holds, for every draft length n = 1..N_max and every batch cell, the cost of one
speculative step in plain forwards (``StepCost.step_ratio`` = N·c + v): break-even is the α at which
E[L](α, n) reaches it. Batch cells follow the recommendation's own grid (``picker.recommend.decide``'s schedule
points 1, 2, 4, …, 512): cell i covers batches (2^(i−1), 2^i], cell 10 everything above 512; each cell
is costed at its largest batch (the dearest one, so break-even errs on the safe side).

    >>> cell_of(1), cell_of(3), cell_of(512), cell_of(10_000)
    (0, 2, 9, 10)
    >>> plan = ControllerPlan(strategy="vanilla", num_speculative_tokens=2, tree=None,
    ...                       schedule=((1, 8, 2), (9, None, 0)), temperature_above=None,
    ...                       step_ratio=flat_step_ratio(1.2, 2), prior_alpha=(("chat", 0.7),))
    >>> round(plan.step_ratio[0][0], 6), ControllerPlan.from_dict(plan.to_dict()) == plan
    (1.1, True)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from picker.recommend.table import CONTROLLER_BATCHES, cut_to_depth
from policies import Config, chain_length, solve_alpha, tree_length

if TYPE_CHECKING:  # the Recommendation pulls pydantic; the profile path pulls the whole policy
    from picker.inputs.measurements import Measurements
    from picker.inputs.workload import WorkloadProfile
    from picker.recommend.contract import Recommendation
    from policies import Calibration

# The batch each cell is costed at (1024 for the open cell): the recommendation prices its table there.
CELL_COST_BATCH = CONTROLLER_BATCHES
NUM_CELLS = len(CELL_COST_BATCH)  # (0,1], (1,2], (2,4], …, (256,512], (512, ∞)
DEFAULT_ALPHA = 0.5  # prior mean when the recommendation has no α for the deployed strategy


def cell_of(batch_size: int) -> int:
    """The batch cell of ``batch_size`` (anything below 1 counts as 1)."""
    return min(max(batch_size - 1, 0).bit_length(), NUM_CELLS - 1)


def cell_range(cell: int) -> tuple[int, int | None]:
    """Inclusive batch range of a cell; ``None`` = open above."""
    lo = 1 if cell == 0 else 2 ** (cell - 1) + 1
    return lo, (None if cell == NUM_CELLS - 1 else 2**cell)


@dataclass(frozen=True)
class TreeSpec:
    """A draft tree: ``depth`` levels, ``topk`` children per node, ``num_draft_tokens`` verified
    (SGLang's convention: the root counts as one)."""

    depth: int
    topk: int
    num_draft_tokens: int

    def at_depth(self, depth: int) -> TreeSpec:
        """The same branching, ``depth`` deep; tokens capped by SGLang's rule (≤ depth·topk + 1), as
        the recommendation prices it (``picker.recommend.table.cut_to_depth``)."""
        c = cut_to_depth(Config(self.depth, self.topk, self.num_draft_tokens), depth)
        return TreeSpec(c.depth, c.topk, c.num_draft_tokens)


def flat_step_ratio(ratio_at_n: float, n: int, n_max: int | None = None) -> tuple[tuple[float, ...], ...]:
    """A batch-independent cost table from one point: R(k) = 1 + (R(n) − 1)·k/n.

    What a bare Recommendation supports: ``break_even_accept_length`` is the step ratio of the
    deployed N at the typical batch only; linear in k means a fixed cost per draft token.
    """
    per_token = max(ratio_at_n - 1.0, 0.0) / n if n > 0 else 0.0
    return tuple(tuple(1.0 + per_token * k for _ in range(NUM_CELLS)) for k in range(1, (n_max or n) + 1))


def equivalent_chain_alpha(alpha: float, tree: TreeSpec | None) -> float:
    """Top-1 α → the α the Controller observes: for a tree, the chain α with the same E[L] at its depth."""
    if tree is None or tree.topk <= 1:
        return alpha
    length = tree_length(alpha, tree.depth, tree.topk, tree.num_draft_tokens - 1)
    return solve_alpha(lambda b: chain_length(b, tree.depth), length)


@dataclass(frozen=True)
class ControllerPlan:
    """The Controller's static inputs. Immutable; ``to_dict``/``from_dict`` round-trip exactly.

    ``schedule`` rows are ``(min_batch, max_batch or None, N)`` (N = 0: off), contiguous from 1.
    ``temperature_above``: speculation off above it (None: never). ``step_ratio[n-1][cell]``: step cost
    of n drafts in plain forwards. ``prior_alpha``: per-task prior mean of the observed α;
    ``default_alpha`` for other tasks.
    """

    strategy: str
    num_speculative_tokens: int
    tree: TreeSpec | None
    schedule: tuple[tuple[int, int | None, int], ...]
    temperature_above: float | None
    step_ratio: tuple[tuple[float, ...], ...]
    prior_alpha: tuple[tuple[str, float], ...] = ()
    default_alpha: float = DEFAULT_ALPHA
    cost_source: str = "recommendation"

    def __post_init__(self) -> None:
        expect = 1
        for lo, hi, n in self.schedule:
            if lo != expect or (hi is not None and hi < lo) or n < 0:
                raise ValueError(f"schedule must be contiguous from batch 1 with N >= 0: {self.schedule}")
            expect = (hi or lo) + 1
        if not self.schedule or self.schedule[-1][1] is not None:
            raise ValueError("the last schedule range must be open (max_batch None)")
        n_max = max(n for _, _, n in self.schedule)
        if len(self.step_ratio) < n_max or any(len(row) != NUM_CELLS for row in self.step_ratio):
            raise ValueError(f"step_ratio needs {n_max} rows of {NUM_CELLS} cells")

    def n_for_batch(self, batch_size: int) -> int:
        """N the schedule gives at ``batch_size``."""
        b = max(batch_size, 1)
        return next(n for lo, hi, n in self.schedule if lo <= b and (hi is None or b <= hi))

    def ns_in_cell(self, cell: int) -> tuple[int, ...]:
        """Distinct non-zero N the schedule uses for batches inside ``cell``."""
        lo, hi = cell_range(cell)
        ns = {n for a, b, n in self.schedule if n > 0 and (b is None or b >= lo) and (hi is None or a <= hi)}
        return tuple(sorted(ns))

    def prior_for(self, task: str | None) -> float:
        return dict(self.prior_alpha).get(task, self.default_alpha) if task is not None else self.default_alpha

    def to_dict(self) -> dict[str, Any]:
        t = self.tree
        return {
            "strategy": self.strategy, "num_speculative_tokens": self.num_speculative_tokens,
            "tree": None if t is None else {"depth": t.depth, "topk": t.topk, "num_draft_tokens": t.num_draft_tokens},
            "schedule": [list(r) for r in self.schedule], "temperature_above": self.temperature_above,
            "step_ratio": [list(r) for r in self.step_ratio], "prior_alpha": [list(p) for p in self.prior_alpha],
            "default_alpha": self.default_alpha, "cost_source": self.cost_source,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ControllerPlan:
        t = d["tree"]
        return cls(
            strategy=d["strategy"], num_speculative_tokens=d["num_speculative_tokens"],
            tree=None if t is None else TreeSpec(t["depth"], t["topk"], t["num_draft_tokens"]),
            schedule=tuple((int(lo), None if hi is None else int(hi), int(n)) for lo, hi, n in d["schedule"]),
            temperature_above=d["temperature_above"], step_ratio=tuple(tuple(r) for r in d["step_ratio"]),
            prior_alpha=tuple((str(k), float(v)) for k, v in d["prior_alpha"]),
            default_alpha=d["default_alpha"], cost_source=d["cost_source"])


def plan_from_recommendation(rec: Recommendation | dict[str, Any],
                             step_ratio: tuple[tuple[float, ...], ...] | None = None) -> ControllerPlan:
    """Read the plan out of a Recommendation (or its JSON dict, as `specpick recommend --format json` prints).

    Without ``step_ratio`` the cost table is :func:`flat_step_ratio` from the recommendation's
    break-even accept length; :func:`plan_from_profile` computes the full table from the cost model.
    """
    from picker.recommend.contract import Recommendation

    if not isinstance(rec, Recommendation):
        rec = Recommendation.model_validate(rec)
    d = rec.decision
    tree = None if d.tree is None else TreeSpec(d.tree.depth, d.tree.topk, d.tree.num_draft_tokens)
    schedule = tuple((r.min_batch, r.max_batch, r.num_speculative_tokens) for r in d.batch_schedule)
    n_max = max([d.num_speculative_tokens, *(n for _, _, n in schedule)])
    source = "recommendation" if step_ratio is None else "cost_model"
    if step_ratio is None:
        step_ratio = flat_step_ratio(rec.break_even_accept_length, max(d.num_speculative_tokens, 1), n_max)
    # Rows whose best strategy is the deployed one carry its α (measured or cited prior); others
    # describe a different drafter, so those tasks fall back to the workload-weighted mean.
    rows = [r for r in rec.per_task if r.strategy == d.strategy and r.alpha is not None]
    prior = tuple((r.task, equivalent_chain_alpha(float(r.alpha), tree)) for r in rows)  # type: ignore[arg-type]
    weight = sum(r.weight for r in rows)
    default = sum(r.weight * a for r, (_, a) in zip(rows, prior)) / weight if weight > 0 else DEFAULT_ALPHA
    switch = d.temperature_switch
    return ControllerPlan(
        strategy=d.strategy, num_speculative_tokens=d.num_speculative_tokens, tree=tree, schedule=schedule,
        temperature_above=switch.above if switch.action == "disable" else None, step_ratio=step_ratio,
        prior_alpha=prior, default_alpha=default,
        cost_source=source)


def plan_from_profile(profile: WorkloadProfile, measurements: Measurements | None = None,
                      calibration: Calibration | None = None) -> tuple[Recommendation, ControllerPlan]:
    """Run ``recommend`` and build the plan with its R(n, batch) table (``Result.step_ratios``: the
    deployed shape cut to each n, priced by the recommendation's own cost source)."""
    from picker.recommend.pipeline import recommend

    result = recommend(profile, measurements, calibration=calibration)
    rec = result.recommendation
    plan = plan_from_recommendation(rec)
    if plan.strategy == "none":
        return rec, plan
    return rec, ControllerPlan(**{**plan.__dict__, "step_ratio": result.step_ratios, "cost_source": "cost_model"})

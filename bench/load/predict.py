"""Predict a published curve from its smallest batch: fix acceptance there, let the load curve do
the rest.

For a throughput curve at concurrency B the prediction is S(B) = E[L] · t_plain(B) / t_step(B)
(``policies.loadcurve.load_step_cost``). E[L] is the one thing taken from the curve: it is set so
the prediction at the curve's smallest batch equals the published value (through α for chains, so
a curve whose draft length changes along it, like MagicDec's "optimal length", carries α over;
directly for a tree). For an open-loop curve (QPS on the x axis, E2E latency speedup) the
concurrency each system runs at comes from Little's law, C = QPS · latency, solved as a fixed
point for the speculative system from the plain system's latency read off the same figure.

    >>> from bench.load.data import load_points
    >>> pts, _ = load_points()
    >>> rows = predict_curve([p for p in pts if "Fig.1a" in p.curve])
    >>> [r.anchor for r in rows]
    [True, False, False, False]
    >>> abs(rows[0].predicted - rows[0].point.value) < 1e-3
    True
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from bench.load.data import Point
from picker.inputs.hardware import get_hardware
from policies.costmodel import step_cost
from policies.loadcurve import EngineCurve, engine_curve, engine_defines, load_step_cost
from policies.roofline import ENGINES, ModelShape
from policies.scalar import chain_length, solve_alpha

_BISECT = 60


@dataclass(frozen=True)
class Prediction:
    point: Point
    predicted: float
    anchor: bool  # the point E[L] was fixed from (its error is zero by construction)
    alpha: float  # the acceptance the anchor implies (chains), or E[L]-1 over nodes (trees)
    regime: str  # of the verify forward

    @property
    def error(self) -> float:
        """Relative error of the prediction, (predicted − published) / published."""
        return self.predicted / self.point.value - 1.0


def curve_for(engine: str, overrides: Mapping[str, float] | None) -> EngineCurve:
    """The engine's curve with ``overrides`` applied only to constants it takes from the file's
    defaults (an engine that states its own value, e.g. eager ``hf``'s draft cost, keeps it)."""
    own = engine_defines(engine)
    return engine_curve(engine, {k: v for k, v in (overrides or {}).items() if k not in own})


def _length(p: Point, a: float) -> float:
    """E[L] at acceptance parameter ``a``: the i.i.d. chain, or 1 + a·nodes for a tree."""
    return 1.0 + a * p.k if p.tree_depth is not None else chain_length(a, p.k)


def _cost_ratio(p: Point, batch: int, curve: EngineCurve | None) -> tuple[float, float, str]:
    """(t_plain, t_step, verify regime) of point ``p``'s configuration at ``batch`` sequences;
    ``curve`` None: the old max(memory, compute) roofline (``policies.costmodel.step_cost``), the
    baseline the bench reports beside the load curve."""
    target = ModelShape.from_params(p.model_params)
    draft = ModelShape.from_params(p.draft_params) if p.draft_params else None
    if curve is None:
        engine = p.engine if p.engine in ENGINES else "vllm"
        old = step_cost(p.kind, target, get_hardware(p.hardware), batch, p.k, p.k + 1,  # type: ignore[arg-type]
                        p.context_len, engine, draft, p.tree_depth, p.devices)
        return old.plain_seconds, old.draft_seconds + old.verify_seconds, old.bound
    cost = load_step_cost(
        p.kind, target, get_hardware(p.hardware), batch, p.k, p.k + 1, p.context_len,  # type: ignore[arg-type]
        curve, draft, p.tree_depth, p.devices, draft_context_len=p.draft_context_len)
    return cost.plain_seconds, cost.draft_seconds + cost.verify_seconds, cost.regime


def _closed_loop(p: Point, curve: EngineCurve | None) -> tuple[Callable[[float], float], str]:
    plain, step, regime = _cost_ratio(p, max(1, round(p.x)), curve)
    return (lambda a: _length(p, a) * plain / step), regime


def _open_loop(p: Point, curve: EngineCurve | None) -> tuple[Callable[[float], float], str]:
    """Latency speedup at QPS x: C_plain = x · L_plain; the speculative system's latency ratio u
    solves u = tpot_sd(C_plain · u) / tpot_plain(C_plain) (Little's law, prefill ignored)."""
    c_plain = p.x * (p.latency_noSD_s or 1.0)
    plain, _, regime = _cost_ratio(p, max(1, round(c_plain)), curve)
    memo: dict[int, float] = {}

    def step_at(c: float) -> float:
        b = max(1, round(c))
        if b not in memo:
            memo[b] = _cost_ratio(p, b, curve)[1]
        return memo[b]

    def speedup(a: float) -> float:
        length = _length(p, a)
        lo, hi = 0.01, 50.0
        for _ in range(_BISECT):
            mid = 0.5 * (lo + hi)
            if mid < step_at(c_plain * mid) / length / plain:
                lo = mid
            else:
                hi = mid
        return 1.0 / hi

    return speedup, regime


def predict_curve(
    points: list[Point], overrides: Mapping[str, float] | None = None, *, roofline: bool = False,
) -> list[Prediction]:
    """Predictions for one curve's points, E[L] fixed at its smallest x (see module docstring);
    ``roofline``: with the old roofline step cost instead of the load curve (the baseline)."""
    curve = None if roofline else curve_for(points[0].engine, overrides)
    models = {id(p): (_open_loop if p.x_kind == "qps" else _closed_loop)(p, curve) for p in points}
    smallest = min(p.x for p in points)
    anchors = [p for p in points if p.x == smallest]
    # α (or E[L]) at which the anchor points' mean prediction meets their mean published value.
    target = sum(p.value for p in anchors) / len(anchors)
    alpha = solve_alpha(lambda a: sum(models[id(p)][0](a) for p in anchors) / len(anchors), target)
    return [Prediction(p, models[id(p)][0](alpha), p.x == smallest, alpha, models[id(p)][1])
            for p in sorted(points, key=lambda q: (q.x, q.k))]


def by_curve(points: list[Point]) -> dict[str, list[Point]]:
    """Points grouped into curves; curves with a single x cannot be predicted and are dropped."""
    groups: dict[str, list[Point]] = defaultdict(list)
    for p in points:
        groups[p.curve].append(p)
    return {k: v for k, v in groups.items() if len({p.x for p in v}) > 1}

"""The core speedup model: tokens per step over the step cost, for one candidate row.

:func:`base_speedup` is the analytic model -- E[L] over the step cost -- in pure Python, so the
default ``specpick recommend`` path never imports numpy. It reads a
:class:`~policies.evidence.Candidate` and nothing else.

    >>> from picker.engine.plugins import Capabilities
    >>> from policies.evidence import Candidate, CostEvidence, Evidence
    >>> ev = Evidence(alpha=0.8, alpha_low=0.7, alpha_high=0.9,
    ...               cost=CostEvidence(draft_unit=0.1, verify=((1, 1.0), (8, 1.2))))
    >>> c = Candidate(Capabilities(needs_draft_model=True), depth=4, evidence=ev)
    >>> round(expected_length(c), 3), round(step_ratio(c), 3), round(base_speedup(c), 3)
    (3.362, 1.552, 2.167)

Step cost with measured evidence (units of one plain decode step, batch B, N drafts):
``R = units·d + f·v(B·m) + (1 − f)`` where ``units`` are the draft forwards a step runs for this
draft-cost kind, ``d`` the measured cost of one, ``m`` the verified tokens per sequence, ``v`` the
verify-time curve against tokens in flight (``picker.profiler.sweep``) anchored to the loop's own measured
ratio, and ``f`` the share of steps that drafted (prompt lookup drafts only on a match). Tokens per
step are ``1 / (φ/E[L] + 1 − φ)`` with φ the share of output emitted by drafting steps -- φ carries
across N, f does not. Without measured costs R comes from the roofline
(``policies.analytic.config_cost``). With a fixed per-generation time F (prefill) over T output
tokens the end-to-end speedup is ``(F + T − 1) / (F + S·R)`` with ``S`` the decode steps a
generation takes (:func:`steps_per_generation`: (T − 1)/L plus the last step's surplus cut at the
output limit) -- what a tokens/s measurement that includes the prefill sees.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterator, Sequence

from picker.engine.plugins import Capabilities
from policies.analytic import chain, config_cost
from policies.analytic import expected_length as analytic_length
from policies.evidence import Candidate, CostEvidence, Evidence

# How far the load curve's speedups stray from published ones it was not fitted on: 80 % of the 60
# held-out points of bench/load/README.md (vLLM, gpt-fast and eager-PyTorch runs; no curve constant is
# fitted on them) lie within this relative error (nearest rank; tests/test_estimate_cli.py recomputes it).
# A predicted speedup's range carries it (picker.recommend.uncertainty): the model's own error, beside
# the spread of the evidence it reads.
HELD_OUT_ERROR = 0.155
HELD_OUT_SHARE = 0.8
# The same on CPU deployments, where step times are the shared cores' and the engines' fixed costs
# weigh most: 80 % of 60 held-out gains measured interleaved on the reference loop (the zoo at
# concurrency 1, 4, 16) and on llama.cpp (the Qwen2.5-Coder 1.5B/0.5B pair, two runs) lie within
# this of the recommender's prediction made without them (python -m bench.regret.coverage; fitted on
# the zoo alone, 0.362, it covers 96 % of the llama.cpp points; on llama.cpp alone, 0.325, 83 % of the zoo's).
CPU_HELD_OUT_ERROR = 0.325


def _reach(per_position: Sequence[float], tail: float, n: int) -> Iterator[float]:
    """P(L > k) = Π_{j≤k} a_j for k = 1..N; positions beyond the measured ones accept with ``tail``."""
    reach = 1.0
    for i in range(n):
        reach *= per_position[i] if i < len(per_position) else tail
        yield reach


def chain_length_positions(per_position: Sequence[float], tail: float, n: int) -> float:
    """E[L] = 1 + Σ_{i≤N} Π_{j≤i} a_j; positions beyond the measured ones accept with ``tail``."""
    return 1.0 + sum(_reach(per_position, tail, n))


def _measured_chain(c: Candidate) -> bool:
    """A chain scored from its measured per-position rates (not lookahead's τ, a tree or bare α)."""
    ev = c.evidence
    return not c.is_tree and bool(ev.per_position) and not (c.caps.draft_cost == "in_forward" and ev.tau is not None)


def drafted_length(c: Candidate, alpha: float | None = None) -> float:
    """E[L] of a step that drafted (bonus included); ``alpha`` moves the evidence's α (per-position
    rates scaled alike, as :meth:`Evidence.at`)."""
    ev = c.evidence
    a = _clamped_alpha(ev, alpha)
    if _measured_chain(c):
        return chain_length_positions(_positions(ev, alpha), a, c.depth)
    if c.caps.draft_cost == "in_forward" and ev.tau is not None:
        # Lookahead: the Jacobi n-gram pool, not N, bounds what a step accepts (its per-position
        # rates change with the n-gram size, so a chain model from one N does not carry; seen on
        # the zoo: tokens per step flat within ±15% over N = 1..8). The measured τ, moved with α.
        return 1.0 + (ev.tau - 1.0) * (a / ev.alpha if ev.alpha > 0 else 0.0)
    # i.i.d. chain, or the best tree under the sibling model: measured sibling odds where the
    # profile has them, else α for every rank.
    return analytic_length(c.config, a, ev.siblings if c.is_tree else ())


def _clamped_alpha(ev: Evidence, alpha: float | None) -> float:
    return min(max(ev.alpha if alpha is None else alpha, 0.0), 1.0)


def _positions(ev: Evidence, alpha: float | None) -> Sequence[float]:
    if alpha is None:
        return ev.per_position
    scale = alpha / ev.alpha if ev.alpha > 0 else 0.0
    return [min(1.0, p * scale) for p in ev.per_position]


def drafted_moment(c: Candidate, alpha: float | None = None) -> float | None:
    """E[L(L − 1)] of a step that drafted: what sets how far the step crossing the output limit
    overshoots it. A chain with measured per-position rates has the whole distribution of L,
    so E[L(L − 1)] = 2 Σ_k k·P(L > k); elsewhere (trees, lookahead's measured τ, no positions)
    None: L is taken as constant (:func:`steps_per_generation`)."""
    if not _measured_chain(c):
        return None
    reach = _reach(_positions(c.evidence, alpha), _clamped_alpha(c.evidence, alpha), c.depth)
    return 2.0 * sum(k * r for k, r in enumerate(reach, start=1))


def draft_step_share(share: float, length: float) -> float:
    """f: the share of steps that drafted, when a share φ of the output comes from drafting steps of
    E[L] tokens each and the rest one token per step (prompt lookup finds no match there).

    φ is a property of the text (how much of it a lookup can match), so it carries across N; f is
    not: longer drafts cover the matched text in fewer steps, leaving a larger share of steps unmatched.
    """
    drafted = share / length
    return drafted / (drafted + 1.0 - share) if drafted + 1.0 - share > 0 else 1.0


def expected_length(c: Candidate, alpha: float | None = None) -> float:
    """Tokens per step, bonus included: 1 / (φ / E[L] + 1 − φ) (φ = 1: every step drafts)."""
    return _mixed_length(drafted_length(c, alpha), _share(c))


def _share(c: Candidate) -> float:
    """φ: the measured costs' where they exist, else the one measured with the acceptance."""
    return c.evidence.cost.draft_share if c.evidence.cost is not None else c.evidence.draft_share


def _mixed_length(drafted: float, share: float) -> float:
    return 1.0 / (share / drafted + 1.0 - share)


def draft_units(caps: Capabilities, c: Candidate) -> int:
    """Sequential draft forwards per step for this draft-cost kind (what ``d`` is counted in).

    Chains of N from a draft model or an EAGLE layer take N forwards, the catch-up over the tokens
    just accepted folded into the first (the reference loop and vLLM do this; SGLang runs a separate
    "draft extend", which a measured ``d`` then absorbs); a tree takes one forward per depth level.
    """
    if caps.draft_cost in ("draft_model", "target_layer"):
        return c.depth
    if caps.draft_cost in ("heads", "cpu_lookup"):
        return 1
    return 0  # in_forward: the guesses ride in the verify forward


def curve_ratio(curve: Sequence[tuple[float, float]], tokens: float) -> float:
    """T(tokens)/T(1) from a measured curve: log-log interpolation, linear beyond its end."""
    xs = [x for x, _ in curve]
    ys = [y for _, y in curve]
    if tokens <= xs[0]:
        return ys[0]
    if tokens >= xs[-1]:
        slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2]) if len(xs) > 1 else 0.0
        return ys[-1] + max(slope, 0.0) * (tokens - xs[-1])
    i = bisect.bisect_right(xs, tokens)
    w = (math.log(tokens) - math.log(xs[i - 1])) / (math.log(xs[i]) - math.log(xs[i - 1]))
    return math.exp(math.log(ys[i - 1]) + w * (math.log(ys[i]) - math.log(ys[i - 1])))


def step_ratio(c: Candidate) -> float:
    """Seconds of one speculative step over one plain decode step at the same batch size."""
    cost = c.evidence.cost
    if cost is not None and cost.step_points:
        return _points_at_batch(c, cost, points_ratio(cost.step_points, float(c.nodes)))
    if cost is None or not cost.verify:
        if c.ctx is None:
            raise ValueError("a candidate needs measured costs or a roofline context (ctx)")
        # Steps that find nothing to draft cost a plain step: the model's ratio holds for the rest.
        f = _drafting(c, _share(c))
        return f * config_cost(c.caps, c.config, c.ctx, c.batch, sampled=c.temperature > 0).step_ratio + (1.0 - f)
    f = _drafting(c, cost.draft_share)
    m = 1.0 + cost.nodes_per_token * c.nodes
    b = max(c.batch / cost.batch, 1.0)  # the curve's "one sequence" is the concurrency it was measured at
    plain = curve_ratio(cost.verify, b)
    # A batch of B sequences with m tokens each is read as B·m tokens in flight (stated in picker.profiler.sweep).
    verify = curve_ratio(cost.verify, b * m) / plain
    units = draft_units(c.caps, c) * tree_width(c, cost.verify)
    drafting = (cost.draft_fixed + units * cost.draft_unit) if units else 0.0
    if units and cost.unsplit_units and not c.is_tree and c.ctx is not None \
            and c.caps.draft_cost in ("draft_model", "target_layer"):
        drafting = cost.unsplit_units * cost.draft_unit * _draft_shape(c, round(cost.unsplit_units), cost.batch)
    return drafting * _draft_at_batch(c, cost.batch) + f * verify + (1.0 - f)


def _draft_shape(c: Candidate, n0: int, b0: int) -> float:
    """The cost model's draft time of the candidate's chain over a chain of ``n0`` (the measured one).

    One measured length cannot split a drafter's per-step cost into a fixed part and a part per
    forward; read as all per-forward (d₀ = 0), a chain of 1 costs a quarter of a measured chain of 4.
    A model drafter's step also pays the catch-up forward and per-sequence host work whatever its
    length, and the load curve prices both, so its ratio between the two lengths carries the
    measurement instead."""
    sampled = c.temperature > 0
    at, base = (config_cost(c.caps, cfg, c.ctx, b0, sampled=sampled).draft_seconds  # type: ignore[arg-type]
                for cfg in (c.config, chain(n0)))
    return at / base if base > 0 and at > 0 else c.depth / n0


def _draft_at_batch(c: Candidate, b0: int) -> float:
    """How much more (or less) of a plain step the drafting takes at the candidate's batch than at
    ``b0``, where it was measured: the load curve's draft seconds over plain seconds at each.

    The verify part needs no such factor (it reads the measured curve at B·m tokens in flight), but
    the drafting cost measured at one concurrency would otherwise hold in plain-step units at every
    batch: an eager drafter's host work per sequence (the calibrated ``*_host_s_per_seq`` terms)
    grows with requests while a plain step's grows less. 1 without a cost context, at ``b0`` itself,
    or where the curve prices no drafting."""
    if c.ctx is None or c.batch == b0:
        return 1.0
    sampled = c.temperature > 0
    at, base = (config_cost(c.caps, c.config, c.ctx, b, sampled=sampled) for b in (c.batch, b0))
    if at.plain_seconds <= 0 or base.plain_seconds <= 0 or base.draft_seconds <= 0:
        return 1.0
    return (at.draft_seconds / at.plain_seconds) / (base.draft_seconds / base.plain_seconds)


def _points_at_batch(c: Candidate, cost: CostEvidence, ratio: float) -> float:
    """A step ratio measured end to end at one concurrency, carried to the candidate's batch.

    The measurement says what a step costs at ``cost.batch``; how that changes with the
    batch it cannot say. The load curve can: its drafting step's ratio at the candidate's batch over
    its ratio at the measured one scales the measured drafting steps' ratio (steps that found nothing
    to draft stay at one plain step). An assumption, stated: the engine is off the model by the same
    factor at every batch. Before this, a ratio measured at concurrency 1 held at every batch, so a
    CPU deployment whose verify goes compute-bound at four sequences kept its batch-1 gain at 512.
    """
    b0, f = cost.batch, _drafting(c, cost.draft_share)
    if c.ctx is None or c.batch == b0 or f <= 0:
        return ratio
    sampled = c.temperature > 0
    scale = (config_cost(c.caps, c.config, c.ctx, c.batch, sampled=sampled).step_ratio
             / config_cost(c.caps, c.config, c.ctx, b0, sampled=sampled).step_ratio)
    # ratio = f * drafting + (1 - f): only the drafting steps' part, f * drafting, is scaled.
    return max((ratio - (1.0 - f)) * scale + (1.0 - f), 1.0)


def _drafting(c: Candidate, share: float) -> float:
    """f, the share of steps that draft, from φ (:func:`draft_step_share`; 1 when every step drafts)."""
    return draft_step_share(share, drafted_length(c)) if share < 1.0 else 1.0


def tree_width(c: Candidate, curve: Sequence[tuple[float, float]]) -> float:
    """A tree's drafting forwards in chain-forward units, per depth: the first depth drafts from the
    one root, each later one runs the drafter over the ``topk`` nodes it expands. The drafter's own
    cost at k tokens is not measured (the profile drafts chains); the verify curve's rise from 1 to
    k tokens stands in for it. Before this, a tree counted one chain forward per depth whatever its
    top-k: the zoo's EAGLE-3 trees at top-k 4 drafted 17-32% more per step than chains of their depth.
    1 for chains and for drafters whose cost does not grow with the depth forwards."""
    if not c.is_tree or c.topk <= 1 or c.depth <= 1 or c.caps.draft_cost not in ("draft_model", "target_layer"):
        return 1.0
    return (1.0 + (c.depth - 1) * curve_ratio(curve, float(c.topk))) / c.depth


def steps_per_generation(length: float, out_tokens: float, drafted: float | None = None,
                         moment: float | None = None) -> float:
    """Decode steps to emit ``out_tokens`` (the prefill emits the first) at ``length`` tokens a step.

    The last step's surplus is cut at the output limit: by renewal theory the step that crosses the
    limit overshoots it by E[L(L − 1)] / (2 E[L]) tokens. ``moment`` is E[L(L − 1)] of a drafting
    step (:func:`drafted_moment`); without it L is taken as constant: (L − 1)/2. When only some
    steps draft (``drafted`` = E[L] of those, the rest emit one token, as prompt lookup without a
    match) the long steps are the ones that cross the limit: a share f of steps gives
    f·E[L(L − 1)] / (2 E[L]) over all steps, more than (L − 1)/2 at the same mean. Over a few hundred
    tokens this is noise; over 48 tokens at L = 8 it is one step in eight, which a bare T/L would
    leave out (seen on the zoo as tokens per step 7.7 against an accept length of 8.3).
    """
    decode = max(out_tokens - 1.0, 0.0)
    if decode <= 0:
        return 0.0
    mixed = drafted is not None and drafted > length > 1.0
    e = drafted if mixed else length
    f = (length - 1.0) / (e - 1.0) if mixed else 1.0  # the share of steps that draft: L = f·E + (1 − f)
    surplus = f * (e * (e - 1.0) if moment is None else moment) / (2.0 * length)
    return max((decode + surplus) / length, 1.0)


def points_ratio(points: Sequence[tuple[float, float]], n: float) -> float:
    """R at ``n`` draft tokens from measured (N, R) points: piecewise linear, continued beyond the
    last point with the last segment's slope (never falling). Below the shortest measured length the
    first measured segment is extended (not bent to (0, 1)): turning speculation on has a fixed cost
    per step -- vLLM's prompt lookup at N = 1 ran 0.74-1.18x plain where its accept lengths alone
    promise 1.5-2x -- floored at 1 (a step never costs less than a plain one). With one point, the
    line through (0, 1) and it."""
    measured = sorted((float(a), float(b)) for a, b in points if a > 0)
    if len(measured) >= 2 and n < measured[0][0]:
        (x0, y0), (x1, y1) = measured[0], measured[1]
        return max(1.0, y0 - (y1 - y0) / (x1 - x0) * (x0 - n))
    pts = [(0.0, 1.0), *measured]
    for (x0, y0), (x1, y1) in itertools.pairwise(pts):
        if n <= x1:
            return y0 + (y1 - y0) * (n - x0) / (x1 - x0)
    (x0, y0), (x1, y1) = pts[-2], pts[-1]
    return y1 + max((y1 - y0) / (x1 - x0), 0.0) * (n - x1)


def generation_steps(c: Candidate, alpha: float | None = None) -> float:
    """Decode steps of one generation of the evidence's output length (:func:`steps_per_generation`
    at this candidate's tokens per step; its drafting steps' length where only some steps draft)."""
    cost = c.evidence.cost
    if cost is None or cost.output_tokens <= 1:
        raise ValueError("generation steps need measured costs with an output length")
    drafted = drafted_length(c, alpha)
    length = _mixed_length(drafted, cost.draft_share)
    return steps_per_generation(length, cost.output_tokens, drafted if cost.draft_share < 1.0 else None,
                                drafted_moment(c, alpha))


def _speedup(c: Candidate, ratio: float, alpha: float | None = None) -> float:
    cost = c.evidence.cost
    if cost is not None and cost.output_tokens > 1:
        # Plain decoding: the fixed time F (prefill, set-up) and T − 1 one-token steps.
        decode, fixed = cost.output_tokens - 1.0, cost.fixed_steps
        return (fixed + decode) / (fixed + generation_steps(c, alpha) * ratio)
    return expected_length(c, alpha) / ratio


def base_speedup(c: Candidate, ratio: float | None = None) -> float:
    """The analytic model: tokens/s with this configuration over plain decoding.

    ``ratio`` is :func:`step_ratio` when the caller has it cached (it does not depend on α).
    """
    return _speedup(c, step_ratio(c) if ratio is None else ratio)


def base_range(c: Candidate, ratio: float | None = None) -> tuple[float, float, float]:
    """(mean, low, high) analytic speedup over the evidence's α range."""
    ev = c.evidence
    r = step_ratio(c) if ratio is None else ratio
    mean = _speedup(c, r)
    lo = _speedup(c, r, ev.alpha_low)
    hi = _speedup(c, r, ev.alpha_high)
    return mean, min(lo, mean), max(hi, mean)


"""Evidence from measured cells: a profiler summary cell (``summary.json``, or a live engine's) read
into the :class:`~policies.evidence.Evidence` and :class:`~policies.evidence.CostEvidence` that
candidates carry -- α and per-position acceptance with their interval, measured sibling odds, step
costs in plain-step units (drafting split into per step and per forward from two chain lengths, the
verify curve anchored to the loop's own measured ratio), and, for engines that report no step
timings, the step ratio a cell's end-to-end speedup implies.

The analytic model that scores those candidates is :mod:`policies.speedup_model`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from picker.engine.plugins import Capabilities
from policies.evidence import Candidate, CostEvidence, Evidence
from policies.speedup_model import curve_ratio, draft_units, steps_per_generation

# Anchoring the forward-only verify curve to the loop's measured ratio: below this rise the
# measured point says nothing about the scale; the scale is clipped to a plausible dilution.
ANCHOR_MIN_RISE = 0.05
ANCHOR_SCALE = (0.2, 2.0)


def _num(cell: Any, key: str) -> float | None:
    value = cell.get(key) if isinstance(cell, dict) else getattr(cell, key, None)
    return None if value is None else float(value)


def _get(cell: Any, key: str) -> Any:
    return cell.get(key) if isinstance(cell, dict) else getattr(cell, key, None)


def _draft_per_step(cell: Any, caps: Capabilities) -> tuple[int, float] | None:
    """(draft forwards a step runs, drafting seconds per step in plain-step units) of a chain cell;
    None when the cell has no step timings. Draft seconds are counted over every step: a lookup
    runs even where it finds nothing."""
    n = int(_num(cell, "num_draft_tokens") or 0)
    steps, v = _num(cell, "decode_steps"), _num(cell, "v_vs_plain_forward")
    per_token, ver = _num(cell, "draft_s_per_token"), _num(cell, "verify_s_per_step")
    if not (n and steps and v and ver):
        return None
    draft_s = (per_token or 0.0) * (_num(cell, "draft_tokens") or 0.0)
    return draft_units(caps, Candidate(caps, depth=n)), draft_s / steps / (ver / v)


def split_draft_cost(cell: Any, probe: Any, caps: Capabilities) -> tuple[float, float] | None:
    """(d₀, d): per-step and per-forward drafting cost from two chains of different length.

    One chain cell cannot tell a per-step cost (the drafter's bookkeeping, the catch-up forward over
    the tokens just accepted, the cache rollback) from the per-forward one: it charges everything
    per forward, so shorter chains come out cheaper than they are (on the zoo the draft model's
    N = 1 steps cost 1.5x the per-forward figure of N = 8). A second chain of another length fixes
    the line through both. None when the two do not determine a line with d₀ ≥ 0 and d > 0.
    """
    a, b = _draft_per_step(cell, caps), _draft_per_step(probe, caps)
    if a is None or b is None or a[0] == b[0] or not a[0] or not b[0]:
        return None
    (ua, sa), (ub, sb) = a, b
    unit = (sa - sb) / (ua - ub)
    fixed = sa - ua * unit
    if unit <= 0 or fixed < 0:
        return None
    return fixed, unit


def cost_from_cell(cell: Any, caps: Capabilities,
                   curve: Sequence[tuple[float, float]] | None = None, probe: Any = None) -> CostEvidence | None:
    """Step costs in plain-step units from one measured chain cell (``summary.json``); ``probe``, a
    chain cell of the same strategy at another length, splits the drafting cost (:func:`split_draft_cost`).

    Plain step = the cell's verify seconds per step / ``v_vs_plain_forward``. Without a measured
    verify curve, the cell's own verify ratio at its tokens per step is the curve's second point
    (log-log interpolation through (1, 1)): good near the profiled N, rougher far from it.
    """
    own = _draft_per_step(cell, caps)
    if own is None:
        return None
    units, per_step = own
    n = int(_num(cell, "num_draft_tokens") or 0)
    # Present whenever _draft_per_step answered; the defaults only satisfy the type checker.
    steps = _num(cell, "decode_steps") or 1.0
    v, ver = _num(cell, "v_vs_plain_forward") or 1.0, _num(cell, "verify_s_per_step") or 0.0
    drafted, draft_steps = _num(cell, "draft_tokens") or 0.0, _num(cell, "draft_steps") or 0.0
    plain = ver / v
    draft_s = per_step * steps * plain
    unit = per_step / units if units else 0.0
    rate = draft_steps / steps
    tokens, samples = _num(cell, "tokens"), _num(cell, "samples")
    share = draft_share(cell)
    nodes = (drafted / draft_steps / n) if draft_steps else 1.0
    seconds = _num(cell, "seconds")
    fixed = out = 0.0
    if seconds and tokens and samples:
        # Wall time outside draft and verify (prefill, tokenizing, emitting), per generation.
        fixed = max(seconds - draft_s - ver * steps, 0.0) / samples / plain
        out = tokens / samples
    m = 1.0 + nodes * n
    # The cell's mean verify ratio mixes steps that drafted (ratio v_m) with ones that did not (1).
    v_m = max((v - (1.0 - rate)) / rate if rate else v, 1.0)
    split = split_draft_cost(cell, probe, caps) if probe is not None and units else None
    d0, unit = split if split is not None else (0.0, unit)
    return CostEvidence(unit, share, nodes, fixed, out, anchored_curve(curve, m, v_m), d0,
                        batch=int(_num(cell, "concurrency") or 1), unsplit_units=0.0 if split is not None else units)


def anchored_curve(curve: Sequence[tuple[float, float]] | None, m: float,
                   v_m: float) -> tuple[tuple[float, float], ...]:
    """The verify curve as the decode loop sees it: the forward-only curve's shape, its rise scaled
    so that it passes through the ratio the profiled cell measured in the loop (``v_m`` at ``m``).

    The loop's verify step carries fixed work besides the forward (the verifier, the cache
    rollback), which dilutes the forward's rise; one measured point fixes the dilution. Without a
    curve, the measured point and (1, 1) are the curve (log-log between, linear beyond).
    """
    if not curve or len(curve) < 2:
        return ((1.0, 1.0), (m, v_m)) if m > 1 else ((1.0, 1.0),)
    rise = curve_ratio(curve, m) - 1.0
    scale = min(max((v_m - 1.0) / rise, ANCHOR_SCALE[0]), ANCHOR_SCALE[1]) if rise > ANCHOR_MIN_RISE else 1.0
    return tuple((x, 1.0 + scale * (y - 1.0)) for x, y in curve)


# Pseudo-rejections at the textbook value α behind each measured sibling rate: a greedy chain with
# α near 1 is rejected a handful of times in a cheap profile, and one rejection is no rate.
SIBLING_PRIOR_WEIGHT = 2.0


def sibling_rates(rates: Sequence[float | None], reached: Sequence[float], alpha: float) -> tuple[float, ...]:
    """Measured conditional sibling rates (ranks 2..), each shrunk towards α by its evidence:
    (s·n + w·α) / (n + w), ``w`` = :data:`SIBLING_PRIOR_WEIGHT`; n unknown (hand-written): as given.

        >>> sibling_rates([0.25, 1.0], [40.0, 1.0], 0.9)
        (0.281, 0.9333)
    """
    out = []
    for i, s in enumerate(rates):
        if s is None:
            break
        n = float(reached[i]) if i < len(reached) else None
        out.append(round(float(s) if n is None else (float(s) * n + SIBLING_PRIOR_WEIGHT * alpha)
                         / (n + SIBLING_PRIOR_WEIGHT), 4))
    return tuple(out)


def draft_share(cell: Any) -> float:
    """φ: the output of drafting steps (each emits its accepted drafts + one) over the output of all
    steps, counted before the output limit cuts the last step: the emitted total (less one prefill
    token per generation) leaves out the cut tokens, which only drafting steps have, so it would
    overstate φ where a drafting step often crosses the limit. 1 when every step drafted.

        >>> draft_share({"decode_steps": 100, "draft_steps": 20, "accepted_tokens": 30})
        0.38461538461538464
    """
    steps, draft_steps = _num(cell, "decode_steps"), _num(cell, "draft_steps")
    accepted = _num(cell, "accepted_tokens")
    if not steps or draft_steps is None or accepted is None or draft_steps >= steps:
        return 1.0
    drafting = draft_steps + accepted
    return min(1.0, drafting / (drafting + steps - draft_steps))


def evidence_from_cell(cell: Any, caps: Capabilities, curve: Sequence[tuple[float, float]] | None = None,
                       citation: str = "", probe: Any = None) -> Evidence:
    """Measured evidence from one chain cell: α (accepted / examined positions), its interval,
    per-position acceptance, and the step costs of :func:`cost_from_cell`."""
    alpha = _num(cell, "alpha_iid")
    ci = _get(cell, "alpha_iid_ci")
    if alpha is None:  # hand-written files carry only accepted / proposed
        alpha, ci = _num(cell, "alpha") or 0.0, _get(cell, "alpha_ci")
    lo, hi = (float(ci[0]), float(ci[1])) if ci else (alpha, alpha)
    pp = tuple(float(p) for p in (_get(cell, "per_position") or ()) if p is not None)
    tau = _num(cell, "tau")
    sib = sibling_rates(_get(cell, "sibling_accept") or (), _get(cell, "sibling_reached") or (), alpha)
    return Evidence(alpha, min(lo, alpha), max(hi, alpha), "measured", pp,
                    cost_from_cell(cell, caps, curve, probe), (citation,) if citation else (), tau, sib,
                    draft_share(cell))


def live_step_ratio(cell: Any) -> tuple[float, float] | None:
    """(N, R): the step ratio a live chain cell implies -- speedup s = (T − 1) / (S·R) with S the decode
    steps per request -- for engines that report tokens/s and acceptance but no step timings (vLLM,
    llama.cpp). S is the steps the engine counted where it reports them (the last step already cut at
    the output limit: adding :func:`steps_per_generation`'s overshoot to the emitted tokens per step
    would count the cut twice, and predictions at this N would come out (L − 1)/(2(T − 1)) too high),
    else :func:`steps_per_generation` at the accept length. The prefill and request overhead are
    folded into R (no fixed term: the engine does not report it). None without a speedup or acceptance."""
    n, s = _num(cell, "num_draft_tokens"), _num(cell, "speedup_vs_plain")
    tokens, samples, tau = _num(cell, "tokens"), _num(cell, "samples"), _num(cell, "tau")
    if not (n and s and tokens and samples and tau):
        return None
    steps, forwards = _num(cell, "decode_steps"), _num(cell, "target_forwards")
    # Requests: one prefill forward each (a live sample is a wave of requests, a prompt has turns).
    requests = forwards - steps if forwards and steps and forwards > steps else samples
    out = tokens / requests
    per_request = steps / requests if steps else steps_per_generation(max(tau, 1.0), out)
    return n, (out - 1.0) / (per_request * s)


def live_step_points(cells: Sequence[Any]) -> tuple[tuple[float, float], ...]:
    """(N, median R) over live chain cells (any task: the step cost does not depend on the text)."""
    by_n: dict[float, list[float]] = {}
    for cell in cells:
        point = live_step_ratio(cell)
        if point is not None:
            by_n.setdefault(point[0], []).append(point[1])
    return tuple((n, sorted(rs)[len(rs) // 2]) for n, rs in sorted(by_n.items()))

"""Latency from the load curve: TTFT, inter-token latency (p50, p99) and mean TPOT of one request
in a closed loop of ``batch`` requests, plain or speculative.

The quantities are the ones ``specpick profile`` measures (docs/latency.md) and serving teams gate
rollouts on; the model reads the same step costs the plan prices its speedups with:

- **One step is one ITL gap.** A speculative step's accepted tokens (E[L] on average, the bonus
  token included) are emitted together, at the end of the step, as one chunk: ``vllm bench serve``
  and the profiler count that as one gap. A step that accepts nothing still costs a whole
  draft + verify step and emits one token, so the ITL distribution is the *step-time*
  distribution: its p99 is about the full step time however good α is, while the mean time per
  output token is step time / E[L].
- **Other requests' prefills land in the gaps.** In a closed loop of ``batch`` requests each slot
  turns over once per request lifetime (1 prefill + G decode steps, G = (n − 1) / E[L]), so one
  request's gap holds on average λ = (batch − 1) / (G + 1) other prompts' prefills (an engine
  without mixed prefill-decode batches runs each in a step of its own, the others waiting; with
  chunked prefill it rides in the step and lengthens it by about as much). The number per gap is
  taken as Poisson(λ), all K admitted into one forward: gap = step + prefill(K prompts), linear in
  K where prefill is compute-bound. Shorter requests (speculation shortens them in steps) turn over
  faster, so speculation also raises λ; per token the prefill work is the same.
- **TTFT** is the prompt's prefill forward (one prompt of ``prompt_tokens`` on its own) plus, for a
  drafter that keeps its own KV cache (a draft model, an EAGLE layer), its prefill of the same
  prompt. No queueing: in a closed loop a request starts when a slot frees.

    >>> lat = latency(step_seconds=0.012, tokens_per_step=3.0, prefill_s=0.030, ttft_s=0.035,
    ...               output_tokens=256, batch=1)
    >>> round(lat.itl_ms_p99, 1), round(lat.tpot_ms_mean, 1), lat.ttft_ms
    (12.0, 4.0, 35.0)
    >>> busy = latency(0.012, 3.0, 0.030, 0.035, output_tokens=256, batch=64)
    >>> round(busy.prefills_per_gap, 2), round(busy.itl_ms_p99, 1)  # p99 gap holds prefills
    (0.73, 102.0)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from picker.engine.plugins import DraftCost
from policies.analytic import CostContext
from policies.costmodel import DEFAULT_DRAFT_FRACTION, eagle_layer_shape
from policies.loadcurve import EngineCurve, engine_curve, forward, load_step_cost
from policies.roofline import HardwareLike, ModelShape

# Drafters that keep their own KV cache of the prompt, so they prefill it too (a lookup, Medusa
# heads on the last hidden state and lookahead's Jacobi window have nothing to prefill).
PREFILLING_DRAFTERS: frozenset[str] = frozenset({"draft_model", "target_layer"})
P50, P99 = 0.50, 0.99


@dataclass(frozen=True)
class Latency:
    """One request's latency figures, milliseconds, at one batch size (see the module docstring)."""

    ttft_ms: float
    itl_ms_p50: float
    itl_ms_p99: float
    tpot_ms_mean: float
    step_ms: float  # one step of the whole batch, without other requests' prefills
    tokens_per_step: float  # E[L]: tokens a step emits per sequence (1 for plain decoding)
    prefills_per_gap: float  # λ: other requests' prefills one gap holds on average


def poisson_quantile(lam: float, q: float) -> int:
    """The smallest k with P(K <= k) >= q for K ~ Poisson(``lam``)."""
    if lam <= 0.0:
        return 0
    term = total = math.exp(-lam)
    k = 0
    while total < q and k < 10_000:
        k += 1
        term *= lam / k
        total += term
    return k


def gap_quantile(atoms: Sequence[tuple[float, float]], q: float) -> float:
    """The q-quantile (inverted CDF, as the profiler's) of a distribution of (value, probability) atoms."""
    return gap_quantiles(atoms, (q,))[0]


def gap_quantiles(atoms: Sequence[tuple[float, float]], qs: Sequence[float]) -> tuple[float, ...]:
    """:func:`gap_quantile` at each of ``qs`` (ascending), from one sort of the atoms."""
    total = sum(p for _, p in atoms)
    if total <= 0:
        return tuple(0.0 for _ in qs)
    out: list[float] = []
    acc, i = 0.0, 0
    for value, p in sorted(atoms):
        acc += p / total
        while i < len(qs) and acc >= qs[i] - 1e-12:
            out.append(value)
            i += 1
        if i == len(qs):
            return tuple(out)
    top = max(v for v, _ in atoms)
    return (*out, *(top for _ in qs[i:]))


def joint_prefill(prefill_s: float, k: int, joint_share: float = 1.0) -> float:
    """Seconds of one forward prefilling ``k`` prompts together: the first costs ``prefill_s``, each
    further one ``joint_share`` of it (1: compute-bound, linear in tokens; near 0: per-forward
    overhead dominates, as on a tiny model)."""
    return 0.0 if k <= 0 else prefill_s * (1.0 + (k - 1) * joint_share)


def gap_atoms(step_s: float, prefill_s: float, lam: float, weight: float = 1.0,
              k_max: int = 64, joint_share: float = 1.0) -> list[tuple[float, float]]:
    """ITL gaps of one setting as atoms: step + the joint prefill of the k prompts that joined during
    it (Poisson(λ) probability; an engine admits every waiting prompt into the next step, so the k
    share one forward), scaled by ``weight`` (its share of all gaps, where several settings' gaps
    are pooled)."""
    if lam <= 0.0 or prefill_s <= 0.0:
        return [(step_s, weight)]
    out, p = [], math.exp(-lam)
    for k in range(k_max + 1):
        out.append((step_s + joint_prefill(prefill_s, k, joint_share), weight * p))
        p *= lam / (k + 1)
        if k > 2.0 * lam + 5 and p < 1e-15:
            break  # the rest of the tail is under 1e-14 of the mass (terms fall faster than by half): no quantile moves
    return out


def tpot_ms(step_s: float, atoms: Sequence[tuple[float, float]], tokens_per_step: float) -> float:
    """Mean TPOT of one setting, ms: its mean gap (the step plus the prefills its gaps hold, ``atoms``
    as :func:`gap_atoms` gives them, unscaled) over the tokens a step emits."""
    return 1e3 * (step_s + sum(p * (v - step_s) for v, p in atoms)) / max(tokens_per_step, 1e-9)


def prefills_per_gap(batch: int, output_tokens: float, tokens_per_step: float, requests: int | None = None) -> float:
    """λ = (batch − 1) / (G + 1), G = (n − 1) / E[L] decode steps per request (module docstring).

    ``requests``: a finite run of that many requests (a measured run): its first ``batch`` join together
    (their prefills are in their TTFT, no one's gap), and each later one lands in the gaps of the
    ``batch − 1`` running, so λ = (requests − batch)(batch − 1) / (requests · G); it tends to the
    steady state's as the run grows."""
    steps = max(output_tokens - 1.0, 1.0) / max(tokens_per_step, 1.0)
    if requests is not None:
        return max(requests - batch, 0) * max(batch - 1, 0) / (max(requests, 1) * steps)
    return max(batch - 1, 0) / (steps + 1.0)


def latency(step_seconds: float, tokens_per_step: float, prefill_s: float, ttft_s: float,
            output_tokens: float, batch: int, requests: int | None = None, joint_share: float = 1.0) -> Latency:
    """The latency figures of one setting (plain: ``tokens_per_step`` 1, ``step_seconds`` a plain step;
    ``requests``: a finite run, see :func:`prefills_per_gap`; ``joint_share``: see :func:`joint_prefill`)."""
    lam = prefills_per_gap(batch, output_tokens, tokens_per_step, requests)
    atoms = gap_atoms(step_seconds, prefill_s, lam, joint_share=joint_share)
    p50, p99 = gap_quantiles(atoms, (P50, P99))
    return Latency(ttft_ms=1e3 * ttft_s, itl_ms_p50=1e3 * p50, itl_ms_p99=1e3 * p99,
                   tpot_ms_mean=tpot_ms(step_seconds, atoms, tokens_per_step), step_ms=1e3 * step_seconds,
                   tokens_per_step=tokens_per_step, prefills_per_gap=lam)


def prefill_seconds(target: ModelShape, hw: HardwareLike, prompt_tokens: int, engine: str | EngineCurve,
                    num_devices: int = 1, *, drafter: DraftCost | None = None,
                    draft: ModelShape | None = None) -> tuple[float, float]:
    """(target's prefill, drafter's prefill) of one prompt on the load curve, seconds.

    The target's is one forward over the prompt's tokens (attention over the prompt itself); the
    drafter's is its own forward over them where it keeps a KV cache (:data:`PREFILLING_DRAFTERS`:
    a draft model, the cost model's default fraction of the target where none is given, or EAGLE's layer)."""
    curve = engine if isinstance(engine, EngineCurve) else engine_curve(engine)
    tokens = max(int(prompt_tokens), 1)
    target_s = forward(target, hw, tokens, 1, 0, curve, num_devices).seconds
    if drafter not in PREFILLING_DRAFTERS:
        return target_s, 0.0
    if drafter == "target_layer":
        shape = eagle_layer_shape(target)
    else:
        shape = draft if draft is not None else ModelShape.from_params(
            target.params * DEFAULT_DRAFT_FRACTION, target.bytes_per_param)
    return target_s, forward(shape, hw, tokens, 1, 0, curve, num_devices, role="draft").seconds


@dataclass(frozen=True)
class Share:
    """One share of a batch's traffic: its tokens' weight, step time, tokens per step and the
    prefill a request of it costs (the target's, plus its drafter's own where it has one)."""

    weight: float
    step_s: float
    tokens_per_step: float
    prefill_s: float
    joint_share: float = 1.0  # what each further prompt prefilled in the same forward adds (joint_prefill)


def pooled_latency(shares: Sequence[Share], output_tokens: float, batch: int) -> Latency:
    """The latency of a request drawn from ``shares`` (token-weighted): TTFT and mean TPOT averaged
    over tokens, the ITL quantiles of the pooled gaps (each share's gaps in proportion to its weight
    over its tokens per step). One share is :func:`latency` itself."""
    total = sum(s.weight for s in shares) or 1.0
    atoms: list[tuple[float, float]] = []
    tpot = ttft = step = length = 0.0
    for s in shares:
        # What latency() would give this share alone (its mean TPOT, TTFT, step), from its own gaps,
        # which then join the pool scaled by the share's part of all gaps.
        one = gap_atoms(s.step_s, s.prefill_s, prefills_per_gap(batch, output_tokens, s.tokens_per_step),
                        joint_share=s.joint_share)
        share = s.weight / total
        scale = share / max(s.tokens_per_step, 1e-9)
        atoms += [(v, p * scale) for v, p in one]
        tpot += share * tpot_ms(s.step_s, one, s.tokens_per_step)
        ttft += share * 1e3 * s.prefill_s
        step += share * 1e3 * s.step_s
        length += share * s.tokens_per_step
    lam = prefills_per_gap(batch, output_tokens, length)
    p50, p99 = gap_quantiles(atoms, (P50, P99))
    return Latency(ttft, 1e3 * p50, 1e3 * p99, tpot, step, length, lam)


def plain_step_seconds(ctx: CostContext, batch: int) -> float:
    """One plain decode step of ``batch`` sequences on ``ctx``'s load curve (every StepCost's
    ``plain_seconds`` is this one)."""
    return load_step_cost("cpu_lookup", ctx.target, ctx.hardware, batch, 0, 1, ctx.context_len, ctx.engine,
                          num_devices=ctx.num_devices).plain_seconds

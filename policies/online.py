"""Online update rules of the SDK Controller: a decayed Beta posterior over per-token acceptance,
a confidence gate with hysteresis against break-even, and a fast break-even inversion.

Pure functions and small frozen records, standard library only (the Controller imports this on a
serving hot path, so no numpy/scipy).

Conventions (docs/facts.md): α is the *conditional* per-token acceptance of the i.i.d. chain model, so
E[L] = (1 − α^(N+1)) / (1 − α) counts the bonus token. A chain step that drafts N and accepts k
has likelihood α^k (1 − α)^[k < N]: k successes and one failure if it stopped early, none if all N
were accepted. That is the conjugate update below — not vLLM's accepted/drafted rate, which counts
the never-tried tokens after the first rejection as failures and so underestimates α. For trees
the Controller uses the equivalent-chain α along the verified path (accepted path length over the
tree depth), and the break-even for the tree's step cost in that same convention.

    >>> s, f = chain_evidence(drafted=4, accepted=2)      # stopped at the third token
    >>> s, f
    (2.0, 1.0)
    >>> a, b = decayed_update(0.0, 0.0, s, f, gamma=0.5)
    >>> round(beta_cdf(0.5, 1.0 + a, 1.0 + b), 4)           # Beta(3, 2): I_0.5 = 5/16
    0.3125
    >>> round(break_even_from_ratio(1, 1.2), 6)            # N = 1: E[L] = 1 + α = 1.2
    0.2
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

from policies.scalar import chain_length

_CF_EPS = 1e-12
_CF_TINY = 1e-300
_CF_MAX_ITER = 300
JEFFREYS = 0.5  # the permanent base of the posterior: Beta(1/2, 1/2)
_GRID = 4096  # break-even α resolution 1/4096 before linear interpolation (error ~1e-7)


@dataclass(frozen=True)
class OnlineParams:
    """Knobs of the online rules; every one is JSON-able and round-trips through ``state()``.

    - ``half_life``: observations (draft chains) after which old evidence weighs half. Short enough
      to follow drift within a few hundred steps, long enough that one unlucky step cannot switch.
    - ``level``: one-sided credibility of both switching tests (0.95: the upper 95% bound must sit
      below break-even to switch off; the lower bound above break-even + ``margin`` to switch on).
    - ``margin``: the hysteresis band in α; a stable α inside it never flips the gate back and forth.
    - ``prior_strength``: pseudo-tokens of the recommendation's α that seed the decayed counts;
      they are forgotten like any evidence, so a few half-lives of real steps replace them.
    - ``min_off_decisions``: the dwell: decisions spent off before the first probe (and so before
      any switch back on).
    - ``probe_every``: the longest gap between probes (decisions), where failing probes push it.
    - ``probe_min_every``: the shortest gap, where paying probes pull it (halved per paying probe,
      doubled per failing one), so recovery is confirmed fast and a dead drafter costs little.
    - ``probe_tokens``: draft length of a probe (capped by the bucket's N): cheap when it fails.
    - ``min_probes``: probe observations needed while off before the gate may turn back on, so
      forgetting alone (decay toward the prior) never re-enables speculation.
    - ``calibration_half_life``: steps of the step-time moving averages (cost calibration).
    - ``temperature_edges``: upper edges of the temperature buckets; T = 0 (greedy) is its own bucket.
    """

    half_life: float = 32.0
    level: float = 0.95
    margin: float = 0.05
    prior_strength: float = 4.0
    min_off_decisions: int = 64
    probe_every: int = 16
    probe_min_every: int = 2
    probe_tokens: int = 2
    min_probes: int = 2
    calibration_half_life: float = 64.0
    temperature_edges: tuple[float, ...] = (0.0, 0.3, 0.7, 1.0, 1.5)

    def __post_init__(self) -> None:
        if self.half_life <= 0 or self.calibration_half_life <= 0:
            raise ValueError("half lives must be positive")
        if not 0.5 < self.level < 1.0:
            raise ValueError("level must lie in (0.5, 1)")
        if self.margin < 0 or self.prior_strength <= 0:
            raise ValueError("margin must be >= 0 and prior_strength > 0")
        if not 1 <= self.probe_min_every <= self.probe_every or self.probe_tokens < 1:
            raise ValueError("need 1 <= probe_min_every <= probe_every and probe_tokens >= 1")
        if self.min_off_decisions < 0 or self.min_probes < 0:
            raise ValueError("min_off_decisions and min_probes must be >= 0")
        if list(self.temperature_edges) != sorted(self.temperature_edges) or not self.temperature_edges:
            raise ValueError("temperature_edges must be non-empty and ascending")

    @property
    def gamma(self) -> float:
        """Per-observation decay factor: evidence ``half_life`` observations old weighs 1/2."""
        return 0.5 ** (1.0 / self.half_life)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["temperature_edges"] = list(self.temperature_edges)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> OnlineParams:
        return cls(**{**d, "temperature_edges": tuple(d["temperature_edges"])})


def temperature_bucket(temperature: float, edges: tuple[float, ...]) -> int:
    """Bucket index: 0 for T ≤ edges[0] (greedy), i for edges[i-1] < T ≤ edges[i], len(edges) above.

    >>> [temperature_bucket(t, (0.0, 0.3, 0.7, 1.0)) for t in (0.0, 0.2, 0.7, 0.9, 2.0)]
    [0, 1, 2, 3, 4]
    """
    return bisect_left(edges, temperature)


def chain_evidence(drafted: int, accepted: int, chains: int = 1,
                   rejections: int | None = None) -> tuple[float, float]:
    """(successes, failures) of the truncated-geometric likelihood for per-token acceptance.

    One chain: ``accepted`` successes, and one failure if it stopped before ``drafted``. For totals
    over several chains pass ``rejections`` (chains that ended in a rejection). Unknown, it is
    taken as min(chains, drafted − accepted), its largest possible value: α comes out low, so an
    aggregate caller errs towards switching off, never towards being slower than plain decoding.

    >>> chain_evidence(4, 4), chain_evidence(4, 0), chain_evidence(12, 7, chains=3, rejections=2)
    ((4.0, 0.0), (0.0, 1.0), (7.0, 2.0))
    """
    if drafted < 0 or accepted < 0 or accepted > drafted or chains < 1:
        raise ValueError(f"need 0 <= accepted <= drafted and chains >= 1 "
                         f"(got drafted={drafted}, accepted={accepted}, chains={chains})")
    if rejections is None:
        rejections = min(chains, drafted - accepted)
    elif rejections < 0 or rejections > min(chains, drafted - accepted):
        raise ValueError("rejections must lie in [0, min(chains, drafted - accepted)]")
    return float(accepted), float(rejections)


def decayed_update(a: float, b: float, successes: float, failures: float, gamma: float,
                   steps: float = 1.0) -> tuple[float, float]:
    """Exponentially forgotten Beta counts: old counts weigh γ^steps, then the new evidence adds.

    The Controller seeds the counts with the recommendation's prior (forgotten like any evidence)
    and reads the posterior as Beta(½ + a, ½ + b): Jeffreys' prior underneath, so however much is
    forgotten the posterior stays proper.

    >>> decayed_update(10.0, 2.0, 3.0, 1.0, gamma=0.5)
    (8.0, 2.0)
    """
    w = gamma ** steps
    return a * w + successes, b * w + failures


def beta_mean(a: float, b: float) -> float:
    """E[α] under Beta(a, b)."""
    return a / (a + b)


def beta_var(a: float, b: float) -> float:
    """Var[α] under Beta(a, b) = ab / ((a+b)²(a+b+1))."""
    s = a + b
    return a * b / (s * s * (s + 1.0))


def _beta_cf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta (modified Lentz; Numerical Recipes §6.4)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _CF_TINY else _CF_TINY)
    h = d
    for m in range(1, _CF_MAX_ITER + 1):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _CF_TINY else _CF_TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _CF_TINY else _CF_TINY
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _CF_TINY else _CF_TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _CF_TINY else _CF_TINY
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < _CF_EPS:
            break
    return h


def beta_cdf(x: float, a: float, b: float) -> float:
    """P(α ≤ x) under Beta(a, b): the regularized incomplete beta I_x(a, b), for real a, b > 0.

    >>> round(beta_cdf(0.3, 2.0, 1.0), 12), round(beta_cdf(0.5, 2.0, 2.0), 12)   # x², 3x² − 2x³
    (0.09, 0.5)
    """
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                 + a * math.log(x) + b * math.log1p(-x))
    front = math.exp(log_front)
    # The fraction converges fast on the side of the mean; use the symmetry I_x(a,b) = 1 − I_{1−x}(b,a).
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_cf(a, b, x) / a
    return 1.0 - front * _beta_cf(b, a, 1.0 - x) / b


def beta_quantile(p: float, a: float, b: float) -> float:
    """The x with P(α ≤ x) = p under Beta(a, b), by bisection (diagnostics, not the hot path).

    >>> round(beta_quantile(0.25, 1.0, 1.0), 9), round(beta_quantile(0.81, 2.0, 1.0), 9)
    (0.25, 0.9)
    """
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if beta_cdf(mid, a, b) < p:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def prob_below(x: float, a: float, b: float, level: float, exact: bool = True) -> bool | None:
    """Is P(α ≤ x) ≥ ``level`` under Beta(a, b)? (Equivalently: the upper ``level`` bound < x.)

    Cantelli's inequality decides most calls from the mean and variance alone, exactly (no
    approximation): P(α > x) ≤ σ²/(σ² + (x−μ)²) for x > μ, and P(α > x) ≥ k²/(1+k²) for
    x = μ − kσ. Only the band between needs the incomplete beta (~10-40 µs in pure Python);
    with ``exact=False`` a call in that band returns None (undecided) instead.

    >>> prob_below(0.5, 2.0, 60.0, 0.95), prob_below(0.02, 2.0, 60.0, 0.95), prob_below(0.1, 2.0, 60.0, 0.95)
    (True, False, True)
    """
    mu = a / (a + b)
    sd = math.sqrt(beta_var(a, b))
    if x >= mu + sd * math.sqrt(level / (1.0 - level)):
        return True
    if x < mu - sd * math.sqrt((1.0 - level) / level):
        return False
    return beta_cdf(x, a, b) >= level if exact else None


def prob_above(x: float, a: float, b: float, level: float, exact: bool = True) -> bool | None:
    """Is P(α ≥ x) ≥ ``level`` under Beta(a, b)? (Equivalently: the lower ``level`` bound > x.)"""
    mu = a / (a + b)
    sd = math.sqrt(beta_var(a, b))
    if x <= mu - sd * math.sqrt(level / (1.0 - level)):
        return True
    if x > mu + sd * math.sqrt((1.0 - level) / level):
        return False
    return 1.0 - beta_cdf(x, a, b) >= level if exact else None


def gate_next(on: bool, a: float, b: float, alpha_star: float, params: OnlineParams,
              off_decisions: int = 0, off_probes: int = 0, exact: bool = True) -> bool | None:
    """The hysteresis rule: is speculation on after this evidence? ``a``, ``b``: the posterior.

    On → off when the upper ``level`` bound of α falls below break-even α*. Off → on only when the
    dwell and the probe count are met *and* the lower bound exceeds α* + margin. Between the two
    thresholds nothing changes: that band is what stops flapping around a stable α. None: the
    answer needs the exact incomplete beta and ``exact`` is False (the caller keeps the state).

    >>> p = OnlineParams()
    >>> gate_next(True, 2.0, 40.0, 0.3, p), gate_next(False, 60.0, 6.0, 0.3, p, 100, 5)
    (False, True)
    """
    if on:
        below = prob_below(alpha_star, a, b, params.level, exact)
        return None if below is None else not below
    if off_decisions < params.min_off_decisions or off_probes < params.min_probes:
        return False
    return prob_above(min(alpha_star + params.margin, 1.0), a, b, params.level, exact)


@lru_cache(maxsize=64)
def _length_grid(n: int) -> tuple[float, ...]:
    """E[L](α, n) at α = i/_GRID, increasing in α: the table a break-even lookup bisects."""
    return tuple(chain_length(i / _GRID, n) for i in range(_GRID + 1))


def break_even_from_ratio(n: int, step_ratio: float) -> float:
    """The chain α at which E[L](α, n) = ``step_ratio`` (a step's cost in plain forwards).

    Speculation with n drafts pays iff α exceeds this. A lookup in a cached grid plus linear
    interpolation (~1 µs), because calibration moves the ratio while serving. Sentinels as in
    ``policies.theory.break_even_alpha``: 0.0 when the ratio ≤ 1, 1.0 when it ≥ n + 1.
    """
    if n < 1:
        raise ValueError("n must be at least 1")
    if step_ratio <= 1.0:
        return 0.0
    if step_ratio >= n + 1.0:
        return 1.0
    grid = _length_grid(n)
    i = bisect_left(grid, step_ratio)  # grid[i-1] < ratio <= grid[i]
    lo, hi = grid[i - 1], grid[i]
    return (i - 1 + (step_ratio - lo) / (hi - lo)) / _GRID

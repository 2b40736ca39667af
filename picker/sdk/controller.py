"""The embedded SDK Controller: per-step speculation decisions inside a serving loop.

``choose`` answers in about a microsecond from tables built once; ``observe`` feeds back what a
step drafted and accepted, keeps a decayed Beta posterior of α per (task, strategy, temperature
bucket) and switches speculation off where α is confidently below break-even — the never-slower
guarantee — and back on, with hysteresis, when it recovers.

    >>> from picker.sdk.plan import ControllerPlan, flat_step_ratio
    >>> plan = ControllerPlan(strategy="vanilla", num_speculative_tokens=4, tree=None,
    ...                       schedule=((1, 16, 4), (17, None, 0)), temperature_above=0.9,
    ...                       step_ratio=flat_step_ratio(1.4, 4))
    >>> ctl = Controller(plan)
    >>> ctl.choose(batch_size=8, temperature=0.0)
    SpecConfig(strategy='vanilla', num_speculative_tokens=4, tree=None, reason='speculate')
    >>> ctl.choose(batch_size=32, temperature=0.0).reason, ctl.choose(1, temperature=1.2).reason
    ('off_batch_schedule', 'off_temperature')
    >>> for _ in range(200):
    ...     ctl.observe(drafted=4, accepted=0, task="chat")          # nothing is ever accepted
    >>> ctl.choose(batch_size=8, temperature=0.0, task="chat").reason
    'off_below_break_even'
    >>> Controller.from_state(ctl.state()).state() == ctl.state()
    True

Probing while off: an off bucket cannot observe acceptance for free, so after a dwell of
``min_off_decisions`` decisions it speculates as a probe with a short draft of ``probe_tokens``
(default: first probe after 64 decisions, N = 2). The gap to the next probe starts at
``probe_every`` (16), halves after a probe that paid (half its drafts accepted) down to
``probe_min_every`` (2), and doubles back after one that failed — exponential back-off, as in
Arctic's suffix-decoding ramp. A wholly rejected probe still emits one token and costs R(2, b) − 1
extra plain forwards, so with a dead drafter probing costs (R(2, b) − 1)/16 of plain throughput
(about 0.6% at c = 0.05); probes that pay are not a cost. Evidence is forgotten per observation, not
per decision, so while off the posterior keeps the same effective sample size and moves only as
probes replace old evidence; the gate reopens after ``min_probes`` probes once the lower credible
bound clears break-even + margin.

Thread safety: the decision tables and ``SpecConfig`` objects are immutable and built once. The only
state ``choose`` reads on its common path is ``self._off``, a dict of frozensets that ``observe``
replaces copy-on-write (build a new dict, then one attribute store, atomic in CPython with or
without the GIL), so a reader sees the old gate or the new one, never half of one — no lock. Every
mutation (posteriors, counters, calibration, a dwell/probe counter of an off bucket) happens under
one lock; ``choose`` takes it only for a bucket that is off, which is the rare path.
"""

from __future__ import annotations

import math
import os
import threading
from bisect import bisect_left
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from picker.sdk.plan import (
    NUM_CELLS,
    ControllerPlan,
    TreeSpec,
    cell_of,
    cell_range,
    plan_from_profile,
    plan_from_recommendation,
)
from policies import (
    JEFFREYS,
    OnlineParams,
    beta_quantile,
    beta_var,
    break_even_from_ratio,
    chain_evidence,
    decayed_update,
    gate_next,
)

if TYPE_CHECKING:
    from picker.inputs.measurements import Measurements
    from picker.inputs.workload import WorkloadProfile
    from picker.recommend.contract import Recommendation

Reason = Literal["speculate", "probe", "off_batch_schedule", "off_temperature", "off_below_break_even",
                 "off_no_strategy", "short_itl_budget", "off_itl_budget"]
STATE_FORMAT = "specpicker.controller/1"
SCALE_LIMITS = (0.25, 4.0)  # calibration may move the model's step cost this far, no further
SCALE_STEP = 0.01  # re-derive a cell's break-even only when its cost scale moved by more than 1%
BAND_CHECK_EVERY = 4  # in the band where only the exact incomplete beta decides: every 4th observation


@dataclass(frozen=True, slots=True)
class SpecConfig:
    """One decision: run ``strategy`` with ``num_speculative_tokens`` drafts (0 = plain decoding),
    drafting ``tree`` when it is a tree strategy; ``reason`` says why (see :data:`Reason`)."""

    strategy: str
    num_speculative_tokens: int
    tree: TreeSpec | None
    reason: Reason

    @property
    def enabled(self) -> bool:
        return self.num_speculative_tokens > 0


_COUNTERS = ("off_decisions", "off_probes", "probe_gap", "next_probe", "band_skips", "observations",
             "chains", "drafted", "accepted", "switches")


class _Bucket:
    """Online state of one (task, strategy, temperature bucket); touched only under the lock.

    ``a``, ``b``: decayed Beta counts, seeded with the prior. ``off``: batch cells switched off.
    Dwell and probing are counted per bucket since its latest switch-off (the evidence is shared
    by all its cells, so a cell without traffic follows the others back on):
    ``off_decisions`` decisions and ``off_probes`` observations since, ``probe_gap`` the current
    gap between probes, ``next_probe`` the decision count of the next one.
    """

    __slots__ = ("a", "b", "off", *_COUNTERS)

    def __init__(self, prior_mean: float, strength: float) -> None:
        mean = min(max(prior_mean, 0.01), 0.99)
        self.a, self.b = strength * mean, strength * (1.0 - mean)
        self.off: set[int] = set()
        for name in _COUNTERS:
            setattr(self, name, 0)

    def to_dict(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "off": sorted(self.off), **{n: getattr(self, n) for n in _COUNTERS}}

    def load(self, d: dict[str, Any]) -> None:
        self.a, self.b, self.off = float(d["a"]), float(d["b"]), {int(c) for c in d["off"]}
        for name in _COUNTERS:
            setattr(self, name, int(d[name]))


class Controller:
    """Online speculation decisions from a plan (see the module docstring for an example).

    Build it with :meth:`from_recommendation` or :meth:`from_profile`; ``params`` tunes the online
    rules (:class:`policies.online.OnlineParams`).

    ``itl_p99_budget`` (seconds): a p99 inter-token latency budget. A speculative step's accepted
    tokens arrive together, so every step is one gap and a step that accepts nothing still takes a
    whole draft + verify: the p99 gap is about the step time, whatever α is. Once the live step time
    of a batch cell is known (``observe`` with ``step_time``), ``choose`` drafts the longest N whose
    estimated step fits the budget (reason ``short_itl_budget``), or none (``off_itl_budget``). The
    estimate is the cell's plain step time (kept current by plain steps, so a cell switched off comes
    back when the load eases) times a speculative step's measured cost over it per unit of the plan's
    R(N), as of its latest timed speculative step, times R(N);
    it is a mean step, so machine jitter beyond it is not covered.
    """

    def __init__(self, plan: ControllerPlan, params: OnlineParams | None = None, *,
                 itl_p99_budget: float | None = None) -> None:
        if itl_p99_budget is not None and not itl_p99_budget > 0:
            raise ValueError(f"itl_p99_budget must be > 0 seconds (got {itl_p99_budget!r})")
        self.plan = plan
        self.params = params or OnlineParams()
        self.itl_p99_budget = itl_p99_budget
        self._caps: tuple[int | None, ...] = (None,) * NUM_CELLS  # longest N within the budget; None: no cap
        self._lock = threading.Lock()
        self._buckets: dict[tuple[str | None, int], _Bucket] = {}
        self._off: dict[tuple[str | None, int], frozenset[int]] = {}  # copy-on-write, read lock-free
        self._edges = self.params.temperature_edges
        self._gamma = self.params.gamma
        self._cal_gamma = 0.5 ** (1.0 / self.params.calibration_half_life)
        self._k_low = math.sqrt((1.0 - self.params.level) / self.params.level)  # Cantelli's short cut
        self._plain_time: list[float | None] = [None] * NUM_CELLS  # EWMA seconds of a plain step
        self._spec_unit: list[float | None] = [None] * NUM_CELLS  # EWMA of spec step seconds / R_model
        self._scale_used = [1.0] * NUM_CELLS  # the cost scale each cell's α* was derived with
        self._unit_ratio: list[float | None] = [None] * NUM_CELLS  # spec_unit / plain_time when last timed
        self._build_tables()

    # ----- construction --------------------------------------------------------------------------
    @classmethod
    def from_recommendation(cls, rec: Recommendation | dict[str, Any], params: OnlineParams | None = None,
                            step_ratio: tuple[tuple[float, ...], ...] | None = None, *,
                            itl_p99_budget: float | None = None) -> Controller:
        """From a Recommendation or its JSON dict (break-even from its accept length unless ``step_ratio``)."""
        return cls(plan_from_recommendation(rec, step_ratio), params, itl_p99_budget=itl_p99_budget)

    @classmethod
    def from_profile(cls, profile: WorkloadProfile | str | os.PathLike[str],
                     measurements: Measurements | None = None, params: OnlineParams | None = None, *,
                     itl_p99_budget: float | None = None) -> Controller:
        """Run ``recommend`` on a profile (object or YAML path) and cost every (N, batch) with its model
        (``itl_p99_budget``, seconds: e.g. the profile's ``slo.itl_p99_ms`` / 1000)."""
        if isinstance(profile, (str, os.PathLike)):
            from picker.inputs.workload import load_profile

            profile = load_profile(profile)
        return cls(plan_from_profile(profile, measurements)[1], params, itl_p99_budget=itl_p99_budget)

    def _build_tables(self) -> None:
        """Every SpecConfig ``choose`` can return, and the batch → config table, built once."""
        plan = self.plan
        tree = plan.tree

        def config(n: int, reason: Reason) -> SpecConfig:
            return SpecConfig(plan.strategy, n, tree.at_depth(n) if tree is not None and n > 0 else None, reason)

        self._temp_above = float("inf") if plan.temperature_above is None else plan.temperature_above
        none = plan.strategy == "none"
        self._off_temperature = config(0, "off_no_strategy" if none else "off_temperature")
        self._off_gate = config(0, "off_below_break_even")
        top = max((hi or lo) for lo, hi, _ in plan.schedule) + 1
        by_n: dict[int, SpecConfig] = {}
        table = []
        for b in range(top + 1):
            n = plan.n_for_batch(b)
            if n not in by_n:
                by_n[n] = config(n, "speculate") if n > 0 else config(0, "off_no_strategy" if none else
                                                                        "off_batch_schedule")
            table.append(by_n[n])
        self._by_batch = tuple(table)  # index = batch size; the last entry stands for every larger batch
        self._probe = {n: config(min(n, self.params.probe_tokens), "probe") for n in by_n if n > 0}
        self._short = {n: config(n, "short_itl_budget") for n in range(1, len(plan.step_ratio) + 1)}
        self._off_budget = config(0, "off_itl_budget")
        self._cell_ns = tuple(plan.ns_in_cell(c) for c in range(NUM_CELLS))
        self._active_cells = tuple(c for c in range(NUM_CELLS) if self._cell_ns[c])
        self._set_alpha_star([self._break_even(c) for c in range(NUM_CELLS)])

    def _set_alpha_star(self, alpha_star: list[float]) -> None:
        self._alpha_star = alpha_star
        self._cells_by_star = tuple(sorted(self._active_cells, key=lambda c: -alpha_star[c]))

    # ----- the hot path --------------------------------------------------------------------------
    def choose(self, batch_size: int, temperature: float, task: str | None = None) -> SpecConfig:
        """The configuration for the next step at this batch size and temperature (lock-free when on).

        Order: the temperature switch, the batch schedule, then the online gate of
        (task, temperature bucket) in this batch cell — which may answer with a probe.
        """
        if temperature > self._temp_above:
            return self._off_temperature
        table = self._by_batch
        cfg = table[batch_size] if 0 <= batch_size < len(table) else table[-1 if batch_size > 0 else 1]
        if not cfg.num_speculative_tokens:
            return cfg
        key = (task, bisect_left(self._edges, temperature))
        off = self._off.get(key)
        cell = cell_of(batch_size)
        if off is not None and cell in off:
            cfg = self._choose_off(key, cell, cfg)
        cap = self._caps[cell]  # the p99 ITL budget (one tuple read: lock-free)
        if cap is None or cap >= cfg.num_speculative_tokens:
            return cfg
        return self._short[cap] if cap else self._off_budget

    def _choose_off(self, key: tuple[str | None, int], cell: int, cfg: SpecConfig) -> SpecConfig:
        """An off bucket: count the decision (dwell and probe schedule) and maybe answer with a probe."""
        with self._lock:
            st = self._buckets.get(key)
            if st is None or cell not in st.off:  # switched back on since the lock-free read
                return cfg
            st.off_decisions += 1
            if st.off_decisions < st.next_probe:
                return self._off_gate
            st.next_probe = st.off_decisions + st.probe_gap
        return self._probe[cfg.num_speculative_tokens]

    def observe(self, drafted: int, accepted: int, step_time: float | None = None, task: str | None = None,
                temperature: float | None = None, *, batch_size: int | None = None, chains: int = 1,
                rejections: int | None = None) -> None:
        """Feed back one verify step: ``drafted`` draft tokens, ``accepted`` of them kept.

        Pass the ``task`` and ``temperature`` given to ``choose`` (None temperature = greedy). For a
        tree, ``drafted`` is its depth and ``accepted`` the accepted path length. Several chains in one
        call (a batched step): give ``chains`` and, if known, ``rejections`` (chains that stopped
        early); unknown, every unaccepted token is taken as a rejection, which underestimates α — the
        safe side. ``step_time`` (seconds of the whole step at ``batch_size``, default ``chains``)
        calibrates the cost model; give it once per step. ``drafted == 0`` records a plain step.
        """
        key = (task, bisect_left(self._edges, 0.0 if temperature is None else temperature))
        if drafted > 0:
            s, f = chain_evidence(drafted, accepted, chains, rejections)
        elif drafted < 0 or accepted:
            raise ValueError(f"need 0 <= accepted <= drafted (got drafted={drafted}, accepted={accepted})")
        with self._lock:
            st = self._buckets.get(key)
            if st is None:
                st = self._buckets[key] = _Bucket(self.plan.prior_for(task), self.params.prior_strength)
            st.observations += 1
            if step_time is not None and step_time > 0:
                self._calibrate(batch_size or chains, drafted // max(chains, 1), step_time)
            if drafted <= 0:
                return
            st.chains += chains
            st.drafted += drafted
            st.accepted += accepted
            st.a, st.b = decayed_update(st.a, st.b, s, f, self._gamma, chains)
            if st.off:
                self._probed(st, 2 * accepted >= drafted)
            self._update_gate(key, st)

    def _probed(self, st: _Bucket, paid: bool) -> None:
        """A step observed while off (a probe): count it and adapt the gap to the next probe —
        halve it when the probe paid (half its drafts or more accepted), double it when it failed."""
        p = self.params
        st.off_probes += 1
        st.probe_gap = max(st.probe_gap // 2, p.probe_min_every) if paid else min(st.probe_gap * 2, p.probe_every)
        st.next_probe = min(st.next_probe, st.off_decisions + st.probe_gap)

    # ----- the rules -----------------------------------------------------------------------------
    def _update_gate(self, key: tuple[str | None, int], st: _Bucket) -> None:
        """Re-test the bucket's batch cells against their own break-even α* (under the lock).

        Both tests are monotone in α*, so cells are visited in the order that settles the most:
        on-cells from the highest α* down (once one stays on, every lower one does), off-cells from
        the lowest up. Cantelli's bounds settle most tests from mean and variance; at most one exact
        incomplete beta runs per call, and only every ``BAND_CHECK_EVERY``-th call that needs one.
        """
        p = self.params
        a, b = JEFFREYS + st.a, JEFFREYS + st.b
        mu = a / (a + b)
        slack = self._k_low * math.sqrt(beta_var(a, b))
        # Cantelli: α* below mu − slack is never "confidently above α" (the cell stays on), and
        # α* + margin above mu + slack is never "confidently below α" (an off cell stays off).
        stays_on_below, stays_off_above = mu - slack, mu + slack
        budget = 1 if st.band_skips + 1 >= BAND_CHECK_EVERY else 0
        exact_used = pending = changed = False
        verdicts: dict[tuple[bool, float], bool] = {}

        def test(on: bool, star: float) -> bool | None:
            nonlocal budget, exact_used
            if (on, star) not in verdicts:
                v = gate_next(on, a, b, star, p, st.off_decisions, st.off_probes, exact=False)
                if v is None and budget:
                    budget, exact_used = 0, True
                    v = gate_next(on, a, b, star, p, st.off_decisions, st.off_probes, exact=True)
                if v is None:
                    return None
                verdicts[(on, star)] = v
            return verdicts[(on, star)]

        for c in self._cells_by_star:  # highest α* first
            star = self._alpha_star[c]
            if c in st.off:
                continue
            if star < stays_on_below:
                break
            verdict = test(True, star)
            if verdict is None:
                pending = True
                break
            if verdict:
                break
            changed = True
            st.switches += 1
            st.off.add(c)  # (re)start the dwell, then probe at the widest gap until probes pay
            st.off_decisions = st.off_probes = 0
            st.probe_gap, st.next_probe = p.probe_every, max(p.min_off_decisions, 1)
        if st.off and st.off_decisions >= p.min_off_decisions and st.off_probes >= p.min_probes:
            for c in reversed(self._cells_by_star):  # lowest α* first
                star = self._alpha_star[c]
                if c not in st.off:
                    continue
                if star + p.margin > stays_off_above:
                    break
                verdict = test(False, star)
                if verdict is None:
                    pending = True
                    break
                if not verdict:
                    break
                changed = True
                st.switches += 1
                st.off.discard(c)
        st.band_skips = 0 if exact_used or not pending else st.band_skips + 1
        if changed:
            new = dict(self._off)
            if st.off:
                new[key] = frozenset(st.off)
            else:
                new.pop(key, None)
            self._off = new  # one atomic store: readers see the old dict or this one

    def _break_even(self, cell: int) -> float:
        """α* of a batch cell: the largest break-even among the N it uses, at its cost scale."""
        scale = self._scale_used[cell]
        return max((break_even_from_ratio(n, self.plan.step_ratio[n - 1][cell] * scale)
                    for n in self._cell_ns[cell]), default=0.0)

    def _scale(self, cell: int) -> float:
        plain, unit = self._plain_time[cell], self._spec_unit[cell]
        if plain is None or unit is None:
            return 1.0
        return min(max(unit / plain, SCALE_LIMITS[0]), SCALE_LIMITS[1])

    def _calibrate(self, batch_size: int, n: int, seconds: float) -> None:
        """Moving averages of plain step time and of spec step time over the model's R(n): their ratio
        rescales the model's step cost of that batch cell, and so its break-even α."""
        cell = cell_of(batch_size)
        if n <= 0:
            series, value = self._plain_time, seconds
        else:
            n = min(n, len(self.plan.step_ratio))
            series, value = self._spec_unit, seconds / self.plan.step_ratio[n - 1][cell]
        old = series[cell]
        series[cell] = value if old is None else old + (1.0 - self._cal_gamma) * (value - old)
        if n > 0 and self._plain_time[cell] is not None:  # the speculative cost, as of its latest timing
            self._unit_ratio[cell] = series[cell] / self._plain_time[cell]  # type: ignore[operator]
        if self.itl_p99_budget is not None:
            self._set_cap(cell)
        scale = self._scale(cell)
        if self._cell_ns[cell] and abs(scale - self._scale_used[cell]) > SCALE_STEP * self._scale_used[cell]:
            self._scale_used[cell] = scale
            self._alpha_star[cell] = self._break_even(cell)
            self._set_alpha_star(self._alpha_star)

    def step_estimate(self, batch_size: int, n: int) -> float | None:
        """Seconds of a step drafting ``n`` at this batch, from the live timings (None before any
        speculative step of its cell was timed): the cell's plain step times the speculative step's
        measured cost over it per unit of the plan's R (as of its latest timing), times R(n)."""
        cell = cell_of(batch_size)
        unit, plain = self._spec_unit[cell], self._plain_time[cell]
        ratio = self._unit_ratio[cell]
        if unit is None or n <= 0:
            return None
        if plain is not None and ratio is not None:  # follows the load through plain steps
            unit = plain * ratio
        return unit * self.plan.step_ratio[min(n, len(self.plan.step_ratio)) - 1][cell]

    def _set_cap(self, cell: int) -> None:
        """The longest N whose estimated step fits the p99 ITL budget in ``cell`` (under the lock)."""
        budget = self.itl_p99_budget
        n_max = len(self.plan.step_ratio)
        batch = cell_range(cell)[1] or cell_range(cell)[0]
        if budget is None or n_max == 0 or self.step_estimate(batch, 1) is None:
            return
        cap = max((n for n in range(1, n_max + 1) if (self.step_estimate(batch, n) or 0.0) <= budget), default=0)
        caps = list(self._caps)
        caps[cell] = None if cap >= n_max else cap
        self._caps = tuple(caps)  # one atomic store

    # ----- introspection and persistence ---------------------------------------------------------
    def break_even_alpha(self, batch_size: int) -> float:
        """The α the gate compares against at this batch size (0.0 where the schedule is off)."""
        return self._alpha_star[cell_of(batch_size)]

    def state(self) -> dict[str, Any]:
        """Everything, as JSON-able data; ``Controller.from_state(state())`` continues identically."""
        with self._lock:
            buckets = [{"task": t, "strategy": self.plan.strategy, "temperature_bucket": tb, **st.to_dict()}
                       for (t, tb), st in self._buckets.items()]
            return {"format": STATE_FORMAT, "plan": self.plan.to_dict(), "params": self.params.to_dict(),
                    "itl_p99_budget": self.itl_p99_budget,
                    "calibration": {"plain_time": list(self._plain_time), "spec_unit": list(self._spec_unit),
                                    "unit_ratio": list(self._unit_ratio),
                                    "scale_used": list(self._scale_used)},
                    "buckets": buckets}

    @classmethod
    def from_state(cls, d: dict[str, Any]) -> Controller:
        """Rebuild a Controller from :meth:`state` (after a JSON round trip too)."""
        if d.get("format") != STATE_FORMAT:
            raise ValueError(f"not a controller state ({d.get('format')!r}, expected {STATE_FORMAT!r})")
        ctl = cls(ControllerPlan.from_dict(d["plan"]), OnlineParams.from_dict(d["params"]),
                  itl_p99_budget=d.get("itl_p99_budget"))
        ctl._plain_time = list(d["calibration"]["plain_time"])
        ctl._spec_unit = list(d["calibration"]["spec_unit"])
        ctl._unit_ratio = list(d["calibration"].get("unit_ratio", [None] * NUM_CELLS))
        for cell in range(NUM_CELLS):
            ctl._set_cap(cell)
        ctl._scale_used = [float(x) for x in d["calibration"]["scale_used"]]
        ctl._set_alpha_star([ctl._break_even(c) for c in range(NUM_CELLS)])
        off = {}
        for row in d["buckets"]:
            key = (row["task"], int(row["temperature_bucket"]))
            st = ctl._buckets[key] = _Bucket(ctl.plan.prior_for(row["task"]), ctl.params.prior_strength)
            st.load(row)
            if st.off:
                off[key] = frozenset(st.off)
        ctl._off = off
        return ctl

    def describe(self) -> list[dict[str, Any]]:
        """Per bucket: posterior mean and credible bounds, counters, cells off (for logs and dashboards)."""
        with self._lock:  # copy under the lock; the quantiles (bisections, ~1 ms) are computed outside it
            rows = [(task, tb, JEFFREYS + st.a, JEFFREYS + st.b, st.observations, st.drafted, st.accepted,
                     sorted(st.off), st.switches) for (task, tb), st in self._buckets.items()]
        lvl = self.params.level
        return [{"task": task, "temperature_bucket": tb, "alpha_mean": a / (a + b),
                 "alpha_low": beta_quantile(1.0 - lvl, a, b), "alpha_high": beta_quantile(lvl, a, b),
                 "observations": n, "drafted": d, "accepted": k, "cells_off": off, "switches": sw}
                for task, tb, a, b, n, d, k, off, sw in rows]

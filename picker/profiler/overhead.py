"""What a speculative step costs on a live engine beyond a plain step: per step, per drafting step, per draft token.

A decode step of a server with speculation enabled is priced, in units of the same engine's plain
decode step measured beside it (same prompts, interleaved rounds, same concurrency), as

    step / plain_step = 1 + per_step + per_draft_step * [the step drafted] + per_draft_token * (draft tokens it verified)

``per_step`` is what the engine charges every step once speculation is on (bookkeeping, a larger
batch layout, a draft pass that found nothing), ``per_draft_step`` what a step that drafted costs on
top (the draft's launch, a verify batch instead of one token), ``per_draft_token`` what each drafted
token costs (verifying it, and for a draft model, running the draft for it). Summed over a request's
(or a wave's) decode steps S, of which D drafted K tokens in all, taking T seconds while plain decoding
took ``p`` seconds a step:

    T / (p * S) - 1 = per_step + per_draft_step * D / S + per_draft_token * K / S

a linear model fitted by least squares over observations, weighted by their steps, with 95% bootstrap
intervals over observations. The constants are separable only where the data varies: the share of
steps that drafted (``D / S``: n-gram lookup drafts rarely on some prompts and often on others; a
draft model drafts every step) and the tokens per drafting step (``K / D``: N). Where one does not
vary the fit merges what cannot be told apart and says so (``merged``).

``pooled`` sums the rows of one cell into one (a cell's mean cost, weighted by steps). ``observations`` builds the rows from profiler records (``picker.profiler.records``): each speculative
request or wave against plain decoding's seconds per step on the same task, temperature and
concurrency, from the same round where the run interleaved rounds.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from picker.profiler.records import Record

MIN_SPREAD_SHARE = 0.1  # a drafting share that spans less than this across rows cannot separate per_step
MIN_SPREAD_LEN = 0.5  # nor tokens per drafting step spanning less than half a token per_draft_token
DRAWS = 2000


@dataclass(frozen=True)
class Observation:
    """One request or wave of a speculative server, and plain decoding's pace beside it."""

    steps: int  # decode steps after the prefill (summed over a wave's sequences)
    draft_steps: int  # those that drafted
    drafted: int  # draft tokens verified
    seconds: float  # decode seconds over those steps (summed over a wave's sequences)
    plain_step_s: float  # plain decoding's seconds per step, same task / temperature / concurrency / round
    label: str = ""  # where it came from (strategy, N, task, T, concurrency)

    @property
    def cost(self) -> float:
        """Seconds per step over plain's, minus one: the overhead this row measured."""
        return self.seconds / (self.plain_step_s * self.steps) - 1.0


@dataclass(frozen=True)
class Estimate:
    value: float
    lo: float
    hi: float

    def as_dict(self) -> dict[str, float]:
        return {"value": round(self.value, 4), "ci95": [round(self.lo, 4), round(self.hi, 4)]}


@dataclass(frozen=True)
class OverheadFit:
    """The fitted constants, in plain decode steps; None where the data could not separate them (``merged``)."""

    per_step: Estimate | None
    per_draft_step: Estimate | None
    per_draft_token: Estimate | None
    merged: str  # "" or which constants one estimate stands for, and why
    rows: int
    rms_residual: float  # of the cost per row, in plain steps (weighted by steps)
    # A speculative step's cost over a plain one, minus 1, averaged over the rows' steps: what the data
    # says even where the constants cannot be told apart; and the drafting share it averages over.
    mean_cost: Estimate | None = None
    drafting_share: tuple[float, float] = (0.0, 0.0)  # min and max of D / S over the rows

    def as_dict(self) -> dict[str, object]:
        est = {k: (v.as_dict() if v is not None else None) for k, v in
               (("per_step", self.per_step), ("per_draft_step", self.per_draft_step),
                ("per_draft_token", self.per_draft_token))}
        return {**est, "merged": self.merged, "rows": self.rows, "rms_residual": round(self.rms_residual, 4),
                "mean_cost": self.mean_cost.as_dict() if self.mean_cost is not None else None,
                "drafting_share": [round(v, 4) for v in self.drafting_share]}


def fit_overhead(rows: Sequence[Observation], seed: int = 0) -> OverheadFit:
    """Least squares of :attr:`Observation.cost` on the drafting share and draft tokens per step,
    weighted by steps, with bootstrap intervals over rows (module docstring)."""
    rows = [r for r in rows if r.steps > 0 and r.plain_step_s > 0]
    if len(rows) < 3:
        raise ValueError(f"{len(rows)} usable rows: at least 3 are needed")
    s = np.array([r.steps for r in rows], dtype=float)
    d = np.array([r.draft_steps for r in rows], dtype=float) / s
    k = np.array([r.drafted for r in rows], dtype=float) / s
    y = np.array([r.cost for r in rows])
    drafting = d > 0
    per_draft = k[drafting] / d[drafting] if drafting.any() else np.zeros(1)
    split_share = float(np.ptp(d)) >= MIN_SPREAD_SHARE
    split_len = drafting.any() and float(np.ptp(per_draft)) >= MIN_SPREAD_LEN
    # Where every drafting step drafts n tokens, b * D + c * K = (b + c * n) * D; where the drafting
    # share is the same in every row, its term folds into the intercept.
    x = np.column_stack([np.ones_like(d), *([d] if split_share else []), *([k] if split_len else [])])

    def solve(idx: np.ndarray) -> np.ndarray:
        w = np.sqrt(s[idx])
        coef, *_ = np.linalg.lstsq(x[idx] * w[:, None], y[idx] * w, rcond=None)
        return coef

    everything = np.arange(len(rows))
    point = solve(everything)
    rng = np.random.default_rng(seed)
    picks = [rng.integers(0, len(rows), len(rows)) for _ in range(DRAWS)]
    draws = np.array([solve(idx) for idx in picks])
    lo, hi = np.percentile(draws, [2.5, 97.5], axis=0)
    est = [Estimate(float(p), float(a), float(b)) for p, a, b in zip(point, lo, hi)]
    means = [float(np.sum(s[idx] * y[idx]) / np.sum(s[idx])) for idx in picks]
    mean = Estimate(float(np.sum(s * y) / np.sum(s)), *map(float, np.percentile(means, [2.5, 97.5])))
    resid = y - x @ point
    rms = float(np.sqrt(np.sum(s * resid**2) / np.sum(s)))
    n_len = float(np.median(per_draft))
    common = {"rows": len(rows), "rms_residual": rms, "mean_cost": mean,
              "drafting_share": (float(d.min()), float(d.max()))}
    if split_share and split_len:
        return OverheadFit(est[0], est[1], est[2], "", **common)
    if split_share:
        return OverheadFit(est[0], est[1], None, f"per_draft_step is per_draft_step + {n_len:g} x per_draft_token: "
                           "every drafting step drafted the same number of tokens", **common)
    if split_len:
        return OverheadFit(est[0], None, est[1], f"per_step is per_step + {float(np.median(d)):.2f} x per_draft_step: "
                           "the share of steps that drafted did not vary", **common)
    return OverheadFit(est[0], None, None, "per_step is the whole overhead of a step: neither the drafting share "
                       "nor the tokens per drafting step varied", **common)


def _decode_s(r: Record) -> float:
    """A record's decode seconds: the engine's own clock where it reports one (llama.cpp's
    ``predicted_ms``), else the client's first-token-to-last span, summed over its requests."""
    return sum(t.engine["predicted_ms"] / 1e3 if "predicted_ms" in t.engine else t.e2e_s - t.ttft_s
               for t in r.timings)


def observations(records: Iterable[Record]) -> list[Observation]:
    """Each speculative record against plain's seconds per decode step on the same task, temperature
    and concurrency (and round, where both carry one); records without timings are skipped."""
    records = [r for r in records if r.timings and r.steps > 0]
    plain: dict[tuple[object, ...], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for r in records:
        if r.cell.is_plain:
            for key in ((r.cell.task, r.cell.temperature, r.cell.concurrency, r.extra.get("round")),
                        (r.cell.task, r.cell.temperature, r.cell.concurrency, None)):
                plain[key][0] += _decode_s(r)
                plain[key][1] += r.steps
    out = []
    for r in records:
        if r.cell.is_plain:
            continue
        c = r.cell
        seconds, steps = plain.get((c.task, c.temperature, c.concurrency, r.extra.get("round")),
                                   plain.get((c.task, c.temperature, c.concurrency, None), [0.0, 0.0]))
        if steps <= 0:
            continue
        draft_steps = r.draft_steps if r.draft_steps is not None else r.steps
        out.append(Observation(steps=r.steps, draft_steps=draft_steps, drafted=r.drafted, seconds=_decode_s(r),
                               plain_step_s=seconds / steps,
                               label=f"{c.strategy} N={c.num_draft_tokens} {c.task} T={c.temperature:g} C={c.concurrency}"))
    return out


def pooled(rows: Iterable[Observation]) -> list[Observation]:
    """Rows of one label (one cell: strategy, N, task, temperature, concurrency) summed into one: its
    steps, drafting steps, draft tokens and seconds, against plain's seconds over plain's steps paired
    with them. On a busy machine a single request can take several times its neighbours; a cell's sums
    weigh it by its steps instead of letting it pull the fit alone."""
    groups: dict[str, list[Observation]] = defaultdict(list)
    for r in rows:
        groups[r.label].append(r)
    return [Observation(steps=sum(r.steps for r in g), draft_steps=sum(r.draft_steps for r in g),
                        drafted=sum(r.drafted for r in g), seconds=sum(r.seconds for r in g),
                        plain_step_s=sum(r.plain_step_s * r.steps for r in g) / sum(r.steps for r in g), label=label)
            for label, g in groups.items()]

"""The load curve against a profile's own measured curves (``specpick check-load``).

    $ specpick check-load RUN --calibration cal.json --draft DRAFT_FOLDER
    $ specpick check-load RUN --against RUN2        # two runs of one command: the noise floor

``RUN`` is a ``specpick profile ... --concurrency 1,2,4,8,16`` folder: its summary's load section
holds, per (task, temperature, strategy, N, tree), the measured gain over plain decoding at every
level. E[L] is the one thing taken from the measurement, at the curve's smallest concurrency; every
other level is a prediction, S(C) = E[L] · t_plain(C) / t_step(C)
(``policies.loadcurve.load_step_cost``), with the curve's smallest-level cell's share of drafting
steps and nodes per drafting step (:func:`drafting`), on the engine curve of ``engine`` (default
``hf``: eager PyTorch, what the reference engine runs) with the calibration file's constants
(``specpick calibrate --device cpu --model TARGET``: forward timings of the target alone, no
speculative run) and the shape it records. A draft model's shape is counted from its folder's
config (its parameters, not a lookup).

Each wave is priced as ``picker.profiler`` ran it (:func:`requests`, from the run's records;
:func:`serve_time`): C x ``wave_rounds`` prompts (run.json) served C at a time, each batch of
joining prompts prefilled in a forward padded to its longest prompt, then at every decode step the
cost of the requests still running, so a wave lasts as long as its slowest request. E[L] then
enters as a scale on the decode time fixed at the smallest level. Pricing ``mean-steps`` prices every
request at the mean steps and mean prompt instead (for ablation); ``decode-only`` prices
decode steps alone at a fixed context.

Reported (:func:`format_checks`): per curve the measured and predicted gains, the measured
crossover and the predicted one (``picker.profiler.load.crossover``, as the profile's load section
states it: the concurrency from which the gain stays at or below 1); then the median |error| over
predicted points, how many crossovers land within one grid step, and whether the model predicts a
crossover where none was measured. :func:`compare_runs` scores a repeat run as the "prediction" of
the first one, anchored the same way: what no cost model can beat on that machine. What the checks
found is in ``docs/load-curve.md``.
"""

from __future__ import annotations

import functools
import json
import math
import statistics
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from picker.errors import UserError
from picker.inputs.hardware import get_hardware
from picker.inputs.workload import estimate_params, shape_from_hf_config
from picker.profiler.load import crossover
from picker.profiler.records import read_records
from policies.calibration import calibration_for, read_calibration
from policies.costmodel import eagle_layer_shape
from policies.loadcurve import EngineCurve, engine_curve, forward, load_step_cost
from policies.roofline import ModelShape

CONTEXT = 64  # tokens in cache, about a zoo prompt plus half its output
GOAL_STEPS = 1  # crossover within one step of the measured grid (a factor of 2 in C)


@dataclass(frozen=True)
class CurveCheck:
    """One load curve, measured and predicted at each level, with both crossovers."""

    key: str
    levels: tuple[int, ...]
    measured: tuple[float, ...]
    predicted: tuple[float, ...]
    measured_crossover: float | None  # picker.profiler.load.crossover: the concurrency from which gain stays <= 1
    predicted_crossover: float | None

    @property
    def errors(self) -> list[float]:
        return [p / m - 1.0 for p, m in zip(self.predicted[1:], self.measured[1:])]

    def as_json(self) -> dict[str, Any]:
        """The fields, the errors and the crossover verdict, as ``check-load --json`` writes them."""
        return {**asdict(self), "errors": self.errors, "crossover_ok": self.crossover_ok}

    @property
    def crossover_ok(self) -> bool:
        """Within one step of the doubling grid (a factor of 2), or neither crosses.

        >>> CurveCheck("c", (1, 2, 4), (1.2, 1.1, 0.9), (1.2, 1.0, 0.8), 3.46, 2.0).crossover_ok
        True
        >>> CurveCheck("c", (1, 2, 4), (1.2, 1.1, 1.05), (1.2, 1.0, 0.8), None, 2.0).crossover_ok
        False
        """
        if self.measured_crossover is None or self.predicted_crossover is None:
            return self.measured_crossover == self.predicted_crossover
        return abs(math.log2(self.measured_crossover / self.predicted_crossover)) <= GOAL_STEPS


def shape_of(folder: Path) -> ModelShape:
    """A Hugging Face folder's roofline shape: the profile's config reader and parameter estimate
    (``picker.inputs.workload``), float32 weights as the zoo stores them."""
    path = folder / "config.json"
    v = shape_from_hf_config(json.loads(path.read_text()), source=str(path))
    heads = v["num_attention_heads"]
    kv, head_dim = v.get("num_kv_heads", heads), v.get("head_dim") or v["hidden_size"] // heads
    params = estimate_params(v["num_layers"], v["hidden_size"], heads, kv, head_dim, v["vocab_size"],
                             v["intermediate_size"], tied=v.get("tie_word_embeddings", False))
    return ModelShape(params=float(params), num_layers=v["num_layers"], hidden_size=v["hidden_size"],
                      num_kv_heads=kv, head_dim=head_dim, vocab_size=v["vocab_size"], bytes_per_param=4.0,
                      kv_bytes_per_elem=4.0, name=folder.name)


def _kind(strategy: str) -> str:
    from picker.engine.plugins import load_strategies

    return load_strategies()[strategy].capabilities.draft_cost


def drafting(cells: Sequence[dict[str, Any]], entry: dict[str, Any], level: int) -> tuple[float, float]:
    """(φ, n): the share of decode steps that drafted and the nodes verified per drafting step, as
    the curve's cell at ``level`` measured them (prompt lookup drafts only where it finds a match;
    lookahead verifies its window's guesses beside its N)."""
    for c in cells:
        if (c["task"], c["strategy"], c["temperature"], c["num_draft_tokens"], c.get("tree"), c["concurrency"]) == \
                (entry["task"], entry["strategy"], entry["temperature"], entry["num_draft_tokens"], entry.get("tree"),
                 level) and c["decode_steps"]:
            steps = c["draft_steps"] or 1
            return c["draft_steps"] / c["decode_steps"], c["draft_tokens"] / steps
    n = float(entry["num_draft_tokens"])
    return 1.0, n


@dataclass(frozen=True)
class Workload:
    """What one profiled wave decodes: mean prompt tokens per generation and new tokens each.

    A profiled gain is a throughput ratio over whole waves, prefill included (``picker.profiler``
    times a wave from its first admission to its last finish), so the prefill is priced too.
    ``prompt_tokens`` is None for runs recorded before records carried it: then only decode steps
    are priced, at :data:`CONTEXT`.
    """

    prompt_tokens: float | None
    new_tokens: int

    @property
    def context(self) -> int:
        """KV length of a decode step: the prompt plus half the output, on average."""
        return CONTEXT if self.prompt_tokens is None else int(self.prompt_tokens + self.new_tokens / 2)


def workloads(run: Path) -> dict[str, Workload]:
    """Per task, the run's mean prompt tokens per generation (``extra.prompt_tokens`` of its records)."""
    new = int(json.loads((run / "run.json").read_text()).get("max_new_tokens") or 32)
    fed: dict[str, list[float]] = {}
    with open(run / "records.jsonl", encoding="utf-8") as fh:
        for line in fh:
            r = json.loads(line)
            n = r.get("extra", {}).get("prompt_tokens")
            if n is not None:
                fed.setdefault(r["cell"]["task"], []).append(n / max(int(r["extra"].get("turns", 1)), 1))
    return {task: Workload(statistics.fmean(v), new) for task, v in fed.items()}


def prefill_seconds(kind: str, target: ModelShape, draft: ModelShape | None, hw: Any, curve: EngineCurve,
                    c: int, prompt: float) -> tuple[float, float]:
    """(target prefill, drafter prefill) of ``c`` prompts at once: one forward over c × prompt
    tokens; a draft model and an EAGLE layer prefill the prompt too, heads and lookups do not."""
    tokens = max(round(c * prompt), 1)
    ctx = int(prompt / 2)  # attention over the prompt itself, half of it on average
    t = forward(target, hw, tokens, c, ctx, curve).seconds
    shape = draft if kind == "draft_model" else eagle_layer_shape(target) if kind == "target_layer" else None
    d = forward(shape, hw, tokens, c, ctx, curve, role="draft").seconds if shape is not None else 0.0
    return t, d


@dataclass(frozen=True)
class Request:
    """One profiled generation: its decode steps and the prompt tokens it prefilled."""

    steps: int
    prompt_tokens: int | None


def wave_rounds(run: Path) -> int:
    """Rounds of C prompts per profiled wave (run.json; runs from before ``--wave-rounds``: 1)."""
    return int(json.loads((run / "run.json").read_text()).get("wave_rounds", 1))


def requests(run: Path) -> dict[tuple[Any, ...], list[Request]]:
    """Per cell key (task, strategy, T, N, tree, concurrency), its generations in the run's prompt order.

    A profiled wave of C x R prompts (:func:`wave_rounds`) lasts as long as its slowest request
    (``picker.profiler.run`` serves them C at a time; at its end a finished request's row stays
    empty), and each prefill is a forward padded to its longest prompt (``TorchBackend.run`` pads rows),
    so requests that differ in length pay what a mean cannot show. At T = 0 every request's steps
    are the same at every level (the verifier is exact), so the smallest level's requests say what
    shares a wave everywhere. Multi-turn generations are left out (each turn was its own wave):
    such a curve falls back to the mean.
    """
    out: dict[tuple[Any, ...], list[tuple[int, int, Request]]] = {}
    multi: set[tuple[Any, ...]] = set()
    records, *_ = read_records(run / "records.jsonl")
    for rec in records:
        c = rec.cell
        key = (c.task, c.strategy, c.temperature, c.num_draft_tokens, c.tree, c.concurrency)
        if int(rec.extra.get("turns", 1)) > 1:
            multi.add(key)
        wave = str(rec.extra.get("wave", "")).split("#")  # "<cell id>#<first prompt's index>#<nonce>"
        order = int(wave[1]) if len(wave) > 2 and wave[1].isdigit() else 0
        rows = out.setdefault(key, [])
        fed = rec.extra.get("prompt_tokens")
        rows.append((order, len(rows), Request(rec.steps, int(fed) if fed is not None else None)))
    return {k: [r for _, _, r in sorted(v)] for k, v in out.items() if k not in multi}


def serve_time(c: int, per_wave: int, reqs: Sequence[tuple[int, float | None]],
               prefill: Callable[[int, float | None], tuple[float, float]],
               step: Callable[[int], float]) -> tuple[float, float, float]:
    """(target prefill, drafter prefill, decode) seconds of serving ``reqs`` (decode steps, prompt
    tokens) as ``picker.engine.loop.serve`` does, ``per_wave`` prompts per profiled wave: ``c`` in
    flight, a freed row taking the wave's next prompt; the prompts that join in one iteration are
    prefilled in a forward of their own, padded to the longest of them, while the running rows
    wait; then every running request takes a decode step at the cost of ``step(rows running)``.
    A wave ends with its slowest request (one round per wave: a static wave that drains).

        >>> serve_time(2, 2, [(3, 10), (1, 20)], lambda b, p: (b * p, 0.0), lambda b: float(b))
        (40.0, 0.0, 4.0)
        >>> serve_time(1, 2, [(3, 10), (1, 20)], lambda b, p: (b * p, 0.0), lambda b: float(b))
        (30.0, 0.0, 4.0)
    """
    pf = pd = decode = 0.0
    for start in range(0, len(reqs), per_wave):
        queue, running = deque(reqs[start:start + per_wave]), []
        while queue or running:
            joined = [queue.popleft() for _ in range(min(c - len(running), len(queue)))]
            if joined:
                fed = [p for _, p in joined]
                t, d = prefill(len(joined), None if None in fed else max(fed))  # type: ignore[type-var]
                pf, pd = pf + t, pd + d
                running = [left for left in (*running, *(s for s, _ in joined)) if left > 0]
                continue
            decode += step(len(running))
            running = [left - 1 for left in running if left > 1]
    return pf, pd, decode


def predict(entry: dict[str, Any], target: ModelShape, draft: ModelShape | None, curve: EngineCurve,
            hw: Any, cells: Sequence[dict[str, Any]] = (), work: Workload = Workload(None, 32),
            reqs: Sequence[Request] = (), rounds: int = 1) -> CurveCheck:
    """Predicted gains at every level of ``entry``'s curve from its smallest level alone.

    ``reqs`` (the smallest level's generations in prompt order; :func:`requests`) prices whole
    waves of C x ``rounds`` requests as the loop serves them (:func:`serve_time`). Without them
    every request is taken to need the mean steps_plain / E[L] after a prefill of the mean prompt.
    """
    levels = tuple(int(c) for c, _ in entry["gain"])
    measured = tuple(float(g) for _, g in entry["gain"])
    n = int(entry["num_draft_tokens"])
    tree = entry.get("tree")
    depth = _tree_depth(tree) if tree else None
    kind = _kind(entry["strategy"])
    share, nodes = drafting(cells, entry, levels[0])
    steps_plain = max(work.new_tokens - 1, 1)  # the prefill emits the first token
    sampled = float(entry["temperature"]) > 0  # plain and speculative steps both sample: the sampling_* terms

    def spec(c: int, m: int) -> tuple[float, float]:  # (t_plain, t_draft + t_verify) verifying m nodes
        cost = load_step_cost(kind, target, hw, c, max(m, 1), max(m, 1) + 1, work.context, curve,  # type: ignore[arg-type]
                              draft if kind == "draft_model" else None, depth, sampled=sampled)
        return cost.plain_seconds, cost.draft_seconds + cost.verify_seconds

    @functools.cache
    def step(c: int) -> tuple[float, float]:
        """(plain step, mean speculative step) at concurrency c."""
        lo = math.floor(nodes)
        plain, t_lo = spec(c, lo)
        t_n = t_lo + (nodes - lo) * (spec(c, lo + 1)[1] - t_lo)  # linear between whole node counts
        return plain, share * t_n + (1.0 - share) * plain  # steps that draft mixed with ones that do not

    def prefill(c: int, prompt: float | None) -> tuple[float, float]:
        """(target, drafter) prefill of c prompts padded to ``prompt`` tokens (None: not priced)."""
        return prefill_seconds(kind, target, draft, hw, curve, c, prompt) if prompt is not None else (0.0, 0.0)

    def waves(c: int) -> tuple[float, float, float]:
        """(plain time, speculative prefill time, speculative decode time) of the run's waves at
        concurrency c; the decode part is scaled by the anchor below."""
        if not reqs:  # every request at the mean: one wave of c stands for all
            pf, pd = prefill(c, work.prompt_tokens)
            plain, mean = step(c)
            return pf + steps_plain * plain, pf + pd, steps_plain * mean
        fed = [r.prompt_tokens if r.prompt_tokens is not None else work.prompt_tokens for r in reqs]
        plain_pf, _, plain_t = serve_time(c, c * rounds, [(steps_plain, f) for f in fed], prefill,
                                          lambda b: step(b)[0])
        pf, pd, decode = serve_time(c, c * rounds, [(r.steps, f) for r, f in zip(reqs, fed)], prefill,
                                    lambda b: step(b)[1])
        return plain_pf + plain_t, pf + pd, decode

    # The anchor: scale the decode time so the smallest level's prediction is its measurement (the
    # mean-steps form of this is solving E[L], tokens per decode step, from gain(c0) = measured).
    plain0, pre0, decode0 = waves(levels[0])
    room = plain0 / measured[0] - pre0
    scale = room / decode0 if room > 0 and decode0 > 0 else 0.0

    def gain(c: int) -> float:
        plain_t, pre, decode = waves(c)
        return plain_t / (pre + scale * decode)

    predicted = tuple(gain(c) for c in levels)
    key = curve_label(entry["task"], entry["temperature"], entry["strategy"], n, tree)
    return CurveCheck(key, levels, measured, predicted, crossover(list(zip(levels, measured))),
                      crossover(list(zip(levels, predicted))))


def curve_label(task: str, temperature: float, strategy: str, n: int, tree: Any) -> str:
    """How a curve is named in the printed tables and the JSON (e.g. ``chat T=0 ngram N=4``)."""
    return f"{task} T={temperature:g} {strategy} N={n}" + (f" tree={tree}" if tree else "")


def _key(entry: dict[str, Any]) -> tuple[Any, ...]:
    """A load entry's cell key at its smallest level, as :func:`requests` keys its generations."""
    return (entry["task"], entry["strategy"], entry["temperature"], entry["num_draft_tokens"], entry.get("tree"),
            int(entry["gain"][0][0]))


def _tree_depth(tree: Any) -> int | None:
    """A tree label's depth when it says one (e.g. ``'3x2'`` or ``{'depth': 3}``), else None."""
    if isinstance(tree, dict):
        return tree.get("depth")
    digits = str(tree).split("x")[0]
    return int(digits) if digits.isdigit() else None


# How a run's waves are priced: as served (the default), every request at the mean steps and prompt
# (no wave tail, no prefill padding), or decode steps alone at a fixed context.
Pricing = Literal["waves", "mean-steps", "decode-only"]


def _summary(run: Path) -> dict[str, Any]:
    """A run's summary.json, or one :class:`UserError` naming the folder."""
    path = run / "summary.json"
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError("no summary.json: not a `specpick profile` run folder", file=str(run)) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"cannot read the summary: {exc.__class__.__name__}", file=str(path)) from None
    if not isinstance(doc, dict):
        raise UserError("not a profile summary (a JSON object expected)", file=str(path))
    return doc


def curve_entries(run: Path, strategies: set[str] | None = None) -> list[dict[str, Any]]:
    """The run's load curves (two or more levels), among ``strategies`` when given; none is an error."""
    entries = [e for e in _summary(run).get("load") or []
               if len(e["gain"]) > 1 and (strategies is None or e["strategy"] in strategies)]
    if not entries:
        raise UserError("no load curve of two or more concurrencies (profile with --concurrency 1,2,4,...)"
                        + (f" among strategies {sorted(strategies)}" if strategies else ""),
                        file=str(run / "summary.json"), field="load")
    return entries


def check_runs(runs: Sequence[Path], calibration: Path, draft: Path | None = None, engine: str = "hf",
               hardware: str = "cpu", pricing: Pricing = "waves",
               strategies: set[str] | None = None) -> list[CurveCheck]:
    """Every load curve of ``runs`` predicted from its smallest level, sorted by curve name."""
    target = read_calibration(calibration).model.to_shape()
    # The rule recommend and estimate apply: every constant for the engine the file was measured on,
    # the accelerator's efficiencies only for another engine.
    try:
        engine_curve(engine)  # a name the shipped curves know, before the file is applied to it
    except ValueError as exc:
        raise UserError(str(exc), field="--engine") from None
    cal = calibration_for(calibration, engine)
    curve = engine_curve(engine, cal.overrides, label=cal.label)
    hw = get_hardware(hardware)
    if draft is not None and not (draft / "config.json").is_file():
        raise UserError("not a model folder (no config.json)", file=str(draft), field="--draft")
    shape = shape_of(draft) if draft is not None else None
    checks = []
    for run in runs:
        entries, cells = curve_entries(run, strategies), _summary(run).get("cells", [])
        work = workloads(run) if pricing != "decode-only" else {}
        per = requests(run) if pricing == "waves" else {}
        checks += [predict(e, target, shape, curve, hw, cells, work.get(e["task"], Workload(None, 32)),
                           per.get(_key(e), ()), wave_rounds(run)) for e in entries]
    return sorted(checks, key=lambda c: c.key)


Key = tuple[Any, ...]


def curves(run: Path) -> dict[Key, list[tuple[int, float]]]:
    """A profile run's measured load curves (two or more levels), by (task, T, strategy, N, tree)."""
    return {(e["task"], e["temperature"], e["strategy"], e["num_draft_tokens"], e.get("tree")):
            [(int(c), float(g)) for c, g in e["gain"]] for e in curve_entries(run)}


def replicate_check(key: Key, measured: Sequence[tuple[int, float]], other: Sequence[tuple[int, float]],
                    anchor: bool = True) -> CurveCheck | None:
    """``other`` as a prediction of ``measured`` on the levels both hold; None below two levels.

    Anchored at the smallest level as :func:`predict` is (``other`` scaled so its first point
    equals ``measured``'s, the one thing the model takes from the measurement).

    >>> c = replicate_check(("chat", 0.0, "ngram", 4, None), [(1, 1.2), (4, 1.1), (16, 0.9)],
    ...                     [(1, 1.0), (4, 0.9), (16, 0.8)])
    >>> [round(p, 3) for p in c.predicted], c.measured_crossover, c.predicted_crossover
    ([1.2, 1.08, 0.96], 8.0, 10.08)
    """
    theirs = dict(other)
    pts = [(c, g) for c, g in measured if c in theirs]
    if len(pts) < 2:
        return None
    scale = pts[0][1] / theirs[pts[0][0]] if anchor else 1.0
    predicted = [(c, theirs[c] * scale) for c, _ in pts]
    return CurveCheck(curve_label(*key), tuple(c for c, _ in pts), tuple(g for _, g in pts),
                      tuple(p for _, p in predicted), crossover(pts), crossover(predicted))


def compare_runs(a: dict[Key, list[tuple[int, float]]], b: dict[Key, list[tuple[int, float]]],
                 anchor: bool = True) -> list[CurveCheck]:
    """Every curve both runs hold, ``b``'s as the prediction of ``a``'s.

    Two runs of one ``specpick profile`` command (same prompts, same machine, back to back) say how
    well *any* model can do on the crossover goal there: where they disagree on a crossover, no cost
    model can be right on both.
    """
    out = [replicate_check(k, a[k], b[k], anchor) for k in sorted(set(a) & set(b), key=str)]
    return [c for c in out if c is not None]


def format_checks(checks: Sequence[CurveCheck]) -> str:
    """The markdown table of measured / predicted gains and crossovers, then the summary lines."""
    levels = checks[0].levels if checks else ()
    lines = ["| curve | " + " | ".join(f"C={c}" for c in levels) + " | crossover measured / predicted |",
             "|---|" + "---|" * len(levels) + "---|"]
    for c in checks:
        cells = " | ".join(f"{m:.2f} / {p:.2f}" for m, p in zip(c.measured, c.predicted))
        mx = "none" if c.measured_crossover is None else f"C={c.measured_crossover:g}"
        px = "none" if c.predicted_crossover is None else f"C={c.predicted_crossover:g}"
        lines.append(f"| {c.key} | {cells} | {mx} / {px} |")
    errors = [abs(e) for c in checks for e in c.errors]
    crossing = [c for c in checks if c.measured_crossover is not None]
    false = [c for c in checks if c.measured_crossover is None and c.predicted_crossover is not None]
    if errors:
        lines += ["", f"median |error| over {len(errors)} predicted points: {statistics.median(errors):.1%} "
                      f"(p90 {sorted(errors)[math.ceil(0.9 * len(errors)) - 1]:.1%})"]
    lines.append(f"crossovers within {GOAL_STEPS} grid step: {sum(c.crossover_ok for c in crossing)}/"
                 f"{len(crossing)} measured crossings; crossings predicted where none was measured: "
                 f"{len(false)}/{len(checks) - len(crossing)}")
    return "\n".join(lines) + "\n"

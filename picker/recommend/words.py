"""The plan's words, shared by every rendering (markdown, the report page, ``--explain``).

Strategies are named as practitioners call them: one that drafts with a separate model reads
"draft model" (its registered name, e.g. ``vanilla``, stays in configs and JSON keys); the
glossary explains every symbol a plan prints; an unlock is one sentence naming what the better
option would give and what to provide.

    >>> plural(1, "draft token"), plural(3, "draft token")
    ('1 draft token', '3 draft tokens')
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from picker.recommend.contract import Decision, Recommendation, Unlock
from picker.recommend.figures import fraction, times
from picker.recommend.measure import BACKENDS

if TYPE_CHECKING:
    from picker.engine.plugins import StrategyPlugin

DRAFT_MODEL = "draft model"


def plural(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def strategy_word(plugin: StrategyPlugin) -> str:
    """The name a plan prints for a strategy (declared capabilities decide, not names)."""
    return DRAFT_MODEL if plugin.capabilities.needs_draft_model else plugin.name


def strategy_labels() -> dict[str, str]:
    """Registered strategy name -> the name a plan prints (:func:`strategy_word`)."""
    from picker.engine.plugins import load_strategies

    return {name: strategy_word(p) for name, p in load_strategies().items()}


def label(name: str, labels: Mapping[str, str]) -> str:
    return labels.get(name, name)


def relabel(text: str, labels: Mapping[str, str]) -> str:
    """``text`` (a plot's series label, e.g. "vanilla chain (deployed)") with its leading strategy
    name in the plan's words."""
    name = text.split(" ", 1)[0]
    return labels[name] + text[len(name):] if labels.get(name, name) != name else text


def shape_text(d: Decision) -> str:
    """The deployed shape: a tree's depth, branching and tokens, or the chain's length."""
    if d.tree is not None:
        t = d.tree
        return f"a tree of depth {t.depth}, top-k {t.topk}, {plural(t.num_draft_tokens, 'token')} verified per step"
    return f"{plural(d.num_speculative_tokens, 'draft token')} per step"


def unlock_text(u: Unlock, engine: str, labels: Mapping[str, str]) -> str:
    """``u`` as one sentence: what it would give, where, and what to provide."""
    p = u.predicted_speedup
    where = f" on {engine}" if u.same_engine else ""
    steps = [x if x.startswith(("switch ", "take ", "then ")) else f"provide {x}" for x in u.provide]
    return (f"{label(u.strategy, labels)} ({u.setting}) would give {times(p.mean)} (range {times(p.low)}–"
            f"{times(p.high)}){where}: {'; and '.join(steps)}.")


def glossary(rec: Recommendation, *, tau: bool = False) -> list[tuple[str, str]]:
    """(term, meaning) for every symbol the plan prints; TTFT and ITL when it states latency targets."""
    out = [
        ("α (alpha)", "per-token acceptance: the share of drafted tokens the target model accepts "
                      "(accepted drafts / proposed drafts)."),
        ("E[L]", "expected tokens emitted per verify step: the accepted drafts plus the one token the target "
                 "adds itself (the bonus token); the same as 'tokens per verify step'."),
        ("break-even α", "the α below which speculation is slower than plain decoding for that setting at that "
                         "batch size; the plan pays only while the real α stays above it."),
        ("step cost", "the time of one speculative step (drafting plus one verification forward) in plain "
                      "decoding steps at the same batch size; 'cost model' = the load curve's prediction, "
                      "'measured under load' = read from measurements at several concurrencies."),
        ("draft tokens (N)", "tokens proposed per step; a tree proposes several branches and verifies them "
                             "together."),
        ("batch size", "sequences the engine decodes together (the server's concurrency)."),
        (DRAFT_MODEL, "a separate, smaller language model with the target's tokenizer that proposes the "
                      "tokens (registered as `vanilla` in configs and JSON)."),
        ("speedup", "plain decoding time over speculative time for the same tokens; ranges come from the "
                    "α and cost ranges."),
    ]
    if tau:
        out.insert(2, ("τ (tau)", "measured tokens emitted per verify step (E[L] as measured)."))
    slo = rec.inputs.slo if rec.inputs is not None else None
    shown = rec.latency is not None  # the plan's latency table
    if shown or (slo is not None and slo.ttft_ms is not None):
        out.append(("TTFT", "time to first token of a request."))
    if shown or (slo is not None and (slo.itl_p50_ms is not None or slo.itl_p99_ms is not None)):
        out.append(("ITL", "inter-token latency: the time between consecutive output tokens of one request "
                           "(p99: the 99th percentile)."))
    if shown or (slo is not None and slo.tpot_ms is not None):
        out.append(("TPOT", "time per output token: a request's decoding time over its output tokens."))
    return out


def title(rec: Recommendation) -> tuple[str, str]:
    """The plan's title (the profile's name) and its description ("" when it has none)."""
    asked = rec.inputs
    if asked is None:
        return f"Speculative decoding plan: {rec.profile}", ""
    return f"Speculative decoding plan: {asked.name}", " ".join(asked.description.split())


def measure_next(rec: Recommendation, labels: dict[str, str]) -> list[str]:
    """What would change an "off" plan besides an unlock: the measurement the decision names for each
    range the evidence cannot decide, else the deployable option closest to paying and the α it needs."""
    out = []
    for r in rec.decision.batch_schedule:
        if r.uncertain and r.measure:
            top = "∞" if r.max_batch is None else r.max_batch
            out.append(f"At batch {r.min_batch}–{top}, an A/B gain measured above 1.0x: `{r.measure}`.")
    best = next((c for c in rec.alternatives if c.feasible and c.engine_supported), None)
    if not out and best is not None:
        name = label(best.strategy, labels)
        backend = BACKENDS.get(rec.engine)  # the profiler's backend for the engine, where it drives one live
        live = f" (add `--backend {backend[0]} --url URL` for the live server)" if backend else ""
        out.append(f"A measured α above {fraction(best.break_even_alpha)} for {name} (its break-even at the typical "
                   f"batch of {rec.typical_batch}; with the priors' α it gives {times(best.predicted_speedup.mean)}): "
                   "measure it on your traffic "
                   f"with `specpick profile --strategies {best.strategy} --workload PROFILE --out RUN`{live} and "
                   "re-run `specpick recommend PROFILE --measurements RUN/summary.json`.")
    return out


def what_would_change(rec: Recommendation, labels: dict[str, str]) -> list[str]:
    """An "off" plan's list of what would change it (markdown and page alike): the unlocks, then
    :func:`measure_next`; a sentence saying so where there is nothing."""
    changes = [unlock_text(u, rec.engine, labels) for u in rec.unlocks] + measure_next(rec, labels)
    return changes or ["Nothing this profile can provide: every option is predicted slower."]

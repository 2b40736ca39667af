"""Render a Recommendation as markdown (a tuning guide), JSON or YAML; with ``--explain`` (or a
policy, or a plot) the result's explanation and notes after it.

The markdown plan opens with its inputs (model, hardware, engine, traffic, SLOs, evidence and every
default the profile used), then the decision and why (naming the best option the deployment cannot
run yet and what would unlock it); an "off" plan says why and what would change it, with no enable
step. Tables stay narrow (long notes go under them, numbered) and a glossary closes the plan.

    >>> render(rec, "json")   # doctest: +SKIP

Numbers are written through ``picker.recommend.figures`` (one rounding rule, one set of schedule
columns), as the report page writes them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from picker.recommend import figures
from picker.recommend.contract import Recommendation
from picker.recommend.explain import markdown as explain_markdown
from picker.recommend.figures import fraction, headline, times
from picker.recommend.latency import latency_markdown
from picker.recommend.plan_inputs import default_lines, lines
from picker.recommend.result import Result
from picker.recommend.words import glossary, label, shape_text, strategy_labels, title, unlock_text, what_would_change

FORMATS = ("md", "json", "yaml")


def render(rec: Recommendation, fmt: str) -> str:
    """``rec`` as markdown (a tuning guide), JSON or YAML."""
    if fmt == "md":
        return markdown(rec)
    return render_data(rec.model_dump(mode="json"), fmt)


def render_result(result: Result, fmt: str, *, explain: bool = False, section: bool = False,
                  notes: Sequence[str] = ()) -> str:
    """What ``specpick recommend`` prints: the plan, and where ``section`` (``--explain``, ``--policy``
    or ``--plot`` given) the explanation -- its per-task rows when ``explain`` -- with the result's
    notes and ``notes`` (what the command itself did, e.g. the plot it wrote)."""
    rows = result.explain if explain else ()
    said = [*result.notes, *notes]
    if fmt == "md":
        return render(result.recommendation, "md") + (explain_markdown(rows, said) if section else "")
    data = result.recommendation.model_dump(mode="json")
    if section:
        data["explain"] = {"notes": said, "per_task": list(rows)}
    return render_data(data, fmt)


def render_data(data: dict[str, Any], fmt: str) -> str:
    """The one JSON/YAML writer of recommendation output (plain, or with ``explain`` added)."""
    if fmt == "json":
        return json.dumps(data, indent=2) + "\n"
    if fmt == "yaml":
        import yaml

        return yaml.safe_dump(data, sort_keys=False, width=100)
    raise ValueError(f"format must be one of {', '.join(FORMATS)}; got {fmt!r}")


def _engine_block(name: str, cfg: dict[str, Any]) -> list[str]:
    if not cfg.get("supported", False):
        return [f"- **{name}** ({cfg.get('version')}): not available — {cfg.get('reason')}", ""]
    lines = [f"**{name}** (targets {cfg['version']}):", ""]
    if "note" in cfg:
        lines += [f"> {cfg['note']}", ""]
    if "args" in cfg:
        lines += ["```bash", " ".join(_shell_quote(a) for a in cfg["args"]), "```"]
    if "adaptive_config" in cfg:
        lines += ["`speculative_adaptive.json`:", "```json", json.dumps(cfg["adaptive_config"], indent=2), "```"]
    if name == "tensorrt_llm":
        import yaml

        body = yaml.safe_dump({"speculative_config": cfg["speculative_config"]}, sort_keys=False).rstrip()
        lines += ["```yaml", body, "```"]
    return lines + [""]


def _shell_quote(arg: str) -> str:
    return f"'{arg}'" if any(ch in arg for ch in ' {}"[]') else arg


def _on(model: str | None) -> str:
    return f", measured on {model}" if model else ""  # measurements of another model (--allow-other-model)


def _inputs(rec: Recommendation) -> list[str]:
    asked = rec.inputs
    if asked is None:
        return []
    out = ["## Inputs", ""]
    if asked.file:
        out.append(f"- **Profile**: {asked.file}")
    out += [f"- **{name}**: {text}" for name, text in lines(asked)]
    used = default_lines(asked)
    if used:
        out += ["- **Defaults used** (the profile left these out; `specpick check` lists them):",
                *[f"  - {d}" for d in used]]
    return out + [""]


def _why(rec: Recommendation, labels: dict[str, str]) -> list[str]:
    out = ["### Why", *[f"- {r}" for r in rec.rationale]]
    if rec.unlocks:
        out.append(f"- Better once unlocked: {unlock_text(rec.unlocks[0], rec.engine, labels)}")
        out += [f"  - Also: {unlock_text(u, rec.engine, labels)}" for u in rec.unlocks[1:]]
    return out + [""]


def _decision_off(rec: Recommendation, labels: dict[str, str]) -> list[str]:
    out = ["## Decision: leave speculative decoding off", "", "### Why", *[f"- {r}" for r in rec.rationale], "",
           "### What would change it", ""]
    out += [f"- {c}" for c in what_would_change(rec, labels)]
    return out + [""]


def _decision_on(rec: Recommendation, labels: dict[str, str]) -> list[str]:
    d, h = rec.decision, headline(rec)
    out = [
        f"## Decision: enable {label(d.strategy, labels)} ({shape_text(d)}) on {rec.engine}", "",
        f"Expected speedup over plain decoding: **{h.speedup}** (range {h.low}–{h.high}; "
        f"the deployed policy averaged over the profile's task mix, concurrency ranges and temperatures, "
        f"token-weighted, with its batch schedule and temperature switch), "
        f"evidence: {rec.evidence.source}{_on(rec.evidence.measured_on)}. Break-even at the typical batch of "
        f"{h.typical_batch}: **α ≥ {h.break_even_alpha}** per token, i.e. "
        f"**≥ {h.accept_length} tokens per verify step** (bonus included).", "",
        *_why(rec, labels), "### When not to speculate", ""]
    sw = d.temperature_switch
    when = f"turn it off above T = {sw.above:g}" if sw.above is not None else "no switch needed"
    out.append(f"- Temperature: {when} ({sw.reason}).")
    cap = d.max_concurrency
    if cap is not None:
        out.append(f"- Concurrency: keep the server at or below {cap} sequences ({rec.engine} drafts the same "
                   "setting at every batch size).")
    on = rec.evidence.measured_on
    heads = [name + (_on(on) if name == "speedup" else "") for name, _ in figures.SCHEDULE_COLUMNS]
    out += ["", "| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    out += ["| " + " | ".join(cells) + " |" for cells in figures.schedule_rows(rec)]
    for note in figures.schedule_footnotes(rec):
        out += ["", note]
    return out + [""]


def _per_task(rec: Recommendation, labels: dict[str, str]) -> list[str]:
    out = ["## Per task type", "", "| task | share | best strategy | α (range) | evidence | best alone | deployed |",
           "|---|---|---|---|---|---|---|"]
    for t in rec.per_task:
        rng = f"{fraction(t.alpha)} ({fraction(t.alpha_range[0])}–{fraction(t.alpha_range[1])})" \
            if t.alpha_range and t.alpha is not None else "—"
        out.append(f"| {t.task} | {t.weight:.0%} | {label(t.strategy, labels)} | {rng} | "
                   f"{t.evidence}{_on(t.measured_on)} | "
                   f"{times(t.predicted_speedup.mean)} | {times(t.deployed_speedup)} |")
    return out + [""]


def _alternatives(rec: Recommendation, labels: dict[str, str]) -> list[str]:
    out = ["## Alternatives", "", "Each configuration at full depth at every batch, over the whole workload "
           "(no batch schedule, no temperature switch): the ranking the decision is made on.", "",
           "| strategy | setting | speedup (range) | break-even α | runs here |", "|---|---|---|---|---|"]
    notes: list[str] = []
    for c in rec.alternatives:
        setting = (f"depth {c.tree.depth}, top-k {c.tree.topk}, {c.tree.num_draft_tokens} tokens" if c.tree
                   else f"N={c.num_speculative_tokens}")
        ok = "yes" if c.feasible and c.engine_supported else "no"
        if c.notes:
            notes.append("; ".join(c.notes))
            ok += f" ({len(notes)})"
        out.append(f"| {label(c.strategy, labels)} | {setting} | {times(c.predicted_speedup.mean)} "
                   f"({fraction(c.predicted_speedup.low)}–{fraction(c.predicted_speedup.high)}) | "
                   f"{fraction(c.break_even_alpha)} | {ok} |")
    return out + [""] + [f"({i}) {n}" for i, n in enumerate(notes, 1)] + ([""] if notes else [])


def markdown(rec: Recommendation) -> str:
    labels = strategy_labels()
    name, about = title(rec)
    out = [f"# {name}", "", *([about, ""] if about else []), *_inputs(rec)]
    off = rec.decision.strategy == "none"
    out += _decision_off(rec, labels) if off else _decision_on(rec, labels)
    out += latency_markdown(rec)
    if rec.warnings:
        out += ["### Warnings", *[f"- {w}" for w in rec.warnings], ""]
    out += _per_task(rec, labels) + _alternatives(rec, labels)
    if rec.engine_configs and not off:
        out += ["## Engine configs (ready to paste)", ""]
        for engine, cfg in rec.engine_configs.items():
            out += _engine_block(engine, cfg)
    if not off:
        out += ["## Rollout", ""]
        out += [f"{s.step}. **{s.name}** — {s.action} *Gate:* {s.gate}." for s in rec.rollout]
        out.append("")
    out += ["## Evidence", "", f"Source: {rec.evidence.source}.", ""]
    out += [f"- {n}" for n in rec.evidence.notes]
    out += ["", "Citations:", *[f"- {c}" for c in rec.evidence.citations], ""]
    out += ["## Glossary", "", *[f"- **{term}**: {meaning}" for term, meaning in glossary(rec)], ""]
    return "\n".join(out)

"""Render a Recommendation as markdown (a tuning guide), JSON or YAML; with ``--explain`` (or a
policy, or a plot) the result's explanation and notes after it.

    >>> render(rec, "json")   # doctest: +SKIP

Numbers are written through ``picker.recommend.figures`` (one rounding rule, one set of schedule
columns), as the report page writes them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from picker.recommend.contract import Recommendation
from picker.recommend.explain import markdown as explain_markdown
from picker.recommend.figures import SCHEDULE_COLUMNS, fraction, headline, schedule_rows, times
from picker.recommend.latency import latency_markdown
from picker.recommend.result import Result

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

        spec = yaml.safe_dump({"speculative_config": cfg["speculative_config"]}, sort_keys=False).rstrip()
        lines += ["```yaml", spec, "```"]
    return lines + [""]


def _shell_quote(arg: str) -> str:
    return f"'{arg}'" if any(ch in arg for ch in ' {}"[]') else arg


def _on(model: str | None) -> str:
    return f", measured on {model}" if model else ""  # measurements of another model (--allow-other-model)


def markdown(rec: Recommendation) -> str:
    d = rec.decision
    out = [f"# Speculative decoding plan: {rec.profile}", ""]
    if d.strategy == "none":
        out += ["## Decision: leave speculative decoding off", "", *[f"- {r}" for r in rec.rationale], ""]
    else:
        shape = (f"tree depth {d.tree.depth}, top-k {d.tree.topk}, {d.tree.num_draft_tokens} draft tokens"
                 if d.tree else f"{d.num_speculative_tokens} draft tokens per step")
        h = headline(rec)
        out += [
            f"## Decision: enable `{d.strategy}` ({shape}) on {rec.engine}", "",
            f"Expected speedup over plain decoding: **{h.speedup}** (range {h.low}–{h.high}; "
            f"the deployed policy averaged over the profile's task mix, concurrency ranges and temperatures, "
            f"token-weighted, with its batch schedule and temperature switch), "
            f"evidence: {rec.evidence.source}{_on(rec.evidence.measured_on)}. Break-even at the typical batch of "
            f"{h.typical_batch}: **α ≥ {h.break_even_alpha}** per token, i.e. "
            f"**≥ {h.accept_length} tokens per verify step** (bonus included).", "",
            "### Why", *[f"- {r}" for r in rec.rationale], "",
        ]
        out += ["### When not to speculate", ""]
        sw = d.temperature_switch
        when = f"turn it off above T = {sw.above:g}" if sw.above is not None else "no switch needed"
        out.append(f"- Temperature: {when} ({sw.reason}).")
        on = rec.evidence.measured_on
        heads = [name + (_on(on) if name.startswith("predicted speedup") else "") for name, _ in SCHEDULE_COLUMNS]
        out += ["", "| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
        out += ["| " + " | ".join(cells) + " |" for cells in schedule_rows(rec)]
        out.append("")
    out += latency_markdown(rec)
    if rec.warnings:
        out += ["### Warnings", *[f"- {w}" for w in rec.warnings], ""]
    out += ["## Per task type", "", "| task | share | best strategy | α (range) | evidence | best alone | deployed |",
            "|---|---|---|---|---|---|---|"]
    for t in rec.per_task:
        rng = f"{fraction(t.alpha)} ({fraction(t.alpha_range[0])}–{fraction(t.alpha_range[1])})" \
            if t.alpha_range and t.alpha is not None else "—"
        out.append(f"| {t.task} | {t.weight:.0%} | {t.strategy} | {rng} | {t.evidence}{_on(t.measured_on)} | "
                   f"{times(t.predicted_speedup.mean)} | {times(t.deployed_speedup)} |")
    out += ["", "## Alternatives", "", "Each configuration at full depth at every batch, over the whole workload "
            "(no batch schedule, no temperature switch): the ranking the decision is made on.", "",
            "| strategy | setting | speedup (range) | break-even α | deployable | notes |",
            "|---|---|---|---|---|---|"]
    for c in rec.alternatives:
        setting = (f"depth {c.tree.depth}, top-k {c.tree.topk}, {c.tree.num_draft_tokens} tokens" if c.tree
                   else f"N={c.num_speculative_tokens}")
        ok = "yes" if c.feasible and c.engine_supported else "no"
        out.append(f"| {c.strategy} | {setting} | {times(c.predicted_speedup.mean)} "
                   f"({times(c.predicted_speedup.low)}–{times(c.predicted_speedup.high)}) | "
                   f"{fraction(c.break_even_alpha)} | "
                   f"{ok} | {'; '.join(c.notes)} |")
    if rec.engine_configs:
        out += ["", "## Engine configs (ready to paste)", ""]
        for name, cfg in rec.engine_configs.items():
            out += _engine_block(name, cfg)
    out += ["## Rollout", ""]
    for s in rec.rollout:
        out.append(f"{s.step}. **{s.name}** — {s.action} *Gate:* {s.gate}.")
    out += ["", "## Evidence", "", f"Source: {rec.evidence.source}.", ""]
    out += [f"- {n}" for n in rec.evidence.notes]
    out += ["", "Citations:", *[f"- {c}" for c in rec.evidence.citations], ""]
    return "\n".join(out)

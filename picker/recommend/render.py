"""Render a Recommendation as markdown (a tuning guide), JSON or YAML.

    >>> render(rec, "json")   # doctest: +SKIP
"""

from __future__ import annotations

import json
from typing import Any

from picker.recommend.contract import Recommendation

FORMATS = ("md", "json", "yaml")


def render(rec: Recommendation, fmt: str) -> str:
    """``rec`` as markdown (a tuning guide), JSON or YAML."""
    if fmt == "md":
        return markdown(rec)
    return render_data(rec.model_dump(mode="json"), fmt)


def render_data(data: dict[str, Any], fmt: str) -> str:
    """The one JSON/YAML writer of recommendation output (plain, or with ``explain`` added)."""
    if fmt == "json":
        return json.dumps(data, indent=2) + "\n"
    if fmt == "yaml":
        import yaml

        return yaml.safe_dump(data, sort_keys=False, width=100)
    raise ValueError(f"format must be one of {', '.join(FORMATS)}; got {fmt!r}")


def _x(s: float) -> str:
    return f"{s:.2f}x"


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

        lines += ["```yaml", yaml.safe_dump({"speculative_config": cfg["speculative_config"]}, sort_keys=False).rstrip(),
                  "```"]
    return lines + [""]


def _shell_quote(arg: str) -> str:
    return f"'{arg}'" if any(ch in arg for ch in ' {}"[]') else arg


def _on(model: str | None) -> str:
    return f", measured on {model}" if model else ""  # measurements of another model (--allow-other-model)


def markdown(rec: Recommendation) -> str:
    d = rec.decision
    ps = rec.predicted_speedup
    out = [f"# Speculative decoding plan: {rec.profile}", ""]
    if d.strategy == "none":
        out += ["## Decision: leave speculative decoding off", "", *[f"- {r}" for r in rec.rationale], ""]
    else:
        shape = (f"tree depth {d.tree.depth}, top-k {d.tree.topk}, {d.tree.num_draft_tokens} draft tokens"
                 if d.tree else f"{d.num_speculative_tokens} draft tokens per step")
        out += [
            f"## Decision: enable `{d.strategy}` ({shape}) on {rec.engine}", "",
            f"Expected speedup over plain decoding: **{_x(ps.mean)}** (range {_x(ps.low)}–{_x(ps.high)}; "
            f"the deployed policy averaged over the profile's task mix, concurrency ranges and temperatures, "
            f"token-weighted, with its batch schedule and temperature switch), "
            f"evidence: {rec.evidence.source}{_on(rec.evidence.measured_on)}. Break-even: **α ≥ {rec.break_even_alpha:.2f}** per token, i.e. "
            f"**≥ {rec.break_even_accept_length:.2f} tokens per verify step** (bonus included).", "",
            "### Why", *[f"- {r}" for r in rec.rationale], "",
        ]
        out += ["### When not to speculate", ""]
        sw = d.temperature_switch
        out.append(f"- Temperature: {'turn it off above T = ' + format(sw.above, 'g') if sw.above is not None else 'no switch needed'} ({sw.reason}).")
        out += ["", f"| batch size | draft tokens | predicted speedup at that batch (task mix, temperatures){_on(rec.evidence.measured_on)} "
                    "| break-even α | step cost |", "|---|---|---|---|---|"]
        for r in d.batch_schedule:
            hi = "∞" if r.max_batch is None else str(r.max_batch)
            k = "off" if r.num_speculative_tokens == 0 else str(r.num_speculative_tokens)
            if r.disable_above_temperature is not None:
                k += f" (off above T = {r.disable_above_temperature:g})"
            span = _x(r.predicted_speedup) if r.predicted_speedup == r.predicted_speedup_at_max_batch else \
                f"{_x(r.predicted_speedup)} → {_x(r.predicted_speedup_at_max_batch)}"
            if r.uncertain and r.predicted_speedup_range is not None:
                lo_s, hi_s = r.predicted_speedup_range
                span += f" (uncertain: {_x(lo_s)}–{_x(hi_s)} straddles 1.0x; measure at this batch)"
            be = "—" if r.break_even_alpha is None else f"{r.break_even_alpha:.2f}"
            cost = "measured under load" if r.step_cost == "measured" else "model"
            out.append(f"| {r.min_batch}–{hi} | {k} | {span} | {be} | {cost} |")
        out.append("")
    if rec.warnings:
        out += ["### Warnings", *[f"- {w}" for w in rec.warnings], ""]
    out += ["## Per task type", "", "| task | share | best strategy | α (range) | evidence | best alone | deployed |",
            "|---|---|---|---|---|---|---|"]
    for t in rec.per_task:
        rng = f"{t.alpha:.2f} ({t.alpha_range[0]:.2f}–{t.alpha_range[1]:.2f})" if t.alpha_range else "—"
        out.append(f"| {t.task} | {t.weight:.0%} | {t.strategy} | {rng} | {t.evidence}{_on(t.measured_on)} | "
                   f"{_x(t.predicted_speedup.mean)} | {_x(t.deployed_speedup)} |")
    out += ["", "## Alternatives", "", "Each configuration at full depth at every batch, over the whole workload "
            "(no batch schedule, no temperature switch): the ranking the decision is made on.", "",
            "| strategy | setting | speedup (range) | break-even α | deployable | notes |",
            "|---|---|---|---|---|---|"]
    for c in rec.alternatives:
        setting = (f"depth {c.tree.depth}, top-k {c.tree.topk}, {c.tree.num_draft_tokens} tokens" if c.tree
                   else f"N={c.num_speculative_tokens}")
        ok = "yes" if c.feasible and c.engine_supported else "no"
        out.append(f"| {c.strategy} | {setting} | {_x(c.predicted_speedup.mean)} "
                   f"({_x(c.predicted_speedup.low)}–{_x(c.predicted_speedup.high)}) | {c.break_even_alpha:.2f} | "
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

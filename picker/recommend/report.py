"""``specpick report``: one self-contained HTML page a team attaches to a rollout ticket.

Built from the pipeline's :class:`~picker.recommend.result.Result` (the Recommendation and the
series behind it): decision and rollout, per-task table, α per task type, gain against N and
against batch size as deployed (the schedule's switch points marked), the batch schedule,
measured against predicted, engine configs with copy buttons, evidence with one citation per
source. Numbers are written through ``picker.recommend.figures``, as the markdown plan writes
them. Styles and images are inlined (PNG data URIs); every inserted string is escaped; nothing is
fetched.

    >>> page = html_page(recommend(load_profile("profiles/chat-70b-h100.yaml")))   # doctest: +SKIP
    >>> page.startswith("<!DOCTYPE html>")                                          # doctest: +SKIP
    True
"""

from __future__ import annotations

import dataclasses
import json
import shlex
from html import escape
from typing import Any

from picker.recommend import report_plots as plots
from picker.recommend.contract import BatchRange, Recommendation
from picker.recommend.figures import (
    SCHEDULE_COLUMNS,
    fraction,
    headline,
    schedule_footnotes,
    schedule_rows,
    times,
)
from picker.recommend.plan_inputs import default_lines, lines
from picker.recommend.result import Result
from picker.recommend.series import crossover
from picker.recommend.words import (
    glossary,
    label,
    plural,
    relabel,
    shape_text,
    strategy_labels,
    title,
    unlock_text,
    what_would_change,
)

SECTIONS = ("inputs", "decision", "rollout", "per-task", "alpha", "gain", "schedule", "measured", "alternatives",
            "engine-configs", "evidence", "glossary")

CSS = """
body{font:15px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#1d2430;background:#f6f7f9}
main{max-width:1040px;margin:0 auto;padding:24px}
h1{font-size:24px;margin:0 0 4px}
h2{font-size:19px;margin:28px 0 10px;border-bottom:1px solid #dde1e6;padding-bottom:4px}
section{background:#fff;border:1px solid #e2e5ea;border-radius:8px;padding:4px 18px 14px;margin:14px 0}
table{border-collapse:collapse;width:100%;font-size:14px}
th,td{text-align:left;padding:5px 8px;border-bottom:1px solid #eceef1}
th{background:#f1f3f6}.num{text-align:right;font-variant-numeric:tabular-nums}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;background:#e8ecf2}
.measured{background:#d6f0dc}.prior{background:#f3e6c8}.mixed{background:#dce6f5}
.warn{background:#fff4e0;border-left:4px solid #e0a030;padding:6px 10px;margin:6px 0}
.big{font-size:28px;font-weight:600}img.plot{max-width:100%;height:auto;display:block;margin:8px 0}
pre{background:#0f1720;color:#e6edf3;padding:10px;border-radius:6px;overflow-x:auto;white-space:pre-wrap;
word-break:break-all;font-size:13px}button.copy{float:right;margin:2px 0 4px;padding:3px 10px;cursor:pointer}
.muted{color:#5b6573;font-size:13px}
"""

# Copy the <pre> a button names; navigator.clipboard where the page is a secure context, else a
# selected textarea and execCommand (older browsers, some file:// setups).
JS = """
function copyText(text){
  if (navigator.clipboard && window.isSecureContext) {
    return navigator.clipboard.writeText(text).catch(function(){ return fallbackCopy(text); });
  }
  return Promise.resolve(fallbackCopy(text));
}
function fallbackCopy(text){
  var t = document.createElement('textarea'); t.value = text; t.setAttribute('readonly', '');
  t.style.position = 'fixed'; t.style.opacity = '0'; document.body.appendChild(t); t.select();
  try { document.execCommand('copy'); } finally { document.body.removeChild(t); }
}
document.querySelectorAll('button.copy').forEach(function(b){
  b.addEventListener('click', function(){
    var text = document.getElementById(b.dataset.target).textContent;
    copyText(text).then(function(){ b.textContent = 'Copied'; b.dataset.copied = '1'; });
  });
});
"""


def _e(value: Any) -> str:
    return escape(str(value), quote=True)


def _x(v: float | None) -> str:
    return "—" if v is None else times(v)


def _badge(source: str, on: str | None = None) -> str:
    label = source + (f", measured on {on}" if on else "")
    return f'<span class="badge {_e(source)}">{_e(label)}</span>'


def _table(head: list[str], rows: list[list[str]], numeric: set[int] | None = None) -> str:
    """A table whose cells are already-escaped HTML fragments."""
    numeric = numeric or set()
    th = "".join(f"<th>{_e(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f'<td class="num">{c}</td>' if i in numeric else f"<td>{c}</td>"
                                    for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def _img(uri: str | None, ident: str, alt: str) -> str:
    if uri is None:
        why = "nothing to draw" if plots.available() else "install the plot extra (matplotlib) to draw it"
        return f'<p class="muted">No plot: {_e(why)}.</p>'
    return f'<img class="plot" id="{_e(ident)}" src="{_e(uri)}" alt="{_e(alt)}">'


def config_blocks(name: str, cfg: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(kind, caption, text to paste) for one engine's config: its CLI tokens shell-quoted, TensorRT-LLM's
    YAML, an adaptive-k JSON file. Unsupported engines have none."""
    if not cfg.get("supported", False):
        return []
    out = []
    if cfg.get("args"):
        out.append(("flags", "command-line flags", shlex.join(str(a) for a in cfg["args"])))
    if "speculative_config" in cfg and not cfg.get("args"):
        import yaml

        out.append(("yaml", "config YAML", yaml.safe_dump({"speculative_config": cfg["speculative_config"]},
                                                  sort_keys=False).rstrip()))
    if "adaptive_config" in cfg:
        out.append(("json", "speculative_adaptive.json", json.dumps(cfg["adaptive_config"], indent=2)))
    return out


def _inputs(rec: Recommendation) -> str:
    asked = rec.inputs
    if asked is None:
        return "<p class=\"muted\">This plan does not record its inputs.</p>"
    rows = ([["Profile", _e(asked.file)]] if asked.file else []) + [[_e(k), _e(v)] for k, v in lines(asked)]
    used = default_lines(asked)
    defaults = ("<h3>Defaults used</h3><p class=\"muted\">The profile left these out "
                "(<code>specpick check</code> lists them).</p><ul>" + "".join(f"<li>{_e(x)}</li>" for x in used)
                + "</ul>") if used else ""
    return _table(["input", "value"], rows) + defaults


def _items(texts: list[str]) -> str:
    return "<ul>" + "".join(f"<li>{_code(t)}</li>" for t in texts) + "</ul>"


def _decision(rec: Recommendation, labels: dict[str, str]) -> str:
    d, ev = rec.decision, rec.evidence
    unlock = [unlock_text(u, rec.engine, labels) for u in rec.unlocks]
    if d.strategy == "none":
        head = "<p class=\"big\">Leave speculative decoding off</p>"
    else:
        h = headline(rec)
        head = (f'<p class="big">Enable <code>{_e(label(d.strategy, labels))}</code> ({_e(shape_text(d))}) '
                f'on {_e(rec.engine)}</p>'
                f'<p>Predicted speedup <b>{_e(h.speedup)}</b> (range {_e(h.low)}–{_e(h.high)}), '
                f'evidence {_badge(ev.source, ev.measured_on)}. Break-even at the typical batch of {h.typical_batch}: '
                f'α ≥ <b>{_e(h.break_even_alpha)}</b> (≥ {_e(h.accept_length)} tokens per verify step, '
                'bonus included).</p>')
        sw = d.temperature_switch
        switch = "off above T = " + format(sw.above, "g") if sw.above is not None else "none"
        head += (f"<p>Temperature switch: {_e(switch)}"
                 f" — {_e(sw.reason)}.</p>")
        cap = d.max_concurrency
        if cap is not None:
            head += (f"<p>Concurrency: keep the server at or below {cap} sequences ({_e(rec.engine)} drafts the "
                     "same setting at every batch size).</p>")
    why = "".join(f"<li>{_e(r)}</li>" for r in rec.rationale)
    if unlock and d.strategy != "none":
        why += f"<li>Better once unlocked: {_e(unlock[0])}{_items(unlock[1:]) if unlock[1:] else ''}</li>"
    warns = "".join(f'<div class="warn">{_e(w)}</div>' for w in rec.warnings)
    return f"{head}<h3>Why</h3><ul>{why}</ul>{warns}"


def _rollout(rec: Recommendation, labels: dict[str, str]) -> str:
    if rec.decision.strategy == "none":  # nothing to enable: what would change the decision instead
        return _items(what_would_change(rec, labels))
    items = "".join(f"<li><b>{_e(s.name)}</b> — {_e(s.action)}<br><span class=\"muted\">Gate: {_e(s.gate)}</span></li>"
                    for s in rec.rollout)
    return f"<ol>{items}</ol>"


def _per_task(rec: Recommendation, labels: dict[str, str]) -> str:
    rows = []
    for t in rec.per_task:
        rng = t.alpha_range
        alpha = "—" if t.alpha is None else fraction(t.alpha) + (
            f" ({fraction(rng[0])}–{fraction(rng[1])})" if rng else "")
        rows.append([_e(t.task), f"{t.weight:.0%}", _e(label(t.strategy, labels)), _e(alpha),
                     _badge(t.evidence, t.measured_on),
                     _e(_x(t.predicted_speedup.mean)), _e(_x(t.deployed_speedup))])
    return _table(["task", "share", "best strategy", "α (range)", "evidence", "best alone", "deployed"], rows,
                  {1, 5, 6})


def _schedule(rec: Recommendation) -> str:
    on = rec.evidence.measured_on
    note = f'<p class="muted">Speedups measured on {_e(on)}.</p>' if on else ""
    rows = [[_e(c) for c in cells] for cells in schedule_rows(rec)]
    notes = "".join(f'<p class="muted">{_code(n)}</p>' for n in schedule_footnotes(rec))
    return note + _table([name for name, _ in SCHEDULE_COLUMNS], rows, {2, 3}) + notes


def _alternatives(rec: Recommendation, labels: dict[str, str]) -> str:
    rows = []
    for c in rec.alternatives:
        t = c.tree
        setting = (f"depth {t.depth}, top-k {t.topk}, {t.num_draft_tokens} tokens" if t
                   else f"N={c.num_speculative_tokens}")
        p = c.predicted_speedup
        rows.append([_e(label(c.strategy, labels)), _e(setting), _e(f"{_x(p.mean)} ({_x(p.low)}–{_x(p.high)})"),
                     _e(fraction(c.break_even_alpha)), "yes" if c.feasible and c.engine_supported else "no",
                     _e("; ".join(c.notes))])
    return _table(["strategy", "setting", "speedup (range)", "break-even α", "runs here", "notes"], rows, {3})


def _engines(rec: Recommendation) -> str:
    configs = rec.engine_configs
    if not configs or rec.decision.strategy == "none":
        return "<p>No engine config: speculation stays off.</p>"
    parts = []
    for i, (name, cfg) in enumerate(configs.items()):
        parts.append(f"<h3>{_e(name)} <span class=\"muted\">(targets {_e(cfg.get('version'))})</span></h3>")
        if not cfg.get("supported", False):
            parts.append(f"<p class=\"muted\">Not available: {_e(cfg.get('reason'))}</p>")
            continue
        if cfg.get("note"):
            parts.append(f"<p class=\"muted\">{_e(cfg['note'])}</p>")
        for j, (kind, caption, text) in enumerate(config_blocks(name, cfg)):
            ident = f"cfg-{i}-{j}"
            parts.append(f'<div class="config" data-engine="{_e(name)}" data-kind="{_e(kind)}">'
                         f'<span class="muted">{_e(caption)}</span>'
                         f'<button class="copy" type="button" data-target="{ident}">Copy</button>'
                         f'<pre id="{ident}">{_e(text)}</pre></div>')
    return "".join(parts)


def _measured(result: Result, uri: str | None) -> str:
    if not result.measured:
        return "<p class=\"muted\">No measurements given (specpick report --measurements summary.json).</p>"
    rows = [[_e(c.task), _e(c.strategy), f"{c.temperature:g}", str(c.num_draft_tokens),
             f"{fraction(c.alpha)} ({fraction(c.alpha_ci[0])}–{fraction(c.alpha_ci[1])})",
             f"{fraction(c.prior_alpha)} ({fraction(c.prior_range[0])}–{fraction(c.prior_range[1])})",
             "—" if c.tau is None else fraction(c.tau), "—" if c.predicted_tau is None else fraction(c.predicted_tau)]
            for c in result.measured]
    on = result.recommendation.evidence.measured_on
    note = f'<p class="muted">Measured on {_e(on)}, not on the deployed model.</p>' if on else ""
    return (note + _img(uri, "plot-measured", "measured against predicted")
            + _table(["task", "strategy", "T", "N", "measured α (95% CI)", "prior α (range)", "measured τ",
                      "predicted τ"], rows, {2, 3, 6, 7}))


def _evidence(rec: Recommendation) -> str:
    ev = rec.evidence
    notes = "".join(f"<li>{_e(n)}</li>" for n in ev.notes)
    cites = "".join(f"<li>{_e(c)}</li>" for c in ev.citations)
    prov = f" Provenance: {_badge(ev.provenance)}." if ev.provenance else ""
    return (f"<p>Source: {_badge(ev.source, ev.measured_on)}.{prov} Step costs: {_e(ev.cost_source)}.</p>"
            f"<ul>{notes}</ul><h3>Citations</h3><ol>{cites}</ol>")


def _switches(rec: Recommendation) -> list[tuple[int, str]]:
    """Where a schedule row starts, what changes there: the draft length, off, or the speedup falling
    below 1x at the same length (an engine that cannot switch by batch), or the step cost's source."""
    out = []
    rows = rec.decision.batch_schedule
    for prev, r in zip(rows, rows[1:]):
        k = r.num_speculative_tokens
        if k != prev.num_speculative_tokens:
            what = "off" if k == 0 else f"N={k}"
        elif (r.predicted_speedup < 1.0) != (prev.predicted_speedup < 1.0):
            what = "below 1x" if r.predicted_speedup < 1.0 else "above 1x"
        else:
            what = "measured cost" if r.step_cost == "measured" else "modelled cost"
        out.append((r.min_batch, what))
    return out


def _gain_words(result: Result) -> list[str]:
    """Under the plots: where the deployed strategy's gain against N crosses 1, and the schedule in
    words -- the same cells as the schedule table, so the plot's switch points and the rows agree."""
    out = []
    if result.gain_n and result.deployment is not None:
        s = result.gain_n[0]
        x = crossover(s.x, s.mean)
        where = f"crosses 1x at N = {x:.3g}" if x is not None else \
            f"{'above' if s.mean[0] >= 1.0 else 'below'} 1x at every N drawn"
        out.append(f"{s.label}: {where}; deployed N = {result.recommendation.decision.num_speculative_tokens}")
    if result.gain_batch:
        rec = result.recommendation
        out += [schedule_words(r, cells)
                for r, cells in zip(rec.decision.batch_schedule, schedule_rows(rec), strict=True)]
    return out


def schedule_words(r: BatchRange, cells: list[str]) -> str:
    """One schedule row in words, under the batch plot: "batch 1–64: 2 draft tokens, 1.25x → 1.02x"
    (``cells``: the row as :func:`schedule_rows` writes it, its speedup with its note's number)."""
    k = r.num_speculative_tokens
    tokens = "speculation off" if not k else plural(k, "draft token") + (
        f" (off above T = {r.disable_above_temperature:g})" if r.disable_above_temperature is not None else "")
    return f"batch {cells[0]}: {tokens}, {cells[2]}"


def _code(text: str) -> str:
    """``text`` escaped, its `backticked` spans (commands, plugin and field names) as <code>."""
    parts = _e(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def _glossary(rec: Recommendation, result: Result) -> str:
    terms = glossary(rec, tau=bool(result.measured))
    return "<dl>" + "".join(f"<dt><b>{_e(t)}</b></dt><dd>{_code(m)}</dd>" for t, m in terms) + "</dl>"


def _named(result: Result, labels: dict[str, str]) -> Result:
    """The result's plotted series with strategies in the plan's words (the Result keeps plugin names)."""
    return dataclasses.replace(
        result, gain_n=tuple(dataclasses.replace(s, label=relabel(s.label, labels)) for s in result.gain_n),
        gain_batch=tuple(dataclasses.replace(s, label=relabel(s.label, labels)) for s in result.gain_batch),
        alpha=tuple(dataclasses.replace(p, strategy=label(p.strategy, labels)) for p in result.alpha),
        measured=tuple(dataclasses.replace(c, strategy=label(c.strategy, labels)) for c in result.measured))


def html_page(result: Result, title_text: str | None = None) -> str:
    """The whole page as one string (UTF-8 HTML5, no external references); its title is the
    profile's name, its description under it (``title_text`` replaces the name)."""
    labels = strategy_labels()
    result = _named(result, labels)
    rec = result.recommendation
    d = rec.decision
    alpha_uri = plots.alpha_by_task(list(result.alpha))
    n_uri = plots.gain_vs_n(list(result.gain_n), d.num_speculative_tokens if result.deployment else None)
    b_uri = plots.gain_vs_batch(list(result.gain_batch), _switches(rec))
    m_uri = plots.measured_vs_predicted(list(result.measured))
    cross = "".join(f"<li>{_e(w)}</li>" for w in _gain_words(result))
    on = rec.evidence.measured_on
    label = f'<p class="muted">Resting partly on measurements of {_e(on)}, not of the deployed model.</p>' if on else ""
    notes = "".join(f"<li>{_e(n)}</li>" for n in result.notes)
    off = d.strategy == "none"
    body = {
        "inputs": ("Inputs", _inputs(rec)),
        "decision": ("Decision", _decision(rec, labels)),
        "rollout": ("What would change it" if off else "Rollout", _rollout(rec, labels)),
        "per-task": ("Per task type", _per_task(rec, labels)),
        "alpha": ("α per task type", label + _img(alpha_uri, "plot-alpha", "alpha per task type with intervals")),
        "gain": ("Predicted gain", label + _img(n_uri, "plot-gain-n", "predicted speedup against N")
                 + _img(b_uri, "plot-gain-batch", "predicted speedup against batch size, as deployed")
                 + (f"<ul class=\"muted\">{cross}</ul>" if cross else "")),
        "schedule": ("Batch schedule", _schedule(rec)),
        "measured": ("Measured against predicted", _measured(result, m_uri)),
        "alternatives": ("Alternatives", _alternatives(rec, labels)),
        "engine-configs": ("Engine configs", _engines(rec)),
        "evidence": ("Evidence", _evidence(rec) + (f"<ul class=\"muted\">{notes}</ul>" if notes else "")),
        "glossary": ("Glossary", _glossary(rec, result)),
    }
    sections = "".join(f'<section id="{sid}"><h2>{_e(body[sid][0])}</h2>{body[sid][1]}</section>' for sid in SECTIONS)
    name, about = title(rec)
    name = title_text or name
    about_html = f"<p>{_e(about)}</p>" if about else ""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{_e(name)}</title><style>{CSS}</style></head><body><main>"
            f"<h1>{_e(name)}</h1>{about_html}<p class=\"muted\">engine {_e(rec.engine)} · from "
            f"{_e(rec.inputs.file if rec.inputs and rec.inputs.file else rec.profile)}"
            " · generated by specpick report</p>"
            f"{sections}</main><script>{JS}</script></body></html>\n")

"""Human-readable CLI output that fits the terminal (80 columns when not a terminal) by wrapping.

    >>> print(rows([("draft tokens", "7 (searched over 1..16)")], width=40))
      draft tokens  7 (searched over 1..16)
    >>> display_name("vanilla", needs_draft_model=True)
    'draft model (vanilla)'
"""

from __future__ import annotations

import shutil
import textwrap
from typing import Any

# What one draft step costs, by the plugin's declared draft_cost, in a practitioner's words.
DRAFT_COST_WORDS = {
    "draft_model": "one forward of the separate draft model per drafted token",
    "target_layer": "one target-sized decoder layer per drafted token (an EAGLE head, an MTP module)",
    "heads": "small heads on the target's last hidden state (Medusa-style), no extra forward",
    "cpu_lookup": "a lookup on the host in text already seen (the request, or also earlier responses), no forward",
    "in_forward": "nothing apart: the guesses ride in the target's own forward",
}
# What bounds a forward (policies.loadcurve regimes), in words.
REGIME_WORDS = {"memory": "memory-bound", "knee": "at the GEMM knee, between memory- and compute-bound",
                "compute": "compute-bound", "kv": "bound by KV-cache reads",
                "overhead": "bound by fixed per-step costs",
                "eager": "past the largest CUDA graph (eager launches)"}


def width() -> int:
    """The terminal's width (80 when output is not a terminal), kept between 60 and 100 columns."""
    return max(60, min(shutil.get_terminal_size((80, 24)).columns, 100))


def display_name(name: str, needs_draft_model: bool) -> str:
    """A strategy as practitioners call it: one that drafts with a separate model reads "draft model"
    (the registered name, e.g. ``vanilla``, stays in configs and follows in brackets)."""
    return f"draft model ({name})" if needs_draft_model else name


def paragraph(text: str, width: int, indent: str = "") -> str:
    """``text`` wrapped to ``width``, continuation lines indented by ``indent`` plus two spaces."""
    return textwrap.fill(text, width, initial_indent=indent, subsequent_indent=indent + "  ",
                         break_on_hyphens=False)


def rows(pairs: list[tuple[str, str]], width: int, indent: str = "  ") -> str:
    """Label / value rows, values wrapped under their own column (labels longer than 24 columns
    put their value on the next line)."""
    label_w = min(max((len(k) for k, _ in pairs), default=0), 24)
    out: list[str] = []
    for key, value in pairs:
        lead = f"{indent}{key:<{label_w}}  "
        if len(key) > label_w:
            out.append(f"{indent}{key}")
            lead = " " * len(lead)
        body = textwrap.wrap(value, max(width - len(lead), 20), break_on_hyphens=False) or [""]
        out.append(lead + body[0])
        out += [" " * len(lead) + line for line in body[1:]]
    return "\n".join(out)


# --------------------------------------------------------------------------- estimate

def estimate_text(r: dict[str, Any], name: str, *, verbose: bool = False, cols: int | None = None) -> str:
    """``specpick estimate``'s answer: the speedup, its range and why first, then the numbers."""
    w = cols or width()
    rng, bd = r["speedup_range"], r["breakdown"]
    n, c, v = r["num_draft_tokens"], r["cost_ratio"], r["verify_ratio"]
    step = n * c + v
    head = (f"{name}: {r['speedup']:.2f}x plain decoding (range {rng['low']:.2f}x-{rng['high']:.2f}x) on "
            f"{r['num_devices']}x {r['hardware']}, {r['engine']}, batch {r['batch_size']}, alpha {r['alpha']:.2f}")
    why = (f"why: a step drafts {n} token{'s' if n != 1 else ''} and emits {r['expected_tokens_per_verify']:.2f} "
           f"on average (bonus included) for the time of {step:.2f} plain steps (draft {n} x {c:.3f} + verify "
           f"{v:.2f}), {REGIME_WORDS.get(r['regime'], r['regime'])}; it pays while alpha >= "
           f"{r['break_even_alpha']:.2f}.")
    tree = r.get("tree")
    shape = f"a tree of {n} nodes, top-k {tree['topk']}, depth {tree['depth']}" if tree else f"a chain of {n}"
    searched = next((a for a in r["assumptions"] if a.startswith("num_draft_tokens searched")), None)
    ms = 1e3
    details = [
        ("drafted per step", shape + (f" ({searched.removeprefix('num_draft_tokens ')})" if searched else "")),
        ("tokens per step", f"{r['expected_tokens_per_verify']:.3f} (E[L]: accepted drafts + the bonus token)"),
        ("step time", f"{(bd['draft_seconds'] + bd['verify_seconds']) * ms:.3g} ms speculative (draft "
                      f"{bd['draft_seconds'] * ms:.3g} + verify {bd['verify_seconds'] * ms:.3g}) vs "
                      f"{bd['plain_seconds'] * ms:.3g} ms plain"),
        ("draft cost c", f"{c:.4g} plain steps per drafted token"),
        ("verify cost", f"{v:.3g} plain steps for {r['num_verify_tokens']} tokens "
                        f"({REGIME_WORDS.get(r['regime'], r['regime'])}; plain decode "
                        f"{REGIME_WORDS.get(r['plain_regime'], r['plain_regime'])})"),
        ("break-even alpha", f"{r['break_even_alpha']:.3f} (below it, speculation is slower than plain)"),
        ("target", f"{r['target_shape']} shape, {r['dtype']}, {r['context_len']} tokens of context"),
        *([("draft model", r["draft_shape"] + " shape")] if r.get("draft_shape") else []),
        ("range", rng["what"]),
        ("cost model", r["engine_status"] + ("" if verbose else "; --verbose lists the constants")),
        *([("calibration", r["calibration"])] if r.get("calibration") else []),
        *[("assumption", a) for a in r["assumptions"] if a != searched],
    ]
    parts = [paragraph(head, w), paragraph(why, w, "  "), "", rows(details, w)]
    if verbose:
        constants = [(k, f"{e['value']:.4g} ({e['from']})") for k, e in r["curve_constants"].items()]
        parts += ["", "load-curve constants:", rows(constants, w)]
    return "\n".join(parts) + "\n"


# --------------------------------------------------------------------------- strategies

def strategies_text(plugins: list[dict[str, Any]], cols: int | None = None) -> str:
    """Every registered strategy as a short block: what it is, what it needs, where it runs."""
    w = cols or width()
    blocks = [f"{len(plugins)} registered strategies (--format json for everything each declares)"]
    for p in plugins:
        c = p["capabilities"]
        needs = [what for flag, what in (("needs_draft_model", "a separate draft model with the target's tokenizer"),
                                         ("needs_hidden_states", "the target's hidden states"),
                                         ("trainable_heads", "heads trained on the target")) if c[flag]]
        if c.get("artifact"):
            needs.append(f"in the profile: drafters.{c['artifact']}")
        runs = [f"{engine} ({algo})" for engine, algo in c["engines"].items() if algo]
        not_on = [engine for engine, algo in c["engines"].items() if not algo]
        pairs = [
            ("drafts", ("token trees" if c["tree"] else "chains")
             + ("; deterministic (accepts d with probability q(d))" if c["deterministic_draft"] else "")),
            ("draft step", DRAFT_COST_WORDS.get(c["draft_cost"], c["draft_cost"])),
            ("needs", "; ".join(needs) or "nothing beyond the target"),
            ("engines", ", ".join(runs) + (f"; not on {', '.join(not_on)}" if not_on else "") if runs else "none"),
        ]
        title = display_name(p["name"], c["needs_draft_model"])
        blocks.append("\n".join([paragraph(f"{title}: {p['summary']}", w), rows(pairs, w)]))
    return "\n\n".join(blocks) + "\n"

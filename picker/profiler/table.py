"""The profile summary as a rich table on stdout (what `specpick profile` prints at the end).

    >>> print_summary({"cells": [], "baselines": [], "totals": {"target_forwards": 0, "seconds": 0.0}})
    no cells measured
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.table import Table


def _f(x: float | None, fmt: str = ".3f") -> str:
    return "-" if x is None else format(x, fmt)


def print_summary(summary: Mapping[str, Any], console: Console | None = None) -> None:
    """One row per cell: α with its interval, τ, c, speed and the forwards it cost."""
    # A log file is not a terminal: give the table room instead of wrapping every cell.
    console = console or Console(width=None if Console().is_terminal else 200)
    cells = summary.get("cells", [])
    if not cells:
        if not summary.get("open_loop"):  # an open-loop run has its own table
            console.print("no cells measured")
        return
    table = Table(title="acceptance by task type x strategy x temperature", title_justify="left")
    left = ("task", "strategy", "per position", "stopped")
    loaded = any(c.get("concurrency", 1) != 1 for c in cells)  # a column only when some level is not 1
    timed = any(c.get("itl_ms_p99") is not None for c in cells)
    latency = ("gain [95% CI]", "ITL p50", "ITL p99", "TPOT", "xITL p99", "xTPOT") if timed else ()
    for name in ("task", "strategy", "T", *(("C",) if loaded else ()), "N", "alpha", "95% CI", "a_iid",
                 "per position", "tau", "c", "tok/s", "x plain", *latency, "n", "fwd", "stopped"):
        table.add_column(name, justify="left" if name in left else "right", no_wrap=True)
    for c in cells:
        lo, hi = c["alpha_ci"]
        per = " ".join(_f(p, ".2f") for p in (c.get("per_position") or [])[:4])
        level = (str(c.get("concurrency", 1)),) if loaded else ()
        table.add_row(c["task"], c["strategy"], f"{c['temperature']:g}", *level,
                      c["tree"] or str(c["num_draft_tokens"]),
                      f"{c['alpha']:.3f}", f"{lo:.2f}-{hi:.2f}", _f(c.get("alpha_iid")), per,
                      _f(c.get("tau"), ".2f"), _f(c.get("cost_ratio"), ".2f"), _f(c.get("tokens_per_second"), ".0f"),
                      _f(c.get("speedup_vs_plain"), ".2f"), *(_latency(c) if timed else ()),
                      str(c["samples"]), str(c["target_forwards"]),
                      c.get("stopped") or "")
    console.print(table)
    if timed:
        console.print("gain: A/B over rounds (interval: bootstrap over rounds); ITL / TPOT in ms (ITL: gap between "
                      "streamed chunks); x: over plain decoding's in the same group")
    totals = summary.get("totals", {})
    formats = sorted({str(c["prompt_format"]) for c in cells if c.get("prompt_format")})
    rendered = f"   prompts: {', '.join(formats)}" if formats else ""
    console.print(f"target forwards: {totals.get('target_forwards', 0)}   seconds: {totals.get('seconds', 0.0)}"
                  f"{rendered}")


def _latency(c: Mapping[str, Any]) -> tuple[str, ...]:
    """The latency columns of one cell: the A/B gain, ITL p50 / p99, mean TPOT and ratios to plain."""
    ci = c.get("gain_ci")
    gain = _f(c.get("gain_vs_plain"), ".2f") + (f" [{ci[0]:.2f}-{ci[1]:.2f}]" if ci else "")
    return (gain, _f(c.get("itl_ms_p50"), ".1f"), _f(c.get("itl_ms_p99"), ".1f"), _f(c.get("tpot_ms_mean"), ".1f"),
            _f(c.get("itl_ms_p99_vs_plain"), ".2f"), _f(c.get("tpot_ms_mean_vs_plain"), ".2f"))


def print_open_loop_table(summary: Mapping[str, Any], console: Console | None = None) -> None:
    """Open-loop cells: offered rate, achieved requests/s, latency figures and goodput, plain beside."""
    rows = [*summary.get("open_loop_baselines", []), *summary.get("open_loop", [])]
    if not rows:
        return
    console = console or Console(width=None if Console().is_terminal else 200)
    table = Table(title="open loop: latency under an offered request rate", title_justify="left")
    for name in ("task", "strategy", "T", "N", "rate", "cap", "req/s", "tok/s", "gain [95% CI]", "TTFT p99",
                 "ITL p50", "ITL p99", "TPOT", "SLO met", "goodput"):
        table.add_column(name, justify="left" if name in ("task", "strategy") else "right", no_wrap=True)
    def order(c: dict[str, Any]) -> tuple[Any, ...]:
        return c["task"], c["temperature"], c["request_rate_per_second"], c["strategy"] != "plain"

    for c in sorted(rows, key=order):
        ci = c.get("gain_ci")
        gain = _f(c.get("gain_vs_plain"), ".2f") + (f" [{ci[0]:.2f}-{ci[1]:.2f}]" if ci else "")
        table.add_row(c["task"], c["strategy"], f"{c['temperature']:g}", str(c.get("num_draft_tokens", 0)),
                      f"{c['request_rate_per_second']:g}", str(c.get("concurrency") or "-"),
                      _f(c.get("requests_per_second"), ".2f"),
                      _f(c.get("throughput_tokens_per_second"), ".0f"), gain if c["strategy"] != "plain" else "",
                      _f(c.get("ttft_ms_p99"), ".1f"), _f(c.get("itl_ms_p50"), ".1f"), _f(c.get("itl_ms_p99"), ".1f"),
                      _f(c.get("tpot_ms_mean"), ".1f"), _f(c.get("slo_attainment"), ".2f"),
                      _f(c.get("goodput_requests_per_second"), ".2f"))
    console.print(table)

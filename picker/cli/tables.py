"""rich tables for the human-readable CLI output."""

from __future__ import annotations

from typing import Any


def print_estimate(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"estimate: {result['strategy']}", show_header=False)
    for key, value in result.items():
        if key == "curve_constants":  # one row per constant: value and where it comes from
            for name, entry in value.items():
                table.add_row(f"  {name}", f"{_fmt(entry['value'])}  ({entry['from']})")
            continue
        if isinstance(value, dict):
            value = ", ".join(f"{k}={_fmt(v)}" for k, v in value.items())
        elif isinstance(value, list):
            value = "; ".join(str(v) for v in value)
        table.add_row(key, _fmt(value))
    Console().print(table)


def print_strategies(plugins: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="registered strategies")
    for col in ("name", "tree", "draft model", "hidden states", "heads", "deterministic", "draft cost", "engines"):
        table.add_column(col)
    for p in plugins:
        c = p["capabilities"]
        engines = ", ".join(f"{k}={v}" for k, v in c["engines"].items() if v)
        table.add_row(p["name"], *(str(c[k]) for k in ("tree", "needs_draft_model", "needs_hidden_states",
                                                       "trainable_heads", "deterministic_draft", "draft_cost")), engines)
    Console().print(table)


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)

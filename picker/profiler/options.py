"""Parsing and resolution behind `specpick profile` (and `specpick sweep`), free of the CLI app.

Kept apart from ``picker.cli.profile`` so other commands can reuse them without importing one
command module from another (which made a circular import through ``picker.cli.main``).

    >>> parse_draft_lengths("1-3,8"), parse_temperatures("0,0.7")
    ([1, 2, 3, 8], [0.0, 0.7])
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from picker.errors import UserError

if TYPE_CHECKING:  # imported lazily: every `specpick` command loads this module at start-up
    from picker.tasks import Prompt


def parse_list(text: str, field: str) -> list[str]:
    """``a,b,c`` → ``['a', 'b', 'c']`` (blanks dropped, order kept, duplicates removed)."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise UserError("empty list", field=field)
    return list(dict.fromkeys(items))


def _numbers(text: str, field: str, kind: type, lo: float, hi: float, span: str) -> list:
    """A comma list of ``kind`` values, each in [lo, hi] (order kept, duplicates removed)."""
    out = []
    for item in parse_list(text, field):
        try:
            value = kind(item)
        except ValueError:
            raise UserError(f"not {'a number' if kind is float else 'an integer'}: {item!r}", field=field) from None
        if not lo <= value <= hi:
            raise UserError(f"{value:g} outside {span}", field=field)
        out.append(value)
    return out


def parse_temperatures(text: str) -> list[float]:
    """``0,0.7,1`` → floats in [0, 2]."""
    return _numbers(text, "--temperatures", float, 0.0, 2.0, "[0, 2]")


def parse_concurrency(text: str | None, default: int) -> list[int]:
    """``1,2,4,8`` (or one value) → sorted distinct requests-in-flight levels in 1..256.

        >>> parse_concurrency("4,1,2", default=1), parse_concurrency(None, default=4)
        ([1, 2, 4], [4])
    """
    if text is None:
        return [default]
    return sorted(set(_numbers(text, "--concurrency", int, 1, 256, "1..256")))


def unfilled_levels(levels: list[int], prompts: dict[str, list[Any]]) -> str | None:
    """A note when a concurrency level is above some task's prompt count: a wave holds C requests
    in flight only with at least C prompts to serve, so such a level measures a smaller batch than
    its label says (None when every level is filled).

        >>> print(unfilled_levels([1, 4, 16], {"chat": [0] * 8, "code": [0] * 20}))  # doctest: +NORMALIZE_WHITESPACE
        concurrency 16 is above the 8 prompts of chat: its waves there hold at most 8 requests in flight
        (raise --limit-per-task)
    """
    short = {t: len(v) for t, v in prompts.items() if levels and len(v) < levels[-1]}
    if not short:
        return None
    task = min(short, key=short.__getitem__)
    high = [c for c in levels if c > short[task]]
    return (f"concurrency {', '.join(map(str, high))} is above the {short[task]} prompts of {task}: its waves there "
            f"hold at most {short[task]} requests in flight (raise --limit-per-task)")


def parse_draft_lengths(text: str) -> list[int]:
    """``1-8`` or ``2,4,8`` or ``4`` → sorted draft lengths in 1..64."""
    out: set[int] = set()
    for item in parse_list(text, "--num-draft-tokens"):
        lo, sep, hi = item.partition("-")
        try:
            first, last = int(lo), int(hi) if sep else int(lo)
        except ValueError:
            raise UserError(f"expected N, A-B or a comma list, got {item!r}", field="--num-draft-tokens") from None
        if not 1 <= first <= last <= 64:
            raise UserError(f"{item!r}: need 1 <= A <= B <= 64", field="--num-draft-tokens")
        out.update(range(first, last + 1))
    return sorted(out)


def parse_artifacts(items: list[str]) -> dict[str, Path]:
    """``--artifact vanilla=PATH`` (repeatable) → {strategy: path}."""
    out: dict[str, Path] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise UserError(f"expected STRATEGY=PATH, got {item!r}", field="--artifact")
        if not Path(path).exists():
            raise UserError("path does not exist", file=path, field="--artifact")
        out[name.strip()] = Path(path)
    return out


def workload_defaults(path: Path | None) -> tuple[list[str] | None, list[float] | None]:
    """Task types and temperatures a workload profile serves (its task mix and temperature points)."""
    if path is None:
        return None, None
    from picker.inputs.workload import load_profile

    prof = load_profile(path)
    tasks = [t for t, w in prof.traffic.task_weights().items() if w > 0]
    return tasks, sorted({p.value for p in prof.traffic.temperature})


def prompts_by_task(prompts: str, tasks: list[str] | None, limit: int, category_map: str,
                    seed: int) -> dict[str, list[Prompt]]:
    """Prompts by task type: the built-in sets, or a JSONL file (Spec-Bench format included)."""
    from picker.tasks import builtin_prompts, builtin_tasks
    from picker.tasks.files import load_prompt_file, parse_category_map

    mapping = parse_category_map(category_map)  # checked even when unused: a typo is still a typo
    if prompts == "builtin":
        chosen = tasks or list(builtin_tasks())
        missing = [t for t in chosen if t not in builtin_tasks()]
        if missing:
            raise UserError(f"no built-in prompts for {', '.join(missing)}; built-in: {', '.join(builtin_tasks())}",
                            field="--tasks")
        loaded = builtin_prompts(chosen, limit, seed)
    else:
        loaded = load_prompt_file(prompts, mapping)
        chosen = tasks or list(dict.fromkeys(p.task for p in loaded))
    by_task: dict[str, list[Prompt]] = {t: [] for t in chosen}
    for p in loaded:
        if p.task in by_task:
            by_task[p.task].append(p)
    empty = [t for t, ps in by_task.items() if not ps]
    if empty:
        raise UserError(f"no prompts of task type {', '.join(empty)}", file=None if prompts == "builtin" else prompts,
                        field="--tasks")
    return by_task


def resolve_model(model: str, artifacts: dict[str, Path]) -> tuple[Path, dict[str, Path]]:
    """``zoo`` builds (or reuses) the zoo and fills in its draft and heads; else a local folder.

    Artifacts here are keyed by strategy name (``--artifact NAME=PATH``): a zoo artifact of the
    kind a strategy declares fills in for every strategy the user named none for.
    """
    from picker.zoo.resolve import resolve_target, zoo_size

    if zoo_size(model) is None:
        return Path(model), artifacts
    from picker.engine.plugins import load_strategies

    target, by_kind, _ = resolve_target(model)
    found = dict(artifacts)
    for name, plugin in load_strategies().items():
        kind = plugin.capabilities.artifact
        where = by_kind.get(kind) if kind is not None else None
        if where is not None and where.exists() and name not in found:
            found[name] = where
    return Path(target), found


def parse_rates(text: str | None) -> list[float] | None:
    """``--request-rate 0.5,2`` -> sorted distinct offered rates (requests per second) in (0, 10000].

        >>> parse_rates("2,0.5"), parse_rates(None)
        ([0.5, 2.0], None)
    """
    if text is None:
        return None
    rates = _numbers(text, "--request-rate", float, 0.0, 10000.0, "(0, 10000] requests per second")
    if any(r <= 0 for r in rates):
        raise UserError("0 outside (0, 10000] requests per second", field="--request-rate")
    return sorted(set(rates))


def load_problems(rates: list[float] | None, burstiness: float, max_in_flight: int, order: str,
                  gain_ci_target: float, slo: dict[str, float | None]) -> list[UserError]:
    """Every problem with the load, A/B and SLO flags at once (the caller reports them all)."""
    from picker.profiler.ab import ORDERS

    out = []
    if not 0 < burstiness <= 100:
        out.append(UserError(f"{burstiness:g} outside (0, 100] (1: Poisson arrivals)", field="--burstiness"))
    if burstiness != 1.0 and rates is None:
        out.append(UserError("shapes open-loop arrivals: give --request-rate too", field="--burstiness"))
    if not 0 <= max_in_flight <= 1024:
        out.append(UserError(f"{max_in_flight} outside 0..1024 (0: no cap)", field="--max-in-flight"))
    if max_in_flight and rates is None:
        out.append(UserError("caps open-loop load: give --request-rate too (closed loop: --concurrency)",
                             field="--max-in-flight"))
    if order not in ORDERS:
        out.append(UserError(f"{order!r}: expected one of {', '.join(ORDERS)}", field="--order"))
    if not 0 <= gain_ci_target <= 1:
        out.append(UserError(f"{gain_ci_target:g} outside [0, 1] (a share of the gain)", field="--gain-ci-target"))
    for name, value in slo.items():
        if value is not None and not 0 < value <= 3.6e6:
            flag = f"--slo-{name.replace('_', '-')}"
            out.append(UserError(f"{value:g} outside (0, 3600000] milliseconds", field=flag))
    return out

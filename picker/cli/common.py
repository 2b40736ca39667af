"""What every `specpick` command shares: bad input as one line and exit 2, atomic output, formats.

    >>> Fmt("json").value
    'json'
    >>> check_outputs(out=Path("plan.md"), fmt=Fmt.md)         # fine: returns None
    >>> check_outputs(out=Path("plan.json"), fmt=Fmt.md)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    picker.errors.UserError: plan.json: --out: a .json file for --format md; name it .md or .markdown, or pass ...

Every command that writes a file calls :func:`check_outputs` first, so a bad ``--out`` or
``--plot`` is refused (one line each, exit 2) before any work, and the plan is never lost to it.

Command modules (``picker.cli.recommend``, ``estimate``, ``catalog``, ``generate``, ``profile``,
``sweep``) import from here and never from ``picker.cli.main``, which only registers them.
"""

from __future__ import annotations

import functools
import os
import sys
import tempfile
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

import typer
from typer.core import TyperGroup

from picker.errors import UserError, UserErrors

F = TypeVar("F", bound=Callable[..., Any])


def user_errors(fn: F) -> F:
    """Turn a UserError into one line on stderr and exit code 2 (no traceback)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except UserError as exc:
            for line in exc.lines():  # several problems: one line each
                typer.echo(f"error: {line}", err=True)
            raise typer.Exit(code=UserError.exit_code) from None

    return wrapper  # type: ignore[return-value]


# click's error class, whichever click typer runs on (its own copy since typer 0.22, click before)
_CLICK_ERROR = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


class OneLineUsageErrors(TyperGroup):
    """The app's group: click's own usage errors (an unknown option, a malformed or missing value, an
    unknown command) as one ``error:`` line and their exit code (2), like every other bad input,
    instead of typer's usage-and-box block. ``--help`` and the help shown for no arguments are
    untouched (click raises them as an exit, or as the usage error that typer prints as help)."""

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any) -> Any:
        with _OneLine():
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: Any) -> Any:  # a subcommand's own options are parsed in here
        with _OneLine():
            return super().invoke(ctx)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """Each command with its docstring's whole first paragraph, wrapped (click would cut it to
        the width left beside the names, ending in "...")."""
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, " ".join((cmd.short_help or cmd.help or "").split("\n\n")[0].split())))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


class _OneLine:
    """Print a click error as ``error: <command>: <message> (see <command> --help)``, exit with its code."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> bool:
        if not isinstance(exc, _CLICK_ERROR) or type(exc).__name__ == "NoArgsIsHelpError":
            return False
        ctx = getattr(exc, "ctx", None)
        where = f"{ctx.command_path}: " if ctx is not None else ""
        hint = f" (see {ctx.command_path} --help)" if ctx is not None else ""
        typer.echo(f"error: {where}{' '.join(exc.format_message().split())}{hint}", err=True)
        raise typer.Exit(getattr(exc, "exit_code", 2)) from None


def write_output(text: str, out: Path | None) -> None:
    """Print, or write atomically: a failed run never leaves a half-written file."""
    if out is None:
        sys.stdout.write(text)
        return
    for problem in _path_problems(out, "--out"):
        raise problem
    target = out.resolve()
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # a file to share: the usual mode, not mkstemp's 0600
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class Fmt(str, Enum):
    md = "md"
    json = "json"
    yaml = "yaml"


# What each format's file is called, and the formats a plot can be saved in (matplotlib infers it).
# (.txt belongs to no format: any text may go there.)
SUFFIXES: dict[str, tuple[str, ...]] = {"md": (".md", ".markdown"), "json": (".json",),
                                        "yaml": (".yaml", ".yml"), "html": (".html", ".htm")}
PLOT_SUFFIXES = (".png", ".svg", ".pdf")


def check_outputs(*, out: Path | None = None, fmt: Fmt | str | None = None, plot: Path | None = None) -> None:
    """Refuse, before any work, an ``--out`` or ``--plot`` that cannot be written as asked.

    ``fmt`` is what ``--out`` will hold (a :class:`Fmt`, or ``"html"``): a file named for another
    format (``.json`` for markdown, ``.pdf`` for the HTML report) is refused, one with a suffix of no
    known format is fine except for HTML, which must be ``.html``. ``--plot`` must be a .png, .svg
    or .pdf path. Every problem is one line (all at once), exit 2.
    """
    problems: list[UserError] = []
    if out is not None:
        problems += _path_problems(out, "--out")
        wrong = _format_problem(out, fmt.value if isinstance(fmt, Fmt) else fmt)
        problems += [wrong] if wrong else []
    if plot is not None:
        problems += _path_problems(plot, "--plot")
        if plot.suffix.lower() not in PLOT_SUFFIXES:
            got = f"a {plot.suffix} file" if plot.suffix else "a file with no suffix"
            problems.append(UserError(f"cannot draw {got}; name it "
                                      f"{', '.join(PLOT_SUFFIXES[:-1])} or {PLOT_SUFFIXES[-1]}",
                                      file=str(plot), field="--plot"))
    if len(problems) == 1:
        raise problems[0]
    if problems:
        raise UserErrors(problems)


def _format_problem(out: Path, want: str | None) -> UserError | None:
    """A file named for another format than the one it will hold (None: fine)."""
    suffix = out.suffix.lower()
    owner = next((f for f, names in SUFFIXES.items() if suffix in names), None)
    got = f"a {suffix} file" if suffix else "a file with no suffix"
    if want == "html":
        if owner == "html":
            return None
        return UserError(f"{got}: the report is an HTML page; name it .html", file=str(out), field="--out")
    if want is None or owner is None or owner == want:
        return None
    swap = f", or pass --format {owner}" if owner in Fmt.__members__ else ""
    return UserError(f"{got} for --format {want}; name it {' or '.join(SUFFIXES[want])}{swap}",
                     file=str(out), field="--out")


def _path_problems(path: Path, option: str) -> list[UserError]:
    """What stops a file being written at ``path``: it is a directory, or its folder is missing or
    read-only (the one line ``write_output`` would otherwise give after the work)."""
    target = path.resolve()
    if target.is_dir():
        return [UserError("is a directory; give a file path", file=str(path), field=option)]
    if not target.parent.is_dir():
        return [UserError("parent directory does not exist", file=str(path), field=option)]
    if not os.access(target.parent, os.W_OK | os.X_OK):
        return [UserError("parent directory is not writable", file=str(path), field=option)]
    return []

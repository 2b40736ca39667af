"""What every `specpick` command shares: bad input as one line and exit 2, atomic output, formats.

    >>> Fmt("json").value
    'json'

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

from picker.errors import UserError

F = TypeVar("F", bound=Callable[..., Any])


def user_errors(fn: F) -> F:
    """Turn a UserError into one line on stderr and exit code 2 (no traceback)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except UserError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(code=UserError.exit_code) from None

    return wrapper  # type: ignore[return-value]


def write_output(text: str, out: Path | None) -> None:
    """Print, or write atomically: a failed run never leaves a half-written file."""
    if out is None:
        sys.stdout.write(text)
        return
    target = out.resolve()
    if target.is_dir():
        raise UserError("is a directory; give a file path", file=str(out), field="--out")
    if not target.parent.is_dir():
        raise UserError("parent directory does not exist", file=str(out), field="--out")
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

"""User-facing errors: one clear line, exit code 2, no traceback.

Everything that reads user input (YAML profiles, measurement files, CLI values) raises
:class:`UserError`; the CLI turns it into ``error: <file>: <field>: <message>`` on stderr.

    >>> str(UserError("bad value", file="p.yaml", field="traffic.task_mix"))
    'p.yaml: traffic.task_mix: bad value'
"""

from __future__ import annotations


class UserError(Exception):
    """Bad input from the user: names the file and field, never shows a traceback."""

    exit_code = 2

    def __init__(self, message: str, *, file: str | None = None, field: str | None = None) -> None:
        self.message = message
        self.file = file
        self.field = field
        super().__init__(str(self))

    def __str__(self) -> str:
        parts = [p for p in (self.file, self.field) if p]
        return ": ".join([*parts, self.message])

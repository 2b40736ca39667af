"""User-facing errors: one clear line, exit code 2, no traceback.

Everything that reads user input (YAML profiles, measurement files, CLI values) raises
:class:`UserError`; the CLI turns it into ``error: <file>: <field>: <message>`` on stderr.

    >>> str(UserError("bad value", file="p.yaml", field="traffic.task_mix"))
    'p.yaml: traffic.task_mix: bad value'

Input with several problems raises :class:`UserErrors`, one line per problem, so a user fixes them
all in one pass (the CLI prints each as its own ``error:`` line).
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

    def lines(self) -> list[str]:
        """One line per problem (here, one)."""
        return [str(self)]


class UserErrors(UserError):
    """Several problems in one input, each a :class:`UserError`; ``str`` is one line per problem.

    >>> e = UserErrors([UserError("a", field="x"), UserError("b", field="y")])
    >>> str(e).splitlines()
    ['x: a', 'y: b']
    """

    def __init__(self, errors: list[UserError]) -> None:
        if not errors:
            raise ValueError("UserErrors needs at least one error")
        self.errors = tuple(errors)
        first = self.errors[0]
        super().__init__(first.message, file=first.file, field=first.field)

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def lines(self) -> list[str]:
        return [line for e in self.errors for line in e.lines()]

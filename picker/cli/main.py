"""The `specpick` command: thin typed adapters over the library, registered on one app.

    $ specpick recommend profiles/chat-70b-h100.yaml --format json
    $ specpick estimate --strategy eagle3 --alpha 0.8 --model-params 8e9 --hardware h100-sxm

Every bad input ends as one ``error: <file>: <field>: <message>`` line on stderr and exit code 2
(``picker.cli.common.user_errors``); so do click's own usage errors, an unknown or malformed flag
(``picker.cli.common.OneLineUsageErrors``). Each command lives in its own module, which never imports this
one; this module only registers them, in the order ``specpick --help`` lists them.
"""

from __future__ import annotations

import typer

from picker.cli import calibrate, catalog, estimate, generate, init, models, profile, recommend, report, sweep
from picker.cli.common import OneLineUsageErrors
from picker.zoo import cli as zoo_cli

app = typer.Typer(cls=OneLineUsageErrors, no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="Measure speculative decoding, pick a strategy, emit engine configs.")

for command in (init.init, init.check, recommend.recommend, estimate.estimate, catalog.schema, catalog.strategies,
                generate.generate, profile.profile, sweep.sweep, calibrate.calibrate, report.report):
    app.command()(command)
app.add_typer(zoo_cli.app, name="zoo")
app.add_typer(models.app, name="models")


def main() -> None:  # pragma: no cover - console entry point
    app()

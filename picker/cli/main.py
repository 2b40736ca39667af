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

from picker.cli import (
    calibrate,
    catalog,
    check_load,
    estimate,
    generate,
    init,
    models,
    policy,
    profile,
    recommend,
    report,
    sweep,
)
from picker.cli.common import OneLineUsageErrors
from picker.zoo import cli as zoo_cli

# rich_markup_mode=None: click's plain help, which wraps option help under a long option name instead of
# squeezing it into a column of ~17 characters beside boolean pairs at 80 columns (rich's option table).
app = typer.Typer(cls=OneLineUsageErrors, no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  rich_markup_mode=None,
                  help="Measure speculative decoding, pick a strategy, emit engine configs.")

for command in (init.init, init.check, recommend.recommend, estimate.estimate, catalog.schema, catalog.strategies,
                generate.generate, profile.profile, sweep.sweep, calibrate.calibrate, check_load.check_load,
                report.report):
    app.command()(command)
app.add_typer(zoo_cli.app, name="zoo")
app.add_typer(models.app, name="models")
app.add_typer(policy.app, name="policy")


def main() -> None:  # pragma: no cover - console entry point
    app()

"""`specpick schema` and `specpick strategies`: what a profile may say, and which strategies are loaded.

    $ specpick schema --out workload.schema.json
    $ specpick strategies --format json
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from picker.cli.common import Fmt, user_errors, write_output


@user_errors
def schema(out: Annotated[Path | None, typer.Option(help="Write here instead of stdout.")] = None) -> None:
    """Print the workload profile's JSON Schema."""
    import json

    from picker.inputs.workload import workload_json_schema

    write_output(json.dumps(workload_json_schema(), indent=2) + "\n", out)


@user_errors
def strategies(fmt: Annotated[Fmt, typer.Option("--format", help="md (a table) or json.")] = Fmt.md) -> None:
    """List registered strategy plugins and their declared capabilities."""
    import json

    from picker.engine.plugins import load_strategies

    plugins = [p.to_dict() for p in load_strategies().values()]
    if fmt is Fmt.json:
        write_output(json.dumps(plugins, indent=2) + "\n", None)
        return
    from picker.cli.tables import print_strategies

    print_strategies(plugins)

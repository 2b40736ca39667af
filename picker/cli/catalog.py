"""`specpick schema` and `specpick strategies`: what a profile may say, and which strategies are loaded.

    $ specpick schema --out workload.schema.json
    $ specpick strategies --format json
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from picker.cli.common import Fmt, check_outputs, user_errors, write_output


@user_errors
def schema(out: Annotated[Path | None, typer.Option(help="Write here instead of stdout.")] = None) -> None:
    """Print the workload profile's JSON Schema."""
    check_outputs(out=out, fmt=Fmt.json)
    import json

    from picker.inputs.workload import workload_json_schema

    write_output(json.dumps(workload_json_schema(), indent=2) + "\n", out)


@user_errors
def strategies(
    fmt: Annotated[Fmt, typer.Option("--format", help="md (wrapped to the terminal), json or yaml.")] = Fmt.md,
) -> None:
    """List registered strategy plugins and their declared capabilities."""
    from picker.engine.plugins import load_strategies

    plugins = [p.to_dict() for p in load_strategies().values()]
    if fmt is Fmt.json:
        import json

        write_output(json.dumps(plugins, indent=2) + "\n", None)
    elif fmt is Fmt.yaml:
        import yaml

        write_output(str(yaml.safe_dump(plugins, sort_keys=False, allow_unicode=True)), None)
    else:
        from picker.cli.tables import strategies_text

        write_output(strategies_text(plugins), None)

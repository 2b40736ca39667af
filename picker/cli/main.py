"""The `specpick` command: thin typed adapters over the library.

    $ specpick recommend profiles/chat-70b-h100.yaml --format json
    $ specpick estimate --strategy eagle3 --alpha 0.8 --model-params 8e9 --hardware h100-sxm

Every bad input ends as one ``error: <file>: <field>: <message>`` line on stderr and exit code 2.
"""

from __future__ import annotations

import functools
import os
import sys
import tempfile
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from picker.errors import UserError

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="Measure speculative decoding, pick a strategy, emit engine configs.")

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
        raise UserError("is a directory; give a file path", file=str(out))
    if not target.parent.is_dir():
        raise UserError("parent directory does not exist", file=str(out))
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
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


class EstimateStrategy(str, Enum):
    vanilla = "vanilla"
    medusa = "medusa"
    eagle3 = "eagle3"
    lookahead = "lookahead"
    ngram = "ngram"


class EstimateEngine(str, Enum):
    sglang = "sglang"
    vllm = "vllm"
    tensorrt_llm = "tensorrt_llm"
    llama_cpp = "llama_cpp"
    hf = "hf"


@app.command()
@user_errors
def recommend(
    profile: Annotated[Path, typer.Argument(help="Workload profile YAML (see profiles/).")],
    measurements: Annotated[Path | None, typer.Option(help="Profiler summary.json with measured acceptance.")] = None,
    fmt: Annotated[Fmt, typer.Option("--format", help="Output format.")] = Fmt.md,
    out: Annotated[Path | None, typer.Option(help="Write here instead of stdout.")] = None,
    explain: Annotated[bool, typer.Option(help="Add the top candidates per task type with ranges and evidence.")] = False,
    policy: Annotated[Path | None, typer.Option(help="Fitted policy artifact (JSON) for the learned correction.")] = None,
    plot: Annotated[Path | None, typer.Option(help="Write a PNG of predicted speedup vs N and vs batch size.")] = None,
) -> None:
    """Recommend a speculative-decoding setting for a workload, with engine configs and a rollout."""
    from picker.measurements import load_measurements
    from picker.recommend import recommend as build
    from picker.render import render
    from picker.workload import load_profile

    prof = load_profile(profile)
    meas = load_measurements(measurements) if measurements is not None else None
    if explain or policy is not None or plot is not None:
        from picker.explain import recommend_command

        write_output(recommend_command(prof, meas, measurements, policy, explain, plot, fmt.value, str(profile)), out)
        return
    write_output(render(build(prof, meas, path=str(profile)), fmt.value), out)


@app.command()
@user_errors
def estimate(
    strategy: Annotated[EstimateStrategy, typer.Option(help="Strategy to cost.")],
    model_params: Annotated[float, typer.Option(help="Target parameter count, e.g. 8e9.", min=1e6)],
    hardware: Annotated[str, typer.Option(help="Hardware catalog name, e.g. h100-sxm.")],
    alpha: Annotated[float | None, typer.Option(help="Per-token acceptance rate.", min=0.0, max=1.0)] = None,
    mean_accepted_tokens: Annotated[float | None, typer.Option(
        help="Mean tokens per verify step, bonus included (needs --num-draft-tokens).", min=1.0)] = None,
    num_draft_tokens: Annotated[int | None, typer.Option(
        help="Tokens drafted per step (tree nodes for a tree); searched when omitted.", min=1, max=256)] = None,
    tree_topk: Annotated[int | None, typer.Option(help="Branching of a draft tree (>1 makes a tree).", min=1, max=64)] = None,
    draft_params: Annotated[float | None, typer.Option(help="Draft model size for vanilla, e.g. 1e9.", min=1e5)] = None,
    engine: Annotated[EstimateEngine, typer.Option(help="Serving engine; hf = eager PyTorch.")] = EstimateEngine.sglang,
    batch_size: Annotated[int, typer.Option(min=1, max=65536)] = 1,
    context_len: Annotated[int, typer.Option(min=0, max=10_000_000)] = 1024,
    num_devices: Annotated[int, typer.Option(help="Tensor-parallel degree.", min=1, max=64)] = 1,
    fmt: Annotated[Fmt, typer.Option("--format", help="md (a table) or json.")] = Fmt.md,
) -> None:
    """Predict the speedup of one configuration with the cost model."""
    import json

    from picker.hardware import get_hardware
    from picker.plugins import load_strategies
    from policies.costmodel import estimate as run

    if (alpha is None) == (mean_accepted_tokens is None):
        raise UserError("give exactly one of --alpha and --mean-accepted-tokens", field="--alpha")
    if mean_accepted_tokens is not None and num_draft_tokens is None:
        raise UserError("--mean-accepted-tokens needs --num-draft-tokens (the N it was measured at)",
                        field="--num-draft-tokens")
    if mean_accepted_tokens is not None and num_draft_tokens is not None and mean_accepted_tokens > num_draft_tokens + 1:
        raise UserError(f"cannot exceed num_draft_tokens + 1 = {num_draft_tokens + 1}", field="--mean-accepted-tokens")
    plugins = load_strategies()
    if strategy.value not in plugins:
        raise UserError(f"not registered; registered: {', '.join(sorted(plugins))}", field="--strategy")
    caps = plugins[strategy.value].capabilities
    if tree_topk and tree_topk > 1 and not caps.tree:
        raise UserError(f"{strategy.value} drafts chains, not trees", field="--tree-topk")
    result = run(caps.draft_cost, model_params=model_params, hardware=get_hardware(hardware), alpha=alpha,
                 mean_accepted_tokens=mean_accepted_tokens, num_draft_tokens=num_draft_tokens,
                 tree_topk=tree_topk, draft_params=draft_params, engine=engine.value, batch_size=batch_size,
                 context_len=context_len, num_devices=num_devices)
    result = {"strategy": strategy.value, **result}
    if fmt is Fmt.json:
        write_output(json.dumps(result, indent=2) + "\n", None)
        return
    from picker.cli.tables import print_estimate

    print_estimate(result)


@app.command()
@user_errors
def schema(out: Annotated[Path | None, typer.Option(help="Write here instead of stdout.")] = None) -> None:
    """Print the workload profile's JSON Schema."""
    import json

    from picker.workload import workload_json_schema

    write_output(json.dumps(workload_json_schema(), indent=2) + "\n", out)


@app.command()
@user_errors
def strategies(fmt: Annotated[Fmt, typer.Option("--format", help="md (a table) or json.")] = Fmt.md) -> None:
    """List registered strategy plugins and their declared capabilities."""
    import json

    from picker.plugins import load_strategies

    plugins = [p.to_dict() for p in load_strategies().values()]
    if fmt is Fmt.json:
        write_output(json.dumps(plugins, indent=2) + "\n", None)
        return
    from picker.cli.tables import print_strategies

    print_strategies(plugins)


def main() -> None:  # pragma: no cover - console entry point
    app()


from picker.cli import profile as _profile  # noqa: E402,F401  -- registers `specpick profile` on app
from picker.cli import generate as _generate  # noqa: E402,F401  -- registers `specpick generate` on app
from picker.cli import sweep as _sweep  # noqa: E402,F401  -- registers `specpick sweep` on app
from picker.zoo import cli as _zoo_cli  # noqa: E402  -- `specpick zoo build|path|...`

app.add_typer(_zoo_cli.app, name="zoo")
from picker.cli import models as _models_cli  # noqa: E402  -- `specpick models fetch|list`
app.add_typer(_models_cli.app, name="models")

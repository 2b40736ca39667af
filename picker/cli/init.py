"""`specpick init` writes a commented starter profile; `specpick check` says what a profile leaves to defaults.

    $ specpick init --model llama-3.1-8b-instruct --hardware H100 --engine vllm \\
          --task-mix chat=0.7,code=0.3 --concurrency 32 --temperature 0.7 --itl-p99-ms 50 --out chat.yaml
    $ specpick init                      # in a terminal: asks for what the flags did not say
    $ specpick check chat.yaml           # valid? and every default it leaves to specpick

``init`` writes only what it was told, with the defaults as comments, validates the exact text it
writes (so ``specpick recommend`` accepts the file unchanged) and renames it into place: a bad
answer is one ``error:`` line per problem, exit code 2, and no file. It never overwrites a file
unless ``--force``. A model given as a local folder or config.json is written relative to the
profile, since a profile's paths are read relative to the profile file.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer

from picker.cli.common import Fmt, check_outputs, user_errors
from picker.errors import UserError, UserErrors

REQUIRED = ("model", "hardware", "engine", "task_mix")
QUESTIONS = {
    "model": "Model (a catalog name such as llama-3.1-8b-instruct, or a Hugging Face folder / config.json)",
    "hardware": "Accelerator (e.g. H100, a100-80gb, 2x h100-sxm)",
    "engine": "Serving engine (sglang, vllm, tensorrt_llm, llama_cpp)",
    "task_mix": "Task mix (e.g. chat=0.7,code=0.3; types: chat, code, structured, math, summarization, rag, "
                "translation, creative)",
}


@user_errors
def init(
    model: Annotated[str | None, typer.Option(
        help="Catalog name, or a Hugging Face folder / config.json path.")] = None,
    hardware: Annotated[str | None, typer.Option(help="Accelerator, e.g. H100 or '2x h100-sxm'.")] = None,
    engine: Annotated[str | None, typer.Option(help="sglang, vllm, tensorrt_llm or llama_cpp.")] = None,
    task_mix: Annotated[str | None, typer.Option(
        help="Shares per task type, e.g. chat=0.7,code=0.3 (or one type).")] = None,
    concurrency: Annotated[int | None, typer.Option(
        help="Requests decoded together (default 1).", min=1, max=65536)] = None,
    temperature: Annotated[float | None, typer.Option(
        help="Sampling temperature (default 1.0).", min=0.0, max=2.0)] = None,
    itl_p99_ms: Annotated[float | None, typer.Option(
        help="99th-percentile inter-token latency target, ms.", min=0.001)] = None,
    ttft_ms: Annotated[float | None, typer.Option(help="Time-to-first-token target, ms.", min=0.001)] = None,
    name: Annotated[str | None, typer.Option(help="Workload name (default: the file's name).")] = None,
    out: Annotated[Path, typer.Option(help="The profile file to write.")] = Path("profile.yaml"),
    force: Annotated[bool, typer.Option(help="Overwrite an existing file.")] = False,
    ask: Annotated[bool | None, typer.Option(
        help="Ask for what the flags leave out (default: when run in a terminal).")] = None,
) -> None:
    """Write a commented starter profile that `specpick recommend` accepts as it is."""
    check_outputs(out=out, fmt=Fmt.yaml)
    if out.exists() and not force:
        raise UserError("already exists; pass --force to overwrite it", file=str(out), field="--out")
    given: dict[str, Any] = {"model": model, "hardware": hardware, "engine": engine, "task_mix": task_mix}
    if ask if ask is not None else sys.stdin.isatty():
        for key in REQUIRED:
            if given[key] is None:
                given[key] = typer.prompt(QUESTIONS[key])
        if concurrency is None:
            concurrency = typer.prompt("Requests decoded together (concurrency)", default=1, type=int)
        if temperature is None:
            temperature = typer.prompt("Sampling temperature (0 is greedy)", default=1.0, type=float)
        if itl_p99_ms is None:
            answer = typer.prompt("p99 inter-token latency target in ms (Enter: none)", default="", show_default=False)
            itl_p99_ms = _number_or_none(answer, "--itl-p99-ms")
    missing = [UserError("required (or run in a terminal to be asked)", field=f"--{k.replace('_', '-')}")
               for k in REQUIRED if not given[k]]
    if missing:
        raise missing[0] if len(missing) == 1 else UserErrors(missing)
    text = starter_text(name=name, model=_relative_model(str(given["model"]), out), hardware=str(given["hardware"]),
                        engine=str(given["engine"]), task_mix=parse_task_mix(str(given["task_mix"])),
                        concurrency=concurrency, temperature=temperature, itl_p99_ms=itl_p99_ms, ttft_ms=ttft_ms)
    profile = _write_checked(text, out)
    typer.echo(f"wrote {out}")
    _echo_defaults(profile)
    typer.echo(f"next: specpick recommend {out}")


@user_errors
def check(profile: Annotated[Path, typer.Argument(help="Workload profile YAML.")]) -> None:
    """Validate a profile (every problem at once) and list each default it leaves to specpick."""
    from picker.inputs.workload import load_profile

    prof = load_profile(profile)
    shape = prof.model_shape()
    typer.echo(f"{profile}: valid: {prof.model.name} ({shape.params / 1e9:.3g}B, {shape.dtype}) on "
               f"{prof.hardware.count}x {prof.hardware.gpu} with {prof.engine.name} {prof.engine.version}")
    _echo_defaults(prof)


def _echo_defaults(profile: Any) -> None:
    from picker.cli.tables import paragraph, width

    applied = profile.defaults_applied
    typer.echo("defaults used:" if applied else "defaults used: none (the profile says everything)")
    for d in applied:
        typer.echo(paragraph(f"- {d.line()}", width(), "  "))


def parse_task_mix(text: str) -> dict[str, float] | str:
    """``chat=0.7,code=0.3`` (or ``:`` for ``=``, spaces for commas) as a mapping; one bare type as itself.

    >>> parse_task_mix("chat=0.7, code=0.3")
    {'chat': 0.7, 'code': 0.3}
    >>> parse_task_mix("code")
    'code'
    """
    parts = [p for p in text.replace(",", " ").split() if p]
    if len(parts) == 1 and "=" not in parts[0] and ":" not in parts[0]:
        return parts[0]
    mix: dict[str, float] = {}
    for part in parts:
        key, sep, value = part.replace(":", "=").partition("=")
        try:
            mix[key] = float(value)
        except ValueError:
            raise UserError(f"{part!r} is not TYPE=SHARE (e.g. chat=0.7,code=0.3)", field="--task-mix") from None
        if not sep or not key:
            raise UserError(f"{part!r} is not TYPE=SHARE (e.g. chat=0.7,code=0.3)", field="--task-mix")
    return mix


def _number_or_none(answer: str, flag: str) -> float | None:
    if not answer.strip():
        return None
    try:
        return float(answer)
    except ValueError:
        raise UserError(f"{answer!r} is not a number", field=flag) from None


def _relative_model(model: str, out: Path) -> str:
    """A local model folder or config.json given relative to here, rewritten relative to the profile."""
    path = Path(model).expanduser()
    if not path.exists():
        return model
    return os.path.relpath(path.resolve(), out.resolve().parent)


def _yaml(value: Any) -> str:
    import yaml

    if isinstance(value, float) and value.is_integer():
        value = int(value)

    text = str(yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, width=1_000))
    return text.strip().removesuffix("...").strip()


def starter_text(*, name: str | None, model: str, hardware: str, engine: str, task_mix: dict[str, float] | str,
                 concurrency: int | None, temperature: float | None, itl_p99_ms: float | None,
                 ttft_ms: float | None) -> str:
    """The profile ``init`` writes: what was given, and each default as a comment to uncomment."""
    from picker.inputs.traffic import (
        DEFAULT_CONCURRENCY,
        DEFAULT_OUTPUT_TOKENS,
        DEFAULT_PROMPT_TOKENS,
        DEFAULT_TEMPERATURE,
    )
    from picker.inputs.workload import HEADROOM_SHARE, PINNED_ENGINE_VERSIONS

    def line(key: str, value: Any, comment: str, *, given: bool = True, indent: str = "") -> str:
        text = f"{indent}{'' if given else '# '}{key}: {_yaml(value)}"
        return f"{text:<38}# {comment}"

    pinned = PINNED_ENGINE_VERSIONS.get(engine.strip().lower(), "the pinned one")
    targets = (("itl_p99_ms", itl_p99_ms, "99th-percentile inter-token latency, ms"),
               ("ttft_ms", ttft_ms, "time to first token, ms"))
    slo = [line(k, v, c, indent="  ") for k, v, c in targets if v is not None]
    out = [
        "# Workload profile for specpick, written by `specpick init`. Every field: `specpick schema`.",
        "# Lines starting with '# key:' are the defaults specpick uses; uncomment one to change it.",
        "# `specpick check FILE` lists the defaults; `specpick recommend FILE` prints the plan.",
        line("name", name, "shown in plans and reports") if name else "# name: (the file's name)",
        line("model", model, "catalog name, Hugging Face folder or config.json"),
        line("hardware", hardware, "one accelerator; `2x h100-sxm` for two"),
        line("engine", engine, f"version {pinned} (give engine: {{name, version}} for another)"),
        "traffic:",
        line("task_mix", task_mix, "shares of requests, summing to 1", indent="  "),
        line("concurrency", concurrency if concurrency is not None else DEFAULT_CONCURRENCY,
             "requests decoded together", given=concurrency is not None, indent="  "),
        line("temperature", temperature if temperature is not None else DEFAULT_TEMPERATURE,
             "sampling temperature; 0 is greedy", given=temperature is not None, indent="  "),
        line("prompt_tokens", DEFAULT_PROMPT_TOKENS, "mean prompt length", given=False, indent="  "),
        line("output_tokens", DEFAULT_OUTPUT_TOKENS, "mean output length", given=False, indent="  "),
        *(["slo:", *slo] if slo else ["# slo: {itl_p99_ms: 50}               # latency targets; none by default"]),
        "# drafters:                           # what you can draft with; none by default, e.g.",
        "#   draft_model: {name: meta-llama/Llama-3.2-1B-Instruct, params_b: 1.24}",
        "#   eagle3_head: {name: yuhuili/EAGLE3-LLaMA3.1-Instruct-8B}",
        f"# memory_headroom_gib: 8              # GiB free per accelerator for drafts (default: "
        f"{HEADROOM_SHARE:.0%} of its memory)",
    ]
    return "\n".join(out) + "\n"


def _write_checked(text: str, out: Path) -> Any:
    """Validate ``text`` as the profile at ``out`` (errors name ``out``), then rename it into place."""
    from picker.inputs.workload import profile_from_data
    from picker.inputs.yamlio import load_yaml_mapping

    target = out.resolve()
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        profile = profile_from_data(load_yaml_mapping(tmp), file=str(out))  # the text recommend will read
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return profile

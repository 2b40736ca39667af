"""`specpick profile`: measure acceptance per task type, strategy, temperature and draft length.

    $ specpick profile --model zoo --strategies ngram,vanilla --tasks code,creative \\
          --temperatures 0,1 --num-draft-tokens 4 --out runs/zoo
    $ specpick profile --backend sglang --url http://127.0.0.1:30000 --prompts question.jsonl \\
          --category-map writing=creative --out runs/sglang
    $ specpick profile --backend vllm --url http://127.0.0.1:8000 --strategies ngram --out runs/vllm
    $ specpick profile --backend llamacpp --url http://127.0.0.1:8080 --strategies vanilla \\
          --num-draft-tokens 3 --out runs/llamacpp
    $ specpick profile --model zoo --strategies ngram --concurrency 1,4,16 --out runs/load
    $ specpick profile --model zoo --strategies ngram --request-rate 2,8 --max-in-flight 16 --out runs/rate
    $ specpick recommend profiles/chat-70b-h100.yaml --measurements runs/zoo/summary.json

Writes ``OUT/records.jsonl`` (one fsync'd line per generation), ``OUT/summary.json`` (see
``picker.profiler.summary``: acceptance, the A/B gain with its interval over rounds, TTFT / ITL /
TPOT / e2e percentiles, goodput under SLOs), ``OUT/run.json``, ``OUT/alpha.png`` and
``OUT/latency.png`` (p99 ITL and mean TPOT against concurrency or request rate). ``--resume`` continues a
killed or interrupted run without repeating a finished generation. Bad input or a failing
endpoint: one ``error:`` line and exit code 2, the partial summary kept; Ctrl-C: exit 130.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from picker.cli.common import user_errors
from picker.errors import UserError
from picker.profiler.options import (
    load_problems,
    parse_artifacts,
    parse_concurrency,
    parse_draft_lengths,
    parse_list,
    parse_rates,
    parse_temperatures,
    prompts_by_task,
    resolve_model,
    unfilled_levels,
    workload_defaults,
)


class PromptFormat(str, Enum):
    auto = "auto"
    chat = "chat"
    raw = "raw"


class Backend(str, Enum):
    torch = "torch"
    sglang = "sglang"
    vllm = "vllm"
    llamacpp = "llamacpp"


def _renderer(model: str | None, prompt_format: str) -> Any:
    """A live server's prompt rendering: the ``--model`` folder's tokenizer (its chat template), else raw."""
    from picker.profiler.prompt_format import PromptRenderer

    if model is None:
        return PromptRenderer(None, prompt_format)
    from picker.tasks.encoding import load_prompt_tokenizer

    folder, _ = resolve_model(model, {})
    try:
        tokenizer = load_prompt_tokenizer(folder)
    except (OSError, ValueError):
        raise UserError("no tokenizer in this folder (a live backend's --model is the served model's Hugging "
                        "Face folder, whose tokenizer renders the prompts)", file=str(folder),
                        field="--model") from None
    return PromptRenderer(tokenizer, prompt_format)


def _source(backend: Backend, model: str | None, url: str | None, artifacts: dict[str, Path],
            client_opts: dict[str, Any], concurrency: int, threads: int, device: str,
            plain_url: str | None = None, prompt_format: str = "auto") -> Any:
    """The measuring source for ``backend`` (a loaded target, or a checked live endpoint)."""
    if plain_url is not None and backend is Backend.torch:
        raise UserError(f"--plain-url is for live backends (a second server without speculation); "
                        f"{backend.value} times its baseline itself or not at all", field="--plain-url")
    if backend is Backend.torch:
        if url is not None:
            raise UserError("--url is for live backends; the torch backend loads --model", field="--url")
        from picker.profiler.torch_source import TorchSource

        target, found = resolve_model(model or "zoo", artifacts)
        return TorchSource(target, found, device=device, threads=threads, prompt_format=prompt_format)
    if url is None:
        raise UserError(f"--backend {backend.value} needs --url (the server's base URL)", field="--url")
    from picker.profiler.http import HttpClient

    client = HttpClient(**client_opts)
    renderer = _renderer(model, prompt_format)
    if backend is Backend.sglang:
        from picker.profiler.sglang import SGLangSource

        return SGLangSource(url, client, concurrency, plain_url=plain_url, renderer=renderer)
    if backend is Backend.llamacpp:
        from picker.profiler.llamacpp import LlamaCppSource

        return LlamaCppSource(url, client, concurrency, plain_url=plain_url, renderer=renderer)
    from picker.profiler.vllm import VLLMSource

    return VLLMSource(url, client, concurrency, plain_url=plain_url, renderer=renderer)


@user_errors
def profile(
    out: Annotated[Path, typer.Option(help="Run folder: records.jsonl, summary.json, run.json, alpha.png.")],
    backend: Annotated[Backend, typer.Option(
        help="torch: the reference loop here; sglang / vllm / llamacpp: a live server.")] = Backend.torch,
    model: Annotated[str | None, typer.Option(
        help="torch: 'zoo' (zoo:ci, zoo:small) or a local HF folder; live: the served model's HF folder, whose "
             "tokenizer renders the prompts (its chat template) into the token ids sent.")] = None,
    prompt_format: Annotated[PromptFormat, typer.Option(
        help="auto: every prompt through the model's chat template when its tokenizer has one, else raw text; "
             "chat: require the template; raw: text as it is (role tags between turns).")] = PromptFormat.auto,
    url: Annotated[str | None, typer.Option(help="sglang / vllm / llamacpp: the server's base URL.")] = None,
    plain_url: Annotated[str | None, typer.Option(
        help="sglang / vllm / llamacpp: a second server of the same target without speculation, to time plain "
             "decoding (speedup_vs_plain, the engine's own step costs for recommend).")] = None,
    strategies: Annotated[str | None, typer.Option(
        help="Comma list (torch: default ngram,vanilla,lookahead,medusa,eagle3; live: the server's one).")] = None,
    artifact: Annotated[list[str] | None, typer.Option(help="STRATEGY=PATH: a draft model or heads folder.")] = None,
    prompts: Annotated[str, typer.Option(help="'builtin' or a JSONL file (prompt|turns, category).")] = "builtin",
    category_map: Annotated[str, typer.Option(help="CATEGORY=TASK,...: map a file's categories to task types.")] = "",
    tasks: Annotated[str | None, typer.Option(help="Comma list of task types (default: all available).")] = None,
    workload: Annotated[Path | None, typer.Option(help="Workload profile: default tasks and temperatures.")] = None,
    temperatures: Annotated[str | None, typer.Option(help="Comma list, e.g. 0,0.7,1 (default 0,1).")] = None,
    num_draft_tokens: Annotated[str, typer.Option(
        help="Draft lengths: N, A-B or a list (torch); live: the server's N where it cannot tell.")] = "4",
    max_new_tokens: Annotated[int, typer.Option(min=1, max=16384)] = 64,
    ignore_eos: Annotated[bool, typer.Option(help="Generate exactly --max-new-tokens (engines' ignore_eos; the "
                                                 "torch loop stops at no EOS): lengths independent of the model.")]
    = False,
    limit_per_task: Annotated[int, typer.Option(help="At most this many prompts per task.", min=1)] = 40,
    ci_target: Annotated[float, typer.Option(help="Stop a cell at this 95% CI half-width of alpha (0: never).",
                                             min=0.0, max=0.5)] = 0.03,
    min_samples: Annotated[int, typer.Option(help="Generations before a cell may stop.", min=2)] = 8,
    early_stop: Annotated[bool, typer.Option(help="Sequential stopping (off: fixed sample, every prompt).")] = True,
    plain_samples: Annotated[int, typer.Option(help="Prompts plain decoding is timed on (early stop).", min=1)] = 16,
    plain: Annotated[bool, typer.Option(help="Time plain decoding too (torch), for speedup_vs_plain.")] = True,
    resume: Annotated[bool, typer.Option(help="Continue the run in OUT.")] = False,
    concurrency: Annotated[str | None, typer.Option(
        help="Requests in flight: N or a list, e.g. 1,2,4,8 (one group of cells per value; each compared with "
             "plain decoding at the same concurrency). Default: 4 live, 1 torch.")] = None,
    wave_rounds: Annotated[int, typer.Option(
        help="At concurrency C, serve C x this many prompts per wave, a finished request replaced by the next "
             "(closed loop); the wave's drain, when rows empty one by one, then weighs about 1/this.",
        min=1, max=64)] = 1,
    request_rate: Annotated[str | None, typer.Option(
        help="Open loop: requests per second offered, R or a list, e.g. 1,4 (seeded Poisson arrivals; one group of "
             "cells per rate, each against plain decoding at the same rate).")] = None,
    burstiness: Annotated[float, typer.Option(
        help="Open loop: gamma shape of the gaps between arrivals (1: Poisson; below 1: burstier), as vLLM's.")] = 1.0,
    max_in_flight: Annotated[int, typer.Option(
        help="Open loop: at most this many requests in flight (0: no cap; torch: the batch rows).")] = 0,
    order: Annotated[str, typer.Option(
        help="Order of plain and each configuration within a round: abba (reversed every other round) or "
             "random (seeded per round).")] = "abba",
    gain_ci_target: Annotated[float, typer.Option(
        help="Also stop a cell only once its A/B gain's 95% interval over rounds is within +- this share of "
             "the gain (0: not asked; plain decoding then runs every round beside it).")] = 0.0,
    slo_ttft_ms: Annotated[float | None, typer.Option(help="SLO for goodput: time to first token, ms "
                                                           "(default: the --workload profile's slo.ttft_ms).")] = None,
    slo_itl_p99_ms: Annotated[float | None, typer.Option(help="SLO: a request's p99 inter-token gap, ms "
                                                              "(default: the profile's slo.itl_p99_ms).")] = None,
    slo_tpot_ms: Annotated[float | None, typer.Option(help="SLO: time per output token, ms.")] = None,
    timeout: Annotated[float, typer.Option(help="Live: seconds per request.", min=0.1)] = 120.0,
    retries: Annotated[int, typer.Option(help="Live: retries of a transient fault.", min=0, max=10)] = 2,
    backoff: Annotated[float, typer.Option(help="Live: seconds before the first retry (doubles).", min=0.0)] = 0.5,
    threads: Annotated[int, typer.Option(help="torch: CPU threads (1 times best on shared CPUs).", min=0)] = 1,
    device: Annotated[str, typer.Option(help="torch: cpu or cuda.")] = "cpu",
    seed: Annotated[int, typer.Option()] = 0,
    plot: Annotated[bool, typer.Option(help="Write alpha.png beside the summary (needs matplotlib).")] = True,
    quiet: Annotated[bool, typer.Option(help="No progress output.")] = False,
) -> None:
    """Measure acceptance (alpha, per-position, tau, cost, tokens/s) per task type x strategy x temperature."""
    from picker.profiler.progress import RichProgress
    from picker.profiler.run import ProfileConfig, Profiler
    from picker.profiler.stopping import StopRule

    slo = _slo(workload, {"ttft_ms": slo_ttft_ms, "itl_p99_ms": slo_itl_p99_ms, "tpot_ms": slo_tpot_ms})
    rates = parse_rates(request_rate)
    problems = load_problems(rates, burstiness, max_in_flight, order, gain_ci_target, slo)
    if problems:  # one line each, all at once
        for problem in problems[:-1]:
            typer.echo(f"error: {problem}", err=True)
        raise problems[-1]
    if resume:  # a resumed run keeps the load it began with, unless told otherwise (then refused)
        concurrency, rates, burstiness, max_in_flight = _resumed_load(out, concurrency, rates, burstiness,
                                                                      max_in_flight)
    task_list, temps = _tasks_and_temperatures(tasks, temperatures, workload, prompts)
    lengths = parse_draft_lengths(num_draft_tokens)
    by_task = prompts_by_task(prompts, task_list, limit_per_task, category_map, seed)
    default = ["ngram", "vanilla", "lookahead", "medusa", "eagle3"] if backend is Backend.torch else []
    chosen = parse_list(strategies, "--strategies") if strategies else default
    client = {"timeout": timeout, "retries": retries, "backoff": backoff}
    levels = parse_concurrency(concurrency, default=1 if backend is Backend.torch else 4) \
        if concurrency is not None or rates is None else []
    # Said once the run is done, so that a run failing on bad input still ends in one error line.
    unfilled = unfilled_levels(levels, by_task)
    source = _source(backend, model, url, parse_artifacts(artifact or []), client, (levels or [1])[0], threads,
                     device, plain_url, prompt_format.value)
    config = ProfileConfig(
        out=out, tasks=list(by_task), temperatures=temps, strategies=chosen, num_draft_tokens=lengths,
        max_new_tokens=max_new_tokens, limit_per_task=limit_per_task,
        rule=StopRule(ci_target, min_samples, early_stop, plain_samples, gain_ci_target), seed=seed, resume=resume,
        plain=plain, plot=plot, concurrency=levels or None, ignore_eos=ignore_eos, wave_rounds=wave_rounds,
        request_rates=rates, burstiness=burstiness, max_in_flight=max_in_flight, order=order,
        meta={"concurrency": levels, "request_rates": rates, "burstiness": burstiness, "max_in_flight": max_in_flight,
              "slo": slo, "ignore_eos": ignore_eos, "backend": backend.value, "target": url or model or "zoo",
              "prompts": prompts,
              "category_map": category_map, "tasks": list(by_task), "temperatures": temps,
              "strategies": chosen, "num_draft_tokens": lengths, "limit_per_task": limit_per_task,
              "prompt_format": source.renderer.format},  # as resolved: chat_template or raw
    )
    progress = RichProgress("quiet" if quiet else None)
    summary = _run(Profiler(source, by_task, config, progress), progress, out)
    if unfilled is not None:
        typer.echo(f"warning: {unfilled}", err=True)
    if not quiet:
        from picker.profiler.load import print_load_table
        from picker.profiler.table import print_open_loop_table, print_summary

        print_summary(summary)
        print_load_table(summary)
        print_open_loop_table(summary)


def _slo(workload: Path | None, flags: dict[str, float | None]) -> dict[str, float | None]:
    """Latency SLOs for goodput: the flags, else the workload profile's ``slo`` section."""
    if workload is not None:
        from picker.inputs.workload import load_profile

        spec = load_profile(workload).slo
        for key, value in (("ttft_ms", spec.ttft_ms), ("itl_p99_ms", spec.itl_p99_ms), ("itl_p50_ms", spec.itl_p50_ms)):
            if flags.get(key) is None and value is not None:
                flags[key] = float(value)
    return {k: v for k, v in flags.items() if v is not None}


def _resumed_load(out: Path, concurrency: str | None, rates: list[float] | None, burstiness: float,
                  max_in_flight: int) -> tuple[str | None, list[float] | None, float, int]:
    """The load of the run being resumed where the command names none (the profiler refuses a
    different one: ``picker.profiler.run.RESUME_KEYS``)."""
    import json

    path = out / "run.json"
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return concurrency, rates, burstiness, max_in_flight
    if concurrency is None and rates is None:
        levels, rates = old.get("concurrency") or None, old.get("request_rates")
        concurrency = ",".join(map(str, levels)) if levels else None
        burstiness = float(old.get("burstiness", burstiness))
        max_in_flight = int(old.get("max_in_flight", max_in_flight))
    # Refused here, before a model loads, as the profiler would refuse it (RESUME_KEYS).
    for key, now in (("request_rates", rates), ("burstiness", burstiness), ("max_in_flight", max_in_flight)):
        if key in old and old[key] != now:
            raise UserError(f"differs from the run being resumed ({old[key]!r} there, {now!r} now)", file=str(path),
                            field=key)
    return concurrency, rates, burstiness, max_in_flight


def _tasks_and_temperatures(tasks: str | None, temperatures: str | None, workload: Path | None,
                            prompts: str) -> tuple[list[str] | None, list[float]]:
    """--tasks / --temperatures, else the workload profile's task mix and temperatures, else defaults."""
    wl_tasks, wl_temps = workload_defaults(workload)
    task_list = parse_list(tasks, "--tasks") if tasks else wl_tasks
    if not tasks and wl_tasks and prompts == "builtin":
        from picker.tasks import builtin_tasks

        # A profile may serve task types with no built-in prompts (translation): measure the rest.
        skipped = [t for t in wl_tasks if t not in builtin_tasks()]
        task_list = [t for t in wl_tasks if t in builtin_tasks()]
        if skipped:
            typer.echo(f"note: no built-in prompts for {', '.join(skipped)}; give --prompts FILE to measure them",
                       err=True)
    temps = parse_temperatures(temperatures) if temperatures else (wl_temps or [0.0, 1.0])
    return task_list, temps


def _run(profiler: Any, progress: Any, out: Path) -> dict[str, Any]:
    """Run with progress; Ctrl-C exits 130 and a failing endpoint says where the partial summary is."""
    from picker.profiler.http import EndpointError

    try:
        with progress:
            return profiler.run()
    except KeyboardInterrupt:
        typer.echo(f"interrupted: the summary of what was measured is in {out / 'summary.json'}; "
                   "continue with --resume", err=True)
        raise typer.Exit(code=130) from None
    except EndpointError as exc:
        raise UserError(f"{exc.message} (partial summary kept in {out / 'summary.json'})",
                        file=exc.file, field=exc.field) from None

"""`specpick generate`: generations through the decode loop, with or without a strategy.

    $ specpick generate --strategy ngram --prompt "def add(a, b):" --max-new-tokens 48
    $ specpick generate --strategy vanilla --prompts code --limit 8 --concurrency 4 --format json
    $ specpick generate --prompts question.jsonl --concurrency 8 --format json
    $ specpick generate --model zoo --draft zoo --strategy vanilla --prompt "x = 1" \\
          --temperature 1 --seed 3 --format json
    $ specpick generate --model ./my-llama --strategy lookahead --set window=5 --set ngram=4 \\
          --prompt "..." --format json

``zoo`` is the project's zoo ``ci`` build (built on first use). ``--prompts`` takes a prompt file
(JSONL, ``picker.tasks.files``) or a built-in task set (``code``, ``chat``, ..., ``all``; ``--limit``
prompts each); ``--concurrency C`` keeps C requests in flight (continuous batching, one target
forward per step over all of them). JSON output for ``--prompt``: ``tokens`` (new ids), ``text``,
``stats`` (``steps``, ``drafted``, ``accepted``, ``tokens_per_second``, ...) and ``stop_reason``;
for ``--prompts``: ``generations`` (each with ``id``, ``task`` and the same fields) and ``totals``
(the run's steps, new tokens, seconds, tokens/s, drafted, accepted, concurrency). Heavy imports
(torch, transformers) happen inside the command only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from picker.cli.common import user_errors, write_output
from picker.errors import UserError


class OutFormat(str, Enum):
    text = "text"
    json = "json"


class Dtype(str, Enum):
    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"


def parse_options(items: list[str]) -> dict[str, Any]:
    """``--set key=value`` (repeatable) -> {key: int | float | str}."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip().isidentifier():
            raise UserError(f"expected KEY=VALUE, got {item!r}", field="--set")
        value: Any = raw.strip()
        for cast in (int, float):
            try:
                value = cast(raw)
                break
            except ValueError:
                continue
        out[key.strip()] = value
    return out


@user_errors
def generate(
    prompt: Annotated[str | None, typer.Option(help="Prompt text (or --prompts).")] = None,
    prompts: Annotated[str | None, typer.Option(
        help="A prompt file (JSONL) or a built-in task set (code, chat, ..., all).")] = None,
    limit: Annotated[int, typer.Option(help="Built-in prompts per task set.", min=1)] = 4,
    concurrency: Annotated[int, typer.Option(help="Requests in flight at once.", min=1, max=256)] = 1,
    strategy: Annotated[str, typer.Option(help="none, or a registered strategy (specpick strategies).")] = "none",
    model: Annotated[str, typer.Option(help="'zoo' or a local Hugging Face folder.")] = "zoo",
    draft: Annotated[str | None, typer.Option(
        help="Draft model (vanilla): 'zoo' or a local folder sharing the target's tokenizer; "
             "defaults to the zoo draft when --model is zoo.")] = None,
    heads: Annotated[Path | None, typer.Option(help="Trained heads folder (medusa, eagle3).")] = None,
    max_new_tokens: Annotated[int, typer.Option(min=1, max=100_000)] = 64,
    temperature: Annotated[float, typer.Option(min=0.0, max=10.0)] = 0.0,
    top_p: Annotated[float | None, typer.Option(min=0.0, max=1.0)] = None,
    top_k: Annotated[int | None, typer.Option(min=1)] = None,
    seed: Annotated[int, typer.Option(min=0)] = 0,
    stop: Annotated[list[str] | None, typer.Option(help="Stop string (repeatable).")] = None,
    max_draft: Annotated[int, typer.Option(help="Most draft nodes verified per step.", min=1, max=1024)] = 64,
    set_: Annotated[list[str] | None, typer.Option("--set", help="Strategy option KEY=VALUE (repeatable).")] = None,
    device: Annotated[str, typer.Option(help="cpu, cuda, cuda:1, ...")] = "cpu",
    dtype: Annotated[Dtype, typer.Option()] = Dtype.float32,
    threads: Annotated[int, typer.Option(help="torch threads (0 = torch's default).", min=0)] = 1,
    fmt: Annotated[OutFormat, typer.Option("--format")] = OutFormat.text,
) -> None:
    """Generate from a prompt with plain decoding or a speculative strategy (exact at any T)."""
    if top_p == 0.0:
        raise UserError("must be in (0, 1]", field="--top-p")
    if (prompt is None) == (prompts is None):
        raise UserError("give exactly one of --prompt and --prompts", field="--prompt")
    from picker.engine.plugins import load_strategies

    plugins = load_strategies()
    if strategy != "none" and strategy not in plugins:
        raise UserError(f"not registered; choose none or one of {', '.join(sorted(plugins))}", field="--strategy")
    options = parse_options(set_ or [])
    if options and strategy == "none":
        raise UserError("options need a strategy", field="--set")
    texts = [("prompt", "", prompt)] if prompt is not None else _prompt_set(prompts or "", limit)
    req = Request(texts, model, draft, heads, options, max_new_tokens, temperature, top_p, top_k, seed,
                  tuple(stop or ()), max_draft, device, dtype.value, threads, concurrency)
    run = _run(plugins.get(strategy), req)
    if prompts is not None:
        write_output(json.dumps(run, indent=2) + "\n" if fmt is OutFormat.json else _table(run, strategy), None)
        return
    result = run["generations"][0]
    if fmt is OutFormat.json:
        write_output(json.dumps(result, indent=2) + "\n", None)
    else:
        write_output(result["text"] + "\n", None)
        s = result["stats"]
        typer.echo(f"[{strategy}] {s['new_tokens']} tokens in {s['steps']} steps, accepted {s['accepted']}/"
                   f"{s['drafted']} drafted, {s['tokens_per_second']:.1f} tok/s ({result['stop_reason']})",
                   err=True)


@dataclass(frozen=True)
class Request:
    """The command's inputs after parsing, in one value."""

    prompts: list[tuple[str, str, str]]  # (id, task, text)
    model: str
    draft: str | None
    heads: Path | None
    options: dict[str, Any]
    max_new_tokens: int
    temperature: float
    top_p: float | None
    top_k: int | None
    seed: int
    stop: tuple[str, ...]
    max_draft: int
    device: str
    dtype: str
    threads: int
    concurrency: int = 1


def _prompt_set(spec: str, limit: int) -> list[tuple[str, str, str]]:
    """(id, task, text) for a JSONL prompt file or a built-in task set (first turn of each)."""
    from picker.tasks import builtin_prompts, builtin_tasks, render_turn
    from picker.tasks.files import load_prompt_file

    tasks = builtin_tasks()
    if spec == "all" or spec in tasks:
        chosen = list(tasks) if spec == "all" else [spec]
        items = builtin_prompts(chosen, limit=limit)
    elif Path(spec).is_file():
        items = load_prompt_file(spec)
    else:
        raise UserError(f"neither a file nor a built-in set (all, {', '.join(tasks)})", field="--prompts")
    return [(p.id, p.task, render_turn(p, 0, [])) for p in items]


def _table(run: dict[str, Any], strategy: str) -> str:
    """One line per prompt, then the run's totals."""
    lines = [f"{g['id']:<24} {g['stats']['new_tokens']:>5} tokens {g['stats']['steps']:>5} steps  {g['stop_reason']}"
             for g in run["generations"]]
    t = run["totals"]
    lines.append(f"[{strategy}] {t['requests']} requests at concurrency {t['concurrency']}: {t['new_tokens']} "
                 f"tokens in {t['steps']} steps, {t['tokens_per_second']:.1f} tok/s, accepted {t['accepted']}/"
                 f"{t['drafted']} drafted")
    return "\n".join(lines) + "\n"


def _resolve(plugin: Any, req: Request) -> tuple[Path, dict[str, Path]]:
    """The target folder and the artifacts by kind (``zoo`` builds the zoo on first use)."""
    from picker.engine.runtime import model_folder
    from picker.zoo.resolve import ZOO, resolve_target, zoo_paths, zoo_size

    # A draft model is resolved only for a strategy that declares it needs one; the zoo draft is
    # the default only beside the zoo target (it would not share a user model's tokenizer).
    wants_draft = plugin is not None and plugin.capabilities.artifact == "draft_model"
    target_dir, artifacts, zoo = resolve_target(req.model)  # a zoo target: heads trained on it
    draft = req.draft if req.draft is not None or zoo is None else ZOO
    if wants_draft:
        if draft is None:
            raise UserError("needs --draft PATH (a draft model with the target's tokenizer)", field="--draft")
        if zoo_size(draft) is not None:
            artifacts["draft_model"] = (zoo if zoo is not None and draft == ZOO else zoo_paths(draft)).draft
        else:
            artifacts["draft_model"] = model_folder(draft, "--draft")
    if req.heads is not None and plugin is not None and plugin.capabilities.artifact is not None:
        artifacts[plugin.capabilities.artifact] = req.heads
    return target_dir, artifacts


def _run(plugin: Any, req: Request) -> dict[str, Any]:
    """Load the target, build the drafter, serve every prompt; the JSON-ready result."""
    import numpy as np
    import torch
    from transformers.utils import logging as hf_logging

    from picker.engine import runtime
    from picker.engine.backend import TorchBackend
    from picker.engine.drafting import SamplingParams, bind
    from picker.engine.loop import serve

    if req.threads > 0:
        torch.set_num_threads(req.threads)
    hf_logging.disable_progress_bar()  # this process is ours: no "Loading weights" bars on stderr
    target_dir, artifacts = _resolve(plugin, req)
    target = TorchBackend.from_pretrained(target_dir, device=req.device, dtype=req.dtype, rows=req.concurrency)
    tokenizer = runtime.load_tokenizer(target_dir)
    ids = [runtime.encode(tokenizer, text) for _, _, text in req.prompts]
    empty = [pid for (pid, _, _), i in zip(req.prompts, ids) if not i]
    if empty:
        raise UserError(f"prompt {empty[0]} encodes to no tokens", field="--prompt")
    drafter = None if plugin is None else runtime.build_drafter(plugin, target, artifacts, req.options)
    spec = bind(drafter, None if plugin is None else plugin.capabilities,
                None if plugin is None else lambda: runtime.build_drafter(plugin, target, artifacts, req.options))
    run = serve(target, ids, spec, concurrency=req.concurrency,
                sampling=SamplingParams(req.temperature, req.top_k, req.top_p),
                max_new_tokens=req.max_new_tokens, max_draft=req.max_draft,
                rng=np.random.default_rng(req.seed), eos_token_id=runtime.eos_token_ids(target),
                stop=req.stop, tokenizer=tokenizer)
    gens = [{"id": pid, "task": task, "tokens": g.tokens, "text": g.text or "", "stats": g.stats.to_dict(),
             "stop_reason": g.stop_reason} for (pid, task, _), g in zip(req.prompts, run.generations)]
    return {"generations": gens, "totals": run.totals()}

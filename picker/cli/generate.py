"""`specpick generate`: one generation through the decode loop, with or without a strategy.

    $ specpick generate --strategy ngram --prompt "def add(a, b):" --max-new-tokens 48
    $ specpick generate --model zoo --draft zoo --strategy vanilla --prompt "x = 1" \\
          --temperature 1 --seed 3 --format json
    $ specpick generate --model ./my-llama --strategy lookahead --set window=5 --set ngram=4 \\
          --prompt "..." --format json

``zoo`` is the project's zoo ``ci`` build (built on first use). JSON output: ``tokens`` (new ids),
``text``, ``stats`` (``steps``, ``drafted``, ``accepted``, ``tokens_per_second``, ...) and
``stop_reason``. Heavy imports (torch, transformers) happen inside the command only.
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
    prompt: Annotated[str, typer.Option(help="Prompt text.")],
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
    from picker.engine.plugins import load_strategies

    plugins = load_strategies()
    if strategy != "none" and strategy not in plugins:
        raise UserError(f"not registered; choose none or one of {', '.join(sorted(plugins))}", field="--strategy")
    options = parse_options(set_ or [])
    if options and strategy == "none":
        raise UserError("options need a strategy", field="--set")
    req = Request(prompt, model, draft, heads, options, max_new_tokens, temperature, top_p, top_k, seed,
                  tuple(stop or ()), max_draft, device, dtype.value, threads)
    result = _run(plugins.get(strategy), req)
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

    prompt: str
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
    """Load the target, build the drafter, run the loop; the JSON-ready result."""
    import numpy as np
    import torch
    from transformers.utils import logging as hf_logging

    from picker.engine import runtime
    from picker.engine.backend import TorchBackend
    from picker.engine.drafting import SamplingParams
    from picker.engine.loop import generate as run_loop

    if req.threads > 0:
        torch.set_num_threads(req.threads)
    hf_logging.disable_progress_bar()  # this process is ours: no "Loading weights" bars on stderr
    target_dir, artifacts = _resolve(plugin, req)
    target = TorchBackend.from_pretrained(target_dir, device=req.device, dtype=req.dtype)
    tokenizer = runtime.load_tokenizer(target_dir)
    ids = runtime.encode(tokenizer, req.prompt)
    if not ids:
        raise UserError("the prompt encodes to no tokens", field="--prompt")
    drafter = None if plugin is None else runtime.build_drafter(plugin, target, artifacts, req.options)
    gen = run_loop(target, ids, drafter, None if plugin is None else plugin.capabilities,
                   sampling=SamplingParams(req.temperature, req.top_k, req.top_p),
                   max_new_tokens=req.max_new_tokens, max_draft=req.max_draft,
                   rng=np.random.default_rng(req.seed), eos_token_id=runtime.eos_token_ids(target),
                   stop=req.stop, tokenizer=tokenizer)
    return {"tokens": gen.tokens, "text": gen.text or "", "stats": gen.stats.to_dict(),
            "stop_reason": gen.stop_reason}

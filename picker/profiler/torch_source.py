"""Profile through the reference loop (``picker.engine.loop.generate``) on a local Hugging Face target.

Every generation runs on one thread by default (timings on a shared CPU swing 10-50x with more);
per-step stats from the loop become record counters:

- a step with ``drafted > 0`` after the prefill is a verify step; its positions ``0..accepted-1``
  were accepted and position ``accepted`` was examined and rejected when ``first_rejection`` is
  set (this holds for chains and for the accepted path of a tree alike);
- ``draft_s`` / ``verify_s`` sum the loop's draft and verify seconds over decode steps (the
  prefill is not a verify), so c = draft time per draft token / verify time per step.

    >>> from picker.profiler.torch_source import step_counters
    >>> from types import SimpleNamespace as S
    >>> steps = [S(drafted=0, accepted=0, first_rejection=None, draft_seconds=0.0, verify_seconds=0.5),
    ...          S(drafted=3, accepted=1, first_rejection=1, draft_seconds=0.03, verify_seconds=0.1)]
    >>> c = step_counters(steps)
    >>> c["steps"], c["drafted"], c["accepted"], c["pos_reached"], c["pos_accepted"], c["forwards"]
    (1, 3, 1, [1, 1], [1, 0], 2)
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from picker.engine.runtime import build_drafter, eos_token_ids, load_tokenizer
from picker.errors import UserError
from picker.profiler.latency import Timing, from_emissions
from picker.profiler.prompt_format import PromptRenderer
from picker.profiler.records import CellKey, Record
from picker.profiler.source import DraftConfig, GenParams, arrival_times
from picker.tasks import Prompt

# Sibling ranks the probe measures at sampled rejections (2..8): covers the trees' top-k up to 8
# (policies.analytic.TREE_TOPKS).
SIBLING_RANKS = 8


def step_counters(steps: Sequence[Any], siblings: Sequence[tuple[Sequence[float], Sequence[float]]] = ()
                  ) -> dict[str, Any]:
    """Sum the loop's per-step records (``picker.engine.loop.StepRecord``) into record counters;
    ``siblings``: the sibling probe's ``(reached, accepted)`` per step (``SiblingProbe.steps``)."""
    reached: list[int] = []
    acc: list[int] = []
    out = {"forwards": len(steps), "steps": 0, "draft_steps": 0, "drafted": 0, "accepted": 0,
           "draft_s": 0.0, "verify_s": 0.0}
    for i, s in enumerate(steps):
        if i == 0:
            continue  # the prefill: no draft, and its forward is no verify
        out["steps"] += 1
        out["draft_steps"] += 1 if s.drafted else 0
        out["drafted"] += s.drafted
        out["accepted"] += s.accepted
        out["draft_s"] += s.draft_seconds
        out["verify_s"] += s.verify_seconds
        examined = s.accepted + (1 if s.first_rejection is not None else 0)
        while len(reached) < examined:
            reached.append(0)
            acc.append(0)
        for k in range(examined):
            reached[k] += 1
            acc[k] += 1 if k < s.accepted else 0
    # The sibling probe's expected counts, summed position by position like any counter list.
    sib = _sum([{"sib_reached": list(r), "sib_accepted": list(a)} for r, a in siblings[1:]])
    return {**out, "pos_reached": reached, "pos_accepted": acc, "sib_reached": sib.get("sib_reached", []),
            "sib_accepted": sib.get("sib_accepted", [])}


def generation_timing(gen: Any, arrived: float | None = None) -> Timing | None:
    """A generation's per-token clock from the loop's emission times (``StepRecord.emitted_at``): TTFT
    from its arrival (open loop: queueing for a row included) or else its admission, one chunk per
    step that emitted tokens (a step's accepted tokens leave together: one inter-token gap)."""
    start = gen.admitted_at if arrived is None else arrived
    return from_emissions(start, [(r.emitted_at, r.emitted) for r in gen.records])


class TorchSource:
    """The target (and per-strategy drafters) in this process; one generation at a time."""

    name = "torch"
    concurrency = 1
    plain = True

    def __init__(self, model: Path, artifacts: dict[str, Path], *, device: str = "cpu",
                 dtype: str = "float32", threads: int = 1, prompt_format: str = "auto") -> None:
        import torch

        from picker.engine.backend import TorchBackend

        if threads > 0:
            torch.set_num_threads(threads)
        if not (model / "config.json").is_file():
            raise UserError("not a Hugging Face model folder (no config.json)", file=str(model), field="--model")
        self.model_dir, self.artifacts, self.device, self.threads = model, artifacts, device, threads
        from picker.tasks.encoding import load_prompt_tokenizer

        # Prompts go through the one prompt encoder, with the model's chat template when it has one;
        # resolved before the weights load, so a refused --prompt-format costs nothing.
        self.renderer = PromptRenderer(load_prompt_tokenizer(model), prompt_format)
        self.prompt_format = self.renderer.format
        self.dtype = dtype
        self.target = TorchBackend.from_pretrained(model, device=device, dtype=dtype)
        self.tokenizer = load_tokenizer(model)  # decodes generations (fast, tokenizer.json)
        cfg = self.target.model.config.get_text_config()
        self.max_positions = int(getattr(cfg, "max_position_embeddings", 2048))
        self.eos = eos_token_ids(self.target) or None
        self._drafters: dict[CellKey, tuple[Any, int]] = {}
        self._by_rows: dict[int, Any] = {}

    def describe(self) -> dict[str, Any]:
        return {"backend": "torch", "model": str(self.model_dir), "device": self.device, "threads": self.threads,
                "artifacts": {k: str(v) for k, v in sorted(self.artifacts.items())},
                "prompt_format": self.prompt_format}

    def provenance(self) -> dict[str, Any]:
        """What only this source knows (``picker.profiler.provenance``): the loaded target's size and
        files, the drafts' files, the torch version, this machine and the dtype."""
        import torch

        from picker.profiler.provenance import TORCH_DTYPES, local_artifact, local_hardware

        params = sum(p.numel() for p in self.target.model.parameters())
        drafts = {s: local_artifact(_artifact_name(path), path) for s, path in sorted(self.artifacts.items())}
        return {"model": local_artifact(_artifact_name(self.model_dir), self.model_dir, params), "drafts": drafts,
                "engine": "torch reference loop", "engine_version": torch.__version__,
                "hardware": local_hardware(self.device), "dtype": TORCH_DTYPES.get(self.dtype, self.dtype)}

    def configs(self, strategies: Sequence[str], num_draft_tokens: Sequence[int]) -> list[DraftConfig]:
        from picker.engine.plugins import load_strategies

        plugins = load_strategies()
        unknown = [s for s in strategies if s not in plugins]
        if unknown:
            raise UserError(f"not registered: {', '.join(unknown)}; registered: {', '.join(sorted(plugins))}",
                            field="--strategies")
        for s in strategies:
            kind = plugins[s].capabilities.artifact
            if kind is not None and s not in self.artifacts:
                raise UserError(f"{s} needs its {kind}; give --artifact {s}=PATH (or --model zoo)",
                                field="--artifact")
        return [DraftConfig(s, n) for s in strategies for n in num_draft_tokens]

    def measure(self, cell: CellKey, prompts: Sequence[Prompt], params: GenParams) -> Iterator[Record]:
        if cell.concurrency != 1 or cell.open_loop:
            yield from self._wave(cell, prompts, params)
            return
        for prompt in prompts:
            yield self._one(cell, prompt, params)

    def _wave(self, cell: CellKey, prompts: Sequence[Prompt], params: GenParams) -> Iterator[Record]:
        """``prompts`` served together at ``cell.concurrency`` by the batched loop (continuous
        batching: a finished request's row takes the next), turn by turn for multi-turn prompts.
        One record per prompt; the runner's wave stamps time the whole wave (throughput)."""
        import numpy as np

        from picker.engine.drafting import SamplingParams, bind
        from picker.engine.loop import serve
        from picker.engine.siblings import SiblingProbe

        drafter, caps, max_draft = self._drafter(cell)
        # Open loop without a cap: a row for every prompt of the wave (the zoo's caches are small).
        target = self._rows(cell.concurrency or len(prompts))
        rng = np.random.default_rng([params.seed, zlib.crc32(cell.id.encode()),
                                     *(zlib.crc32(p.id.encode()) for p in prompts)])
        schedule = arrival_times(cell, prompts, params)
        timings: dict[str, list[Timing]] = {p.id: [] for p in prompts}
        history: dict[str, list[str]] = {p.id: [] for p in prompts}
        counters: dict[str, list[dict[str, Any]]] = {p.id: [] for p in prompts}
        tokens = dict.fromkeys(history, 0)
        seconds = dict.fromkeys(history, 0.0)
        fed = dict.fromkeys(history, 0)  # prompt tokens prefilled, every turn (load pricing counts the prefill)
        for turn in range(max(len(p.turns) for p in prompts)):
            batch = [p for p in prompts if turn < len(p.turns)]
            ids = [self._encode(p, turn, history[p.id], params.max_new_tokens, cell.num_draft_tokens) for p in batch]
            probe = SiblingProbe(SIBLING_RANKS) if caps is not None and caps.tree else None
            # Open loop: every turn's requests arrive on the wave's schedule (a later turn after the first).
            arrivals = [schedule[prompts.index(p)] for p in batch] if schedule is not None else None
            run = serve(target, ids, bind(drafter, caps), concurrency=target.rows,
                        sampling=SamplingParams(temperature=cell.temperature), max_new_tokens=params.max_new_tokens,
                        max_draft=max_draft, rng=rng, eos_token_id=None if params.ignore_eos else self.eos,
                        tokenizer=self.tokenizer, observer=probe, arrivals=arrivals)
            for i, (p, gen) in enumerate(zip(batch, run.generations)):
                timing = generation_timing(gen, arrivals[i] if arrivals is not None else None)
                timings[p.id] += [timing] if timing is not None else []
                fed[p.id] += len(ids[i])
                history[p.id].append(gen.text or "")
                tokens[p.id] += len(gen.tokens)
                seconds[p.id] += gen.stats.seconds
                counters[p.id].append(step_counters(gen.records, probe.steps.get(i, []) if probe is not None else ()))
        for p in prompts:
            c = _sum(counters[p.id])
            yield Record(cell=cell, prompt_ids=(p.id,), tokens=tokens[p.id], forwards=c["forwards"], steps=c["steps"],
                         draft_steps=c["draft_steps"], drafted=c["drafted"], accepted=c["accepted"],
                         pos_reached=tuple(c["pos_reached"]), pos_accepted=tuple(c["pos_accepted"]),
                         draft_s=c["draft_s"], verify_s=c["verify_s"],
                         sib_reached=tuple(round(x, 6) for x in c["sib_reached"]),
                         sib_accepted=tuple(round(x, 6) for x in c["sib_accepted"]),
                         wall_s=seconds[p.id], source="torch-batched", timings=tuple(timings[p.id]),
                         extra={"turns": len(p.turns), "concurrency": cell.concurrency,
                                "prompt_format": self.prompt_format, "prompt_tokens": fed[p.id]})

    def _rows(self, rows: int) -> Any:
        """The target with a cache of ``rows`` sequences (weights shared), built once per level."""
        if rows not in self._by_rows:
            self._by_rows[rows] = self.target.with_rows(rows)
        return self._by_rows[rows]

    def _drafter(self, cell: CellKey) -> tuple[Any, Any, int]:
        """(drafter, capabilities, max_draft) for ``cell``; no drafter for the plain baseline."""
        if cell.is_plain:
            return None, None, 1
        from picker.engine.plugins import load_strategies

        plugin = load_strategies()[cell.strategy]
        key = CellKey("", cell.strategy, 0.0, cell.num_draft_tokens, cell.tree)  # shared across tasks
        if key not in self._drafters:
            self._drafters[key] = _make_drafter(plugin, self.target, self.artifacts.get(cell.strategy),
                                                cell.num_draft_tokens)
        drafter, max_draft = self._drafters[key]
        return drafter, plugin.capabilities, max_draft

    def _one(self, cell: CellKey, prompt: Prompt, params: GenParams) -> Record:
        import numpy as np

        from picker.engine.drafting import SamplingParams, bind
        from picker.engine.loop import generate
        from picker.engine.siblings import SiblingProbe

        drafter, caps, max_draft = self._drafter(cell)
        # One seeded stream per (prompt, cell): reruns reproduce, cells never share draws.
        rng = np.random.default_rng([params.seed, zlib.crc32(prompt.id.encode()), zlib.crc32(cell.id.encode())])
        history: list[str] = []
        tokens, fed, turns_counters, timings = 0, 0, [], []
        start = time.perf_counter()
        probe_s = 0.0
        for turn in range(len(prompt.turns)):
            ids = self._encode(prompt, turn, history, params.max_new_tokens, cell.num_draft_tokens)
            fed += len(ids)
            # Tree-capable drafters run as chains here; the probe measures what their siblings would add.
            probe = SiblingProbe(SIBLING_RANKS) if caps is not None and caps.tree else None
            gen = generate(self.target, ids, bind(drafter, caps), sampling=SamplingParams(temperature=cell.temperature),
                           max_new_tokens=params.max_new_tokens, max_draft=max_draft,
                           rng=rng, eos_token_id=None if params.ignore_eos else self.eos, tokenizer=self.tokenizer,
                           observer=probe)
            history.append(gen.text or "")
            tokens += len(gen.tokens)
            timing = generation_timing(gen)
            timings += [timing] if timing is not None else []
            turns_counters.append(step_counters(gen.records, probe.steps.get(0, []) if probe is not None else ()))
            probe_s += probe.seconds if probe is not None else 0.0
        c = _sum(turns_counters)
        wall = time.perf_counter() - start - probe_s  # the sibling probe is not decoding time
        return Record(cell=cell, prompt_ids=(prompt.id,), tokens=tokens, forwards=c["forwards"], steps=c["steps"],
                      draft_steps=c["draft_steps"], drafted=c["drafted"], accepted=c["accepted"],
                      pos_reached=tuple(c["pos_reached"]),
                      pos_accepted=tuple(c["pos_accepted"]), draft_s=c["draft_s"], verify_s=c["verify_s"],
                      sib_reached=tuple(round(x, 6) for x in c["sib_reached"]),
                      sib_accepted=tuple(round(x, 6) for x in c["sib_accepted"]),
                      wall_s=wall, source="torch-loop", timings=tuple(timings),
                      extra={"turns": len(prompt.turns), "prompt_format": self.prompt_format, "prompt_tokens": fed})

    def _encode(self, prompt: Prompt, turn: int, history: Sequence[str], max_new: int, n_draft: int) -> list[int]:
        """The turn's ids (:class:`PromptRenderer`), cut from the left so prompt + output + one draft
        fit the model's positions."""
        ids = self.renderer.ids(prompt, turn, history)
        room = self.max_positions - max_new - max(n_draft, 1) - 1
        return ids[-room:] if room > 0 else ids[-1:]

    def close(self) -> None:
        self._drafters.clear()
        self._by_rows.clear()


def _artifact_name(folder: Path) -> str:
    """A model's name: its hub id from config.json where saved from the hub, ``zoo:SIZE/PART`` for a
    zoo build (whose folder holds a report.json), else the folder's own name."""
    import json

    report = folder.parent / "report.json"
    try:
        if report.is_file():
            size = json.loads(report.read_text(encoding="utf-8")).get("size")
            if size:
                return f"zoo:{size}/{folder.name}"
        cfg = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return folder.name
    hub = cfg.get("_name_or_path") if isinstance(cfg, dict) else None
    return hub if isinstance(hub, str) and hub and not hub.startswith(("/", ".")) else folder.name


def _sum(parts: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            if isinstance(value, list):
                prev = out.get(key, [])
                width = max(len(prev), len(value))
                out[key] = [(prev[i] if i < len(prev) else 0) + (value[i] if i < len(value) else 0)
                            for i in range(width)]
            else:
                out[key] = out.get(key, 0) + value
    return out


def _make_drafter(plugin: Any, target: Any, artifact: Path | None, n: int) -> tuple[Any, int]:
    """(drafter, max_draft) for ``plugin`` drafting ``n`` tokens deep.

    The options that set the draft length are the ones the plugin declares
    (``StrategyPlugin.draft_options``): a chain length, a top-1 tree of depth ``n``, or Medusa
    choices. The loop's ``max_draft`` caps the nodes verified per step at ``n``, except for
    strategies that declare their verification set uncapped (lookahead's guesses ride whole).
    """
    if plugin.drafter_factory() is None:
        raise UserError(f"{plugin.name} has no drafter to run locally", field="--strategies")
    options, max_draft = plugin.draft_options.chain(n)
    kind = plugin.capabilities.artifact
    try:
        drafter = build_drafter(plugin, target, {kind: artifact} if kind and artifact else {}, options)
    except (ValueError, TypeError) as exc:
        raise UserError(f"{plugin.name} cannot draft N={n}: {exc}", field="--num-draft-tokens") from None
    return drafter, max_draft

"""Build the zoo: corpus → tokenizer → target → distilled draft → report, cached by recipe hash.

The build is one function a reader can follow top to bottom. It writes into a temporary folder
beside the destination and renames it into place at the end, so a killed build leaves nothing that
looks finished, and a second build of the same recipe finds ``report.json`` and returns at once.
An ``flock`` on ``.<folder>.lock`` makes parallel builds of one folder wait for each other, and
temporary folders of killed builds are swept.

    >>> paths = build_zoo("ci")                                  # doctest: +SKIP
    >>> from transformers import AutoModelForCausalLM
    >>> target = AutoModelForCausalLM.from_pretrained(paths.target)  # doctest: +SKIP
"""

from __future__ import annotations

import fcntl
import json
import os
import platform
import random
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from transformers import GenerationConfig, LlamaForCausalLM

from picker.errors import UserError
from picker.zoo import measure
from picker.zoo.corpus import DOMAINS, Corpus, build_corpus
from picker.zoo.paths import ZooPaths
from picker.zoo.recipe import RECIPES, Recipe, ZooSize, build_threads, cache_root, recipe_hash
from picker.zoo.tokenizer import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    encode_documents,
    save_tokenizer,
    train_tokenizer,
)
from picker.zoo.train import (
    StepCallback,
    deterministic,
    new_model,
    pack,
    param_count,
    sample_continuations,
    save_quietly,
    train,
)


def _recipe(size: ZooSize) -> Recipe:
    if size not in RECIPES:
        raise UserError(f"unknown zoo size {size!r}; choose one of {sorted(RECIPES)}", field="size")
    return RECIPES[size]


def _corpus_and_hash(recipe: Recipe) -> tuple[Corpus, str]:
    corpus = build_corpus(recipe.chars_per_domain, recipe.heldout_chars, recipe.seed)
    return corpus, recipe_hash(recipe, corpus.digest())


def zoo_path(size: ZooSize, out: Path | None = None) -> ZooPaths:
    """Where ``build_zoo(size, out)`` puts (or has put) its models; builds nothing.

    ``out`` is the build folder itself; without it the folder is ``<cache root>/<size>-<hash>``.
    """
    if out is not None:
        return ZooPaths.at(Path(out))
    _, digest = _corpus_and_hash(_recipe(size))
    return ZooPaths.at(cache_root() / f"{size}-{digest}")


def build_zoo(size: ZooSize, out: Path | None = None, progress: bool = True, heads: bool = True) -> ZooPaths:
    """Build (or find cached) the ``size`` zoo and return its paths.

    A folder that already holds a report of the same recipe hash is returned untouched; one that
    holds another zoo build is replaced; any other non-empty folder is refused. With ``heads`` the
    trainable heads of every registered strategy that declares them (Medusa, EAGLE-3) are trained
    on the target's own text next (``picker.zoo.heads``), or reused when their recipe matches.
    """
    recipe = _recipe(size)
    corpus, digest = _corpus_and_hash(recipe)  # once: the heads' recipe hash reads the corpus too
    paths = _build(recipe, corpus, digest, out, progress)
    if heads:
        from picker.zoo.heads import HEAD_RECIPES, train_heads  # loads the plugins: only when asked

        with _locked(paths.root.with_name(f".{paths.root.name}.lock")), _progress(progress) as bar:
            tasks: dict[str, object] = {}

            def on_step(artifact: str, step: int, loss: float) -> None:
                if artifact not in tasks:
                    total = HEAD_RECIPES[size].steps.get(artifact, 0)
                    tasks[artifact] = bar.add_task(f"heads: {artifact}", total=total, info="")
                bar.update(tasks[artifact], completed=step + 1, info=f"loss {loss:.3f}")

            train_heads(paths, size, on_step=on_step, corpus=corpus)  # seeded, one thread
    return paths


def build_recipe(recipe: Recipe, out: Path | None = None, progress: bool = True) -> ZooPaths:
    """:func:`build_zoo` for any recipe (tests build tiny ones); same caching rules, no heads."""
    return _build(recipe, *_corpus_and_hash(recipe), out, progress)


def _build(recipe: Recipe, corpus: Corpus, digest: str, out: Path | None, progress: bool) -> ZooPaths:
    paths = ZooPaths.at(Path(out) if out is not None else cache_root() / f"{recipe.size}-{digest}")
    if paths.exists() and _read_hash(paths.report) == digest:
        return paths
    paths.root.parent.mkdir(parents=True, exist_ok=True)
    # One build per folder at a time: a second process (a parallel test run) waits, then finds it.
    with _locked(paths.root.with_name(f".{paths.root.name}.lock")):
        if paths.exists() and _read_hash(paths.report) == digest:
            return paths
        if paths.root.exists() and any(paths.root.iterdir()) and _read_hash(paths.report) is None:
            raise UserError("folder is not empty and holds no zoo build", file=str(paths.root))
        tmp = paths.root.with_name(f".{paths.root.name}.tmp-{os.getpid()}")
        _remove_stale_builds(paths.root)
        try:
            with _progress(progress) as bar, deterministic(build_threads()):
                report = _build_into(ZooPaths.at(tmp), recipe, corpus, digest, bar)
            ZooPaths.at(tmp).report.write_text(json.dumps(report, indent=2) + "\n")
            _move_into_place(tmp, paths.root)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return paths


@contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    """An exclusive advisory lock (``flock``) held for the duration of the block."""
    with open(lock_path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _remove_stale_builds(root: Path) -> None:
    """Delete temporary folders that killed builds of ``root`` left behind (their pid is gone)."""
    for tmp in root.parent.glob(f".{root.name}.tmp-*"):
        pid = tmp.name.rsplit("-", 1)[-1]
        if pid.isdigit() and (int(pid) == os.getpid() or not _alive(int(pid))):
            shutil.rmtree(tmp, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read_hash(report: Path) -> str | None:
    try:
        return str(json.loads(report.read_text())["recipe_hash"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _move_into_place(tmp: Path, dest: Path) -> None:
    """Replace ``dest`` (an older zoo build, or nothing) with the finished ``tmp``; under the lock."""
    if dest.exists():
        shutil.rmtree(dest)
    tmp.rename(dest)


@contextmanager
def _progress(enabled: bool) -> Iterator[Progress]:
    """A rich progress display on stderr, or a silent one when ``enabled`` is false."""
    columns = (TextColumn("{task.description:<22}"), BarColumn(),
               TextColumn("{task.completed}/{task.total}"),
               TextColumn("{task.fields[info]}"), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), disable=not enabled) as bar:
        yield bar


def _on_step(bar: Progress, description: str, total: int) -> StepCallback:
    task = bar.add_task(description, total=total, info="")

    def on_step(step: int, loss: float) -> None:
        bar.update(task, completed=step + 1, info=f"loss {loss:.3f}")

    return on_step


def _save_model(model: LlamaForCausalLM, tok_dir: Path, out: Path) -> None:
    """``save_pretrained`` (safetensors, config) plus generation config and tokenizer files."""
    # No max_length: callers pass max_new_tokens, and both set makes generate() warn every call.
    model.generation_config = GenerationConfig(
        bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID
    )
    save_quietly(model, out)
    for f in tok_dir.iterdir():
        shutil.copy2(f, out / f.name)


@dataclass
class _Data:
    """Token rows one build trains and evaluates on."""

    train_docs: dict[str, list[list[int]]]  # encoded training documents per domain
    rows: torch.Tensor                       # all domains, shuffled and packed
    heldout: dict[str, torch.Tensor]         # packed held-out rows per domain
    vocab_size: int


def _prepare(paths: ZooPaths, recipe: Recipe, corpus: Corpus) -> _Data:
    """Train and save the tokenizer; encode and pack the corpus."""
    tok = train_tokenizer(corpus, recipe.vocab_size)
    save_tokenizer(tok, paths.tokenizer, recipe.max_positions)
    train_docs = {d: encode_documents(tok, corpus.train[d]) for d in DOMAINS}
    mixed = [doc for d in DOMAINS for doc in train_docs[d]]
    random.Random(recipe.seed).shuffle(mixed)  # domains interleave in every batch
    heldout = {d: pack(encode_documents(tok, corpus.heldout[d]), recipe.seq_len) for d in DOMAINS}
    return _Data(train_docs, pack(mixed, recipe.seq_len), heldout, tok.get_vocab_size())


class _Clock:
    """Wall and CPU seconds per phase: CPU time is what an idle machine's wall time would be."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        wall, cpu = time.perf_counter(), time.process_time()
        yield
        self.wall[name] = round(time.perf_counter() - wall, 1)
        self.cpu[name] = round(time.process_time() - cpu, 1)

    def totals(self) -> dict[str, dict[str, float]]:
        return {"wall": {**self.wall, "total": round(sum(self.wall.values()), 1)},
                "cpu": {**self.cpu, "total": round(sum(self.cpu.values()), 1)}}


def _build_into(paths: ZooPaths, recipe: Recipe, corpus: Corpus, digest: str,
                bar: Progress) -> dict[str, object]:
    """Every step of one build, in order; returns the report."""
    clock = _Clock()
    with clock.phase("tokenizer"):
        data = _prepare(paths, recipe, corpus)
    with clock.phase("target"):
        target = new_model(recipe.target, data.vocab_size, recipe.max_positions, recipe.seed)
        train(target, data.rows, recipe.target_train, recipe.seed,
              on_step=_on_step(bar, "target", recipe.target_train.steps))
        _save_model(target, paths.tokenizer, paths.target)
    with clock.phase("distill_sample"):
        distilled = _distill_rows(target, data.train_docs, recipe)
    with clock.phase("draft"):
        # The draft learns the corpus, the target's own samples, and the target's distributions.
        draft = new_model(recipe.draft, data.vocab_size, recipe.max_positions, recipe.seed + 1)
        train(draft, torch.cat([data.rows, distilled]), recipe.draft_train, recipe.seed + 1,
              teacher=target, kd_weight=recipe.kd_weight,
              on_step=_on_step(bar, "draft (distilled)", recipe.draft_train.steps))
        _save_model(draft, paths.tokenizer, paths.draft)
    with clock.phase("evaluate"):
        quality = _evaluate(target, draft, data.heldout, bar)
        costs = measure.forward_costs(target, draft, context=min(256, recipe.seq_len))
    n_target, n_draft = param_count(target), param_count(draft)
    return {
        "recipe_hash": digest,
        "size": recipe.size,
        "recipe": recipe.to_dict(),
        "corpus": {
            "train_chars": corpus.chars("train"),
            "heldout_chars": corpus.chars("heldout"),
            "train_tokens": int(data.rows.numel()),
            "distilled_tokens": int(distilled.numel()),
            "heldout_tokens": {d: int(r.numel()) for d, r in data.heldout.items()},
        },
        "params": {"target": n_target, "draft": n_draft,
                   "target_over_draft": round(n_target / n_draft, 2)},
        **quality,
        "costs": costs,
        "seconds": clock.totals(),
        "threads": torch.get_num_threads(),
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__},
    }


def _evaluate(target: LlamaForCausalLM, draft: LlamaForCausalLM,
              heldout: dict[str, torch.Tensor], bar: Progress) -> dict[str, object]:
    """Held-out loss per domain for both models, and the draft's agreement with the target."""
    task = bar.add_task("evaluate", total=len(heldout), info="")
    losses: dict[str, dict[str, float]] = {"target": {}, "draft": {}}
    agree: dict[str, dict[str, float]] = {}
    for d, rows in heldout.items():
        m = measure.compare(target, draft, rows)
        losses["target"][d], losses["draft"][d] = m["target_loss"], m["draft_loss"]
        agree[d] = {"greedy_agreement": m["greedy_agreement"], "alpha_t1": m["alpha_t1"]}
        bar.advance(task)
    return {"heldout_loss": losses, "agreement": agree}


def _distill_rows(target: LlamaForCausalLM, train_docs: dict[str, list[list[int]]],
                  recipe: Recipe) -> torch.Tensor:
    """Packed rows of text the target writes from corpus prompts, equally many per domain."""
    rng = random.Random(recipe.seed + 2)
    per_domain = recipe.distill_prompts // len(DOMAINS)
    prompts: list[list[int]] = []
    for d in DOMAINS:
        long_enough = [doc for doc in train_docs[d] if len(doc) > recipe.distill_prompt_len]
        picks = rng.sample(long_enough, min(per_domain, len(long_enough)))
        prompts.extend(doc[: recipe.distill_prompt_len] for doc in picks)
    texts = sample_continuations(target, torch.tensor(prompts), recipe.distill_new_tokens,
                                 seed=recipe.seed + 3)
    return pack(texts, recipe.seq_len)

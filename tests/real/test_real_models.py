"""Opt-in tier on the real pair (Qwen2.5-Coder-1.5B-Instruct, 0.5B as its draft): ``-m real``.

Needs ``scripts/real-models.sh`` (or ``specpick models fetch qwen2.5-coder``) first; the cache is
``$SPECPICKER_MODEL_CACHE`` or ``~/.cache/specpicker/models``. One thread, float32.

* Greedy exactness: ``vanilla``, ``ngram`` and ``lookahead`` give plain greedy's tokens on every
  prompt of :func:`prompts` (8 coding-assistant requests and 2 built-in prompts of each task type,
  all through the model's chat template: 22), one at a time and at concurrency 4.
* Sampling exactness: the first tokens sampled through each strategy follow the target's exact
  joint distribution (the conformance suite's chi-square, here at a reduced K, one at a time and
  at concurrency 4), and the planted bug (a loop that skips the residual) fails it.

Sized by environment variables: ``SPECPICKER_REAL_PROMPTS`` (how many prompts, default all 22),
``SPECPICKER_REAL_TOKENS`` (new tokens per generation, default 32), ``SPECPICKER_REAL_K`` (samples
per chi-square, default 400). Tokens/s of plain greedy and of each strategy, measured in the same
run prompt by prompt (interleaved), and α per task type, are written as JSON to
``$SPECPICKER_REAL_REPORT`` when set, and printed.

    $ pytest -m real tests/real -s
"""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import picker.engine.loop
from picker.engine.backend import TorchBackend
from picker.engine.drafting import SamplingParams, Speculator, bind
from picker.engine.loop import generate, serve
from picker.engine.plugins import load_strategies
from picker.engine.runtime import build_drafter
from picker.models import Layout, default_cache, find_pair
from picker.models.convert import MARKER, hf_converted
from picker.models.gguf_header import read_header_file
from picker.tasks import Prompt, builtin_prompts, builtin_tasks
from picker.tasks.encoding import encode_prompt
from tests.conformance.harness import (
    ReplayBackend,
    chain_skipping_residual,
    chi_square,
    divergences,
    exact_joint,
    tree_skipping_residual,
)

pytestmark = pytest.mark.real

PAIR = find_pair("qwen2.5-coder")
STRATEGIES = ("vanilla", "ngram", "lookahead")
# Code, chat and code-edit requests, the mix a coding assistant serves.
ASSISTANT = [
    "Write a Python function that checks whether a string is a palindrome.",
    "Explain what a Python list comprehension is, in two sentences.",
    ("Rename the variable x to count in this code and return the whole code:\n\n"
     "x = 0\nfor item in items:\n    x += 1\nprint(x)"),
    "Write a SQL query that returns the ten most recent rows of a table named orders.",
    "Add type hints to this function:\n\ndef area(w, h):\n    return w * h",
    "What is the difference between a tuple and a list in Python?",
    "Write a bash one-liner that counts the lines of every .py file in a folder.",
    "Fix the bug in this code:\n\ndef mean(xs):\n    return sum(xs) / len(xs) + 1",
]
N_TOKENS = int(os.environ.get("SPECPICKER_REAL_TOKENS", "32"))
K = int(os.environ.get("SPECPICKER_REAL_K", "400"))
BATCH = 4  # concurrency of the batched runs
# A context where the next three tokens are uncertain enough to fill a dozen bins at K = 400 and
# where the conversation so far has text a look-up drafter can copy: the model is asked to repeat
# and extend a list it was given, and has begun (its own greedy continuation, GREEDY tokens).
DIST_PROMPT = ("Continue this list of Python variable names for a loop counter with ten more, one per line:\n"
               "count\ncounter\nn_items\nindex\ntotal\n")
GREEDY, DEPTH = 12, 3
SAMPLING = SamplingParams(temperature=1.0, top_k=8, top_p=0.95)
NULL_LEVEL = 1e-4  # as the conformance suite: a correct strategy does not fail by chance
PLANTED_LEVEL = 1e-6
PLANTED = ("vanilla", "ngram")  # a chain with sampled p, and a deterministic chain


def prompts() -> list[Prompt]:
    """The greedy-exactness prompts: the assistant requests, then 2 built-in prompts per task type."""
    own = [Prompt(f"assistant-{i}", "assistant", (text,)) for i, text in enumerate(ASSISTANT)]
    every = [*own, *builtin_prompts(builtin_tasks(), 2)]
    return every[: int(os.environ.get("SPECPICKER_REAL_PROMPTS", len(every)))]


@pytest.fixture(scope="module")
def layouts() -> dict[str, Layout]:
    cache = default_cache().resolve()
    out = {"target": Layout(PAIR.target, cache), "draft": Layout(PAIR.draft, cache)}
    for role, layout in out.items():
        if hf_converted(layout) is None:
            pytest.fail(f"{role} {layout.spec.name} not converted under {layout.hf}: "
                        "run scripts/real-models.sh first")
    return out


@pytest.fixture(scope="module")
def backends(layouts: dict[str, Layout]) -> dict[str, TorchBackend]:
    torch.set_num_threads(1)  # timing on a shared 2-core machine: one thread (FACTS.md)
    return {role: TorchBackend.from_pretrained(layout.hf)
            for role, layout in layouts.items()}


@pytest.fixture(scope="module")
def chat_tokenizer(layouts: dict[str, Layout]) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(layouts["target"].hf), local_files_only=True)


def chat_ids(tok: Any, prompt: Prompt | str) -> list[int]:
    """The prompt as an instruct model is served it: through its own chat template (the profiler's
    rendering, ``picker.tasks.encoding.encode_prompt``)."""
    return encode_prompt(tok, prompt, template=True)


def speculators(target: TorchBackend, draft: TorchBackend, layouts: dict[str, Layout],
                names: tuple[str, ...] = STRATEGIES) -> dict[str, Speculator]:
    """Each strategy's drafter on ``target`` (vanilla drafting with ``draft``), bound to its capabilities."""
    plugins = load_strategies(only_builtin=True)
    artifacts = {"draft_model": layouts["draft"].hf}
    return {name: bind(build_drafter(plugins[name], target, artifacts,
                                     {"draft_backend": draft} if name == "vanilla" else {}),
                       plugins[name].capabilities)
            for name in names}


@pytest.mark.parametrize("role", ["target", "draft"])
def test_folder_matches_its_gguf(role: str, layouts: dict[str, Layout],
                                 backends: dict[str, TorchBackend]) -> None:
    """Config and chat template agree with the GGUF header; the decode loop reproduces the greedy
    tokens the conversion saw from the GGUF-loaded model."""
    layout = layouts[role]
    header = read_header_file(layout.gguf)
    config = json.loads((layout.hf / "config.json").read_text())
    assert (config["num_hidden_layers"], config["hidden_size"], config["vocab_size"]) == (
        layout.spec.header.block_count, layout.spec.header.hidden_size, layout.spec.header.vocab_size)
    assert "quantization_config" not in config
    tok_config = json.loads((layout.hf / "tokenizer_config.json").read_text())
    assert tok_config["chat_template"] == header.metadata["tokenizer.chat_template"]
    marker = json.loads((layout.hf / MARKER).read_text())
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(layout.hf), local_files_only=True)
    ids = tok.apply_chat_template([{"role": "user", "content": marker["check_prompt"]}], add_generation_prompt=True,
                                  tokenize=True)
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids
    out = generate(backends[role], [int(i) for i in ids], max_new_tokens=len(marker["check_tokens"]))
    assert out.tokens == marker["check_tokens"]


def _record(rows: list[dict[str, Any]], batched: dict[str, dict[str, Any]]) -> None:
    by: dict[str, list[float]] = {}
    for r in rows:
        by.setdefault(r["strategy"], []).append(r["tokens_per_second"])
    summary: dict[str, Any] = {s: {"median_tokens_per_second": round(statistics.median(v), 3), "runs": len(v)}
                               for s, v in by.items()}
    plain = summary["plain"]["median_tokens_per_second"]
    for name, s in summary.items():
        s["ratio_to_plain"] = round(s["median_tokens_per_second"] / plain, 4)
        mine = [r for r in rows if r["strategy"] == name]
        s["ratio_of_totals"] = round(sum(r["new_tokens"] for r in mine) / sum(r["seconds"] for r in mine)
                                     / (sum(r["new_tokens"] for r in rows if r["strategy"] == "plain")
                                        / sum(r["seconds"] for r in rows if r["strategy"] == "plain")), 4)
        alpha: dict[str, Any] = {}
        for task in dict.fromkeys(r["task"] for r in mine):
            drafted = sum(r["drafted"] for r in mine if r["task"] == task)
            accepted = sum(r["accepted"] for r in mine if r["task"] == task)
            alpha[task] = {"alpha": round(accepted / drafted, 4) if drafted else None, "drafted": drafted,
                           "accepted": accepted}
        if name != "plain":
            s["alpha_by_task"] = alpha
    report = {"prompts": len(prompts()), "max_new_tokens": N_TOKENS, "threads": 1, "dtype": "float32",
              "prompt_format": "chat_template", "summary": summary, "batched": batched, "runs": rows}
    print("\n" + json.dumps({"summary": summary, "batched": batched}, indent=1))
    if path := os.environ.get("SPECPICKER_REAL_REPORT"):
        Path(path).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


def test_strategies_are_token_identical_to_plain_greedy(
        backends: dict[str, TorchBackend], layouts: dict[str, Layout], chat_tokenizer: Any) -> None:
    """One at a time (interleaved per prompt, timed) and at concurrency 4 (all prompts as a queue).

    At batch 1 no divergence is allowed. At concurrency 4 a row is computed by kernels of another
    shape, so a divergence is exempt only where the baseline's top two logits are within 1e-4 (the
    conformance suite's rule, ``harness.greedy_tie``); at most one prompt per strategy may use it.
    """
    target = backends["target"]
    specs = speculators(target, backends["draft"], layouts)
    eos = chat_tokenizer.convert_tokens_to_ids("<|im_end|>")
    ps = prompts()
    ids = [chat_ids(chat_tokenizer, p) for p in ps]
    rows: list[dict[str, Any]] = []
    mismatches = []
    base: list[list[int]] = []
    for i, (p, prompt) in enumerate(zip(ps, ids)):
        # Interleaved per prompt: plain, then each strategy, so machine load hits them alike.
        plain = generate(target, prompt, max_new_tokens=N_TOKENS, eos_token_id=eos)
        base.append(plain.tokens)
        rows.append({"prompt": i, "id": p.id, "task": p.task, "strategy": "plain", **plain.stats.to_dict()})
        for name, spec in specs.items():
            got = generate(target, prompt, spec, max_new_tokens=N_TOKENS, eos_token_id=eos)
            rows.append({"prompt": i, "id": p.id, "task": p.task, "strategy": name, **got.stats.to_dict()})
            if got.tokens != plain.tokens:
                mismatches.append((p.id, name, plain.tokens, got.tokens))
    wide = target.with_rows(BATCH)
    wide_specs = speculators(wide, backends["draft"].with_rows(BATCH), layouts)
    batched: dict[str, dict[str, Any]] = {}
    for name, spec in wide_specs.items():
        run = serve(wide, ids, spec, concurrency=BATCH, max_new_tokens=N_TOKENS, eos_token_id=eos)
        bad, ties = divergences(target, run, ids, base)
        batched[name] = {"concurrency": BATCH, "prompts": len(ids), "steps": run.steps,
                         "tokens_per_second": round(sum(len(g.tokens) for g in run.generations) / run.seconds, 3),
                         "identical": sum(g.tokens == w for g, w in zip(run.generations, base)),
                         "near_tie_exempt": ties, "diverged": bad}
    _record(rows, batched)
    assert mismatches == []
    for name, b in batched.items():
        assert b["diverged"] == [], f"{name} at concurrency {BATCH}: {b['diverged']}"
        assert b["near_tie_exempt"] <= 1, f"{name} at concurrency {BATCH}: {b['near_tie_exempt']} near-tie exemptions"
    # Not vacuous: every strategy drafted and had drafts accepted on the real pair.
    for name in STRATEGIES:
        assert sum(r["accepted"] for r in rows if r["strategy"] == name) > 0, name


# -- sampling ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def replay(backends: dict[str, TorchBackend]) -> dict[str, ReplayBackend]:
    """Target and draft answered from a memo of their forwards (exact: ``harness.ReplayBackend``),
    so K samples at one context cost a few hundred real forwards."""
    return {role: ReplayBackend(b.model, rows=BATCH) for role, b in backends.items()}


@pytest.fixture(scope="module")
def dist_ids(backends: dict[str, TorchBackend], chat_tokenizer: Any) -> list[int]:
    seed = chat_ids(chat_tokenizer, DIST_PROMPT)
    return [*seed, *generate(backends["target"], seed, max_new_tokens=GREEDY).tokens]


@pytest.fixture(scope="module")
def bins(replay: dict[str, ReplayBackend], dist_ids: list[int]) -> dict[tuple[int, ...], float]:
    out = exact_joint(replay["target"], dist_ids, DEPTH, K, SAMPLING)
    assert len(out) >= 10, f"only {len(out)} bins at K = {K}: too few for a meaningful test"
    return out


def draws(spec: Speculator, target: ReplayBackend, ids: list[int], k: int, seed: int, batch: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    if batch == 1:
        return [generate(target, ids, spec, sampling=SAMPLING, max_new_tokens=DEPTH, rng=rng).tokens
                for _ in range(k)]
    run = serve(target, [ids] * k, spec, concurrency=batch, sampling=SAMPLING, max_new_tokens=DEPTH, rng=rng)
    return [g.tokens for g in run.generations]


@pytest.mark.parametrize("batch", [1, BATCH])
@pytest.mark.parametrize("name", STRATEGIES)
def test_sampled_tokens_follow_the_target_distribution(
        name: str, batch: int, replay: dict[str, ReplayBackend], layouts: dict[str, Layout],
        dist_ids: list[int], bins: dict[tuple[int, ...], float]) -> None:
    spec = speculators(replay["target"], replay["draft"], layouts, (name,))[name]
    samples = draws(spec, replay["target"], dist_ids, K, seed=3, batch=batch)
    pvalue, dof = chi_square(samples, bins)
    print(f"\n{name} batch {batch}: chi-square p = {pvalue:.3g} over {dof} dof, K = {K}")
    assert pvalue > NULL_LEVEL, f"{name} at batch {batch}: chi-square p = {pvalue:.2e} over {dof} dof"


@pytest.mark.parametrize("name", PLANTED)
def test_a_loop_that_skips_the_residual_fails_on_the_real_pair(
        name: str, replay: dict[str, ReplayBackend], layouts: dict[str, Layout], dist_ids: list[int],
        bins: dict[tuple[int, ...], float], monkeypatch: pytest.MonkeyPatch) -> None:
    """The control: with the planted bug the same test at the same K must fail, or it has no power here."""
    monkeypatch.setattr(picker.engine.loop, "verify_sample_chain", chain_skipping_residual)
    monkeypatch.setattr(picker.engine.loop, "verify_sample_tree", tree_skipping_residual)
    spec = speculators(replay["target"], replay["draft"], layouts, (name,))[name]
    pvalue, dof = chi_square(draws(spec, replay["target"], dist_ids, K, seed=3, batch=1), bins)
    print(f"\nplanted bug, {name}: chi-square p = {pvalue:.3g} over {dof} dof, K = {K}")
    assert pvalue < PLANTED_LEVEL, f"the planted bug went unnoticed on {name}: p = {pvalue:.2e} over {dof} dof"

"""Opt-in tier on the real pair (Qwen2.5-Coder-1.5B-Instruct, 0.5B as its draft): ``-m real``.

Needs ``scripts/real-models.sh`` (or ``specpick models fetch qwen2.5-coder``) first; the cache is
``$SPECPICKER_MODEL_CACHE`` or ``~/.cache/specpicker/models``. Sized by environment variables:
``SPECPICKER_REAL_PROMPTS`` (how many of :data:`PROMPTS`, default all 8) and
``SPECPICKER_REAL_TOKENS`` (new tokens per generation, default 16). One thread, float32.
Tokens/s of plain greedy and of each strategy, measured in the same run prompt by prompt
(interleaved), are written as JSON to ``$SPECPICKER_REAL_REPORT`` when set, and printed.

    $ pytest -m real tests/real -s
"""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path
from typing import Any

import pytest
import torch

from picker.engine.backend import TorchBackend
from picker.engine.drafting import bind
from picker.engine.loop import generate
from picker.engine.plugins import load_strategies
from picker.engine.runtime import build_drafter
from picker.models import Layout, default_cache, find_pair
from picker.models.convert import MARKER, hf_converted
from picker.models.gguf_header import read_header_file

pytestmark = pytest.mark.real

PAIR = find_pair("qwen2.5-coder")
STRATEGIES = ("vanilla", "ngram", "lookahead")
# Code, chat and code-edit requests, the mix a coding assistant serves.
PROMPTS = [
    "Write a Python function that checks whether a string is a palindrome.",
    "Explain what a Python list comprehension is, in two sentences.",
    "Rename the variable x to count in this code and return the whole code:\n\n"
    "x = 0\nfor item in items:\n    x += 1\nprint(x)",
    "Write a SQL query that returns the ten most recent rows of a table named orders.",
    "Add type hints to this function:\n\ndef area(w, h):\n    return w * h",
    "What is the difference between a tuple and a list in Python?",
    "Write a bash one-liner that counts the lines of every .py file in a folder.",
    "Fix the bug in this code:\n\ndef mean(xs):\n    return sum(xs) / len(xs) + 1",
]
N_PROMPTS = int(os.environ.get("SPECPICKER_REAL_PROMPTS", len(PROMPTS)))  # 8 x 16: 7.7 min here
N_TOKENS = int(os.environ.get("SPECPICKER_REAL_TOKENS", 16))


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


def chat_ids(tok: Any, text: str) -> list[int]:
    """The prompt as an instruct model is served it: through its own chat template."""
    ids = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                  tokenize=True)
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids
    return [int(i) for i in ids]


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
    prompt = chat_ids(tok, marker["check_prompt"])
    out = generate(backends[role], prompt, max_new_tokens=len(marker["check_tokens"]))
    assert out.tokens == marker["check_tokens"]


def _record(rows: list[dict[str, Any]]) -> None:
    by: dict[str, list[float]] = {}
    for r in rows:
        by.setdefault(r["strategy"], []).append(r["tokens_per_second"])
    summary = {s: {"median_tokens_per_second": statistics.median(v), "runs": len(v)} for s, v in by.items()}
    plain = summary["plain"]["median_tokens_per_second"]
    for s in summary.values():
        s["ratio_to_plain"] = s["median_tokens_per_second"] / plain
    report = {"prompts": N_PROMPTS, "max_new_tokens": N_TOKENS, "threads": 1, "dtype": "float32",
              "summary": summary, "runs": rows}
    print("\n" + json.dumps(summary, indent=2))
    if path := os.environ.get("SPECPICKER_REAL_REPORT"):
        Path(path).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


def test_strategies_are_token_identical_to_plain_greedy(
        backends: dict[str, TorchBackend], layouts: dict[str, Layout], chat_tokenizer: Any) -> None:
    target = backends["target"]
    plugins = load_strategies(only_builtin=True)
    artifacts = {"draft_model": layouts["draft"].hf}
    drafters = {name: build_drafter(plugins[name], target, artifacts,
                                    {"draft_backend": backends["draft"]} if name == "vanilla" else {})
                for name in STRATEGIES}
    eos = chat_tokenizer.convert_tokens_to_ids("<|im_end|>")
    rows: list[dict[str, Any]] = []
    mismatches = []
    for i, text in enumerate(PROMPTS[:N_PROMPTS]):
        prompt = chat_ids(chat_tokenizer, text)
        # Interleaved per prompt: plain, then each strategy, so machine load hits them alike.
        plain = generate(target, prompt, max_new_tokens=N_TOKENS, eos_token_id=eos)
        rows.append({"prompt": i, "strategy": "plain", **plain.stats.to_dict()})
        for name in STRATEGIES:
            got = generate(target, prompt, bind(drafters[name], plugins[name].capabilities),
                           max_new_tokens=N_TOKENS, eos_token_id=eos)
            rows.append({"prompt": i, "strategy": name, **got.stats.to_dict()})
            if got.tokens != plain.tokens:
                mismatches.append((i, name, plain.tokens, got.tokens))
    _record(rows)
    assert mismatches == []
    # Not vacuous: drafts were proposed and some accepted on the real pair.
    assert sum(r["accepted"] for r in rows if r["strategy"] == "vanilla") > 0

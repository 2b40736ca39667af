"""vLLM and llama.cpp decode the same greedy token ids as the reference engine (marker ``engines``).

The prompts of ``tests/test_agreement.py`` (every built-in task type, three each), encoded once by
``picker.tasks.encoding.encode_prompt``, 32 greedy tokens each, served by a plain (non-speculative)
server of the zoo target on 127.0.0.1. The text an engine gets is ``render_turn``'s, as the
profilers send it: a chat-formatted prompt (``raw=False``, e.g. ``agentic``) carries its role tags.

- vLLM (CPU build, float32) gets the prompt as TEXT: the prompt ids it
  reports back (``return_token_ids``) must equal ours, so our one encoding function and the
  engine's tokenizer agree, and then its output ids are compared. ``ignore_eos`` only skips the
  stop in vLLM (EOS stays selectable), which is the reference's no-EOS-stop decoding exactly.
- llama.cpp (GGUF f32) gets our ids (its GGUF tokenizer is checked separately through
  ``/tokenize``). Its ``ignore_eos`` masks EOS, so tokens are compared up to the reference's
  first EOS, and at that position llama.cpp's own pre-mask top token must be EOS.

Each engine reports its raw top-2 log-probabilities, so a divergence is printed with both sides'
and tolerated only as a near tie within the stated tolerance (``tests/agreement.py``). Beside the
ids, the engines' log-probabilities of the agreed tokens must match the reference's within
``LOGPROB_TOLERANCE``.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from picker.engine.backend import TorchBackend
from picker.profiler.llamacpp_server import local_server
from picker.profiler.vllm_server import Server
from picker.tasks import render_turn
from picker.tasks.agreement import first_divergence
from picker.tasks.encoding import load_prompt_tokenizer
from picker.zoo.resolve import zoo_paths
from tests.agreement import (
    MAX_NEW,
    Divergence,
    Top2,
    encoded_prompts,
    reference_logprobs,
    reference_tokens,
    summarize,
    top2_of,
)
from tests.engines.support import ENGINES_DIR, engine_python

pytestmark = pytest.mark.engines
torch.set_num_threads(1)

# Float32 on both sides, but other kernels and summation orders: a gap between an engine's first
# two log-probs wider than this must not flip. Measured gaps at agreeing positions are ~1e-5.
TIE_TOLERANCE = 1e-3
LOGPROB_TOLERANCE = 1e-4  # |engine - reference| log-prob of each agreed token
LLAMA = ENGINES_DIR / "llamacpp"
LLAMA_SERVER, LLAMA_TARGET = LLAMA / "bin" / "llama-server", LLAMA / "models" / "ci-target.gguf"
REQUEST_TIMEOUT_S = 300.0
# llama.cpp's defaults on this CPU (flash attention "auto" -> on, f16 KV cache) move log-probs
# away from float32 by up to 8.7e-3 nats over 32 tokens (measured on the zoo; the ids still
# agreed), f32 caches alone change nothing, and both off give 4.7e-6. The comparison is float32
# against float32.
LLAMA_F32 = ("--flash-attn", "off", "--cache-type-k", "f32", "--cache-type-v", "f32")


@pytest.fixture(scope="module")
def reference() -> dict[str, Any]:
    """The prompts, their ids, and the reference engine's tokens and log-probs for each."""
    zoo = zoo_paths(progress=False)
    tokenizer = load_prompt_tokenizer(zoo.target)
    backend = TorchBackend.from_pretrained(zoo.target)
    rows = []
    for prompt, ids in encoded_prompts(tokenizer):
        tokens = reference_tokens(backend, ids)
        rows.append({"prompt": prompt, "ids": ids, "tokens": tokens,
                     "logp": reference_logprobs(backend, ids, tokens)})
    return {"zoo": zoo, "tokenizer": tokenizer, "rows": rows, "eos": int(tokenizer.eos_token_id)}


def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT_S) as resp:
        return dict(json.loads(resp.read()))


def _compare(name: str, reference: dict[str, Any], answers: list[tuple[list[int], list[Top2]]],
             cut_at_eos: bool = False) -> None:
    """Assert the engine's ids agree with the reference's (near ties excepted), and print the count."""
    rows: list[tuple[str, int | None, Divergence | None]] = []
    worst = 0.0
    for row, (tokens, top2) in zip(reference["rows"], answers, strict=True):
        ref = list(row["tokens"])
        if cut_at_eos and reference["eos"] in ref:
            # The engine masked EOS where the reference chose it: compare its pre-mask top-1 there.
            k = ref.index(reference["eos"])
            ref, tokens = ref[:k + 1], [*tokens[:k], top2[k][0][0]]
        pos = first_divergence(ref, tokens)
        agreed = len(ref) if pos is None else pos
        for i in range(agreed):  # the engine's log-prob of each agreed token against the reference's
            assert top2[i][0][0] == ref[i], f"{name} {row['prompt'].id}: its top-1 at {i} is not the token it chose"
            worst = max(worst, abs(top2[i][0][1] - float(row["logp"][i, ref[i]])))
        div = None
        if pos is not None:
            div = Divergence(row["prompt"].id, pos, ref[pos], tokens[pos] if pos < len(tokens) else -1,
                             top2_of(row["logp"][pos]), top2[pos] if pos < len(top2) else None, TIE_TOLERANCE)
        rows.append((row["prompt"].id, pos, div))
    report = summarize(name, rows) + f"\nlargest |log-prob difference| on agreed tokens: {worst:.2e}"
    print(report)
    assert all(d is None or d.tolerated for _, _, d in rows), report
    assert sum(1 for _, pos, _ in rows if pos is None) >= len(rows) - 2, report
    assert worst <= LOGPROB_TOLERANCE, report


def test_vllm_greedy_ids_equal_the_reference(reference: dict[str, Any], tmp_path: Path) -> None:
    model = str(reference["zoo"].target)
    server = Server(engine_python("vllm"), reference["zoo"].target, None, tmp_path / "vllm")
    answers: list[tuple[list[int], list[Top2]]] = []
    try:
        server.wait_up()
        for row in reference["rows"]:
            out = _post(f"{server.url}/v1/completions", {
                "model": model, "prompt": render_turn(row["prompt"], 0, []), "max_tokens": MAX_NEW, "temperature": 0.0,
                "ignore_eos": True, "return_token_ids": True, "logprobs": 2, "return_tokens_as_token_ids": True})
            choice = out["choices"][0]
            assert choice["prompt_token_ids"] == row["ids"], f"{row['prompt'].id}: vLLM tokenized the text otherwise"
            top2 = []
            for entry in choice["logprobs"]["top_logprobs"]:  # {"token_id:N": logprob}, raw logits
                best = sorted(((int(k.split(":", 1)[1]), float(v)) for k, v in entry.items()), key=lambda t: -t[1])
                top2.append((best[0], best[1]))
            answers.append(([int(t) for t in choice["token_ids"]], top2))
    finally:
        server.stop()
    assert all(len(tokens) == MAX_NEW for tokens, _ in answers)  # forced length: no EOS stop
    _compare("vLLM", reference, answers)


@contextmanager
def _llama_server(tmp_path: Path) -> Iterator[str]:
    """A plain llama-server of the zoo target on 127.0.0.1, one slot, one thread; always killed."""
    with local_server(LLAMA_SERVER, LLAMA_TARGET, LLAMA_F32, tmp_path / "llama-server.log", context=1024,
                      start_limit_s=60.0) as url:
        yield url


def test_llamacpp_greedy_ids_equal_the_reference(reference: dict[str, Any], tmp_path: Path) -> None:
    if not (LLAMA_SERVER.exists() and LLAMA_TARGET.exists()):
        pytest.skip(f"no {LLAMA_SERVER} or {LLAMA_TARGET}: run `bash scripts/engines-setup.sh llamacpp`")
    answers: list[tuple[list[int], list[Top2]]] = []
    tokenized_alike = 0
    with _llama_server(tmp_path) as url:
        for row in reference["rows"]:
            # The GGUF's own tokenizer on the text, special tokens as its metadata says.
            text = render_turn(row["prompt"], 0, [])
            ids = _post(f"{url}/tokenize", {"content": text, "add_special": True})["tokens"]
            tokenized_alike += ids == row["ids"]
            out = _post(f"{url}/completion", {
                "prompt": row["ids"], "n_predict": MAX_NEW, "ignore_eos": True, "temperature": 0.0,
                "n_probs": 2, "return_tokens": True, "cache_prompt": False, "seed": 0})
            probs = out["completion_probabilities"]
            top2 = [tuple((int(t["id"]), float(t["logprob"])) for t in p["top_logprobs"][:2]) for p in probs]
            answers.append(([int(t) for t in out["tokens"]], top2))  # type: ignore[misc]
    print(f"llama.cpp /tokenize: {tokenized_alike}/{len(answers)} prompts tokenized exactly as encode_prompt does")
    assert tokenized_alike == len(answers)
    assert all(len(tokens) == MAX_NEW for tokens, _ in answers)  # n_predict with EOS masked: forced
    _compare("llama.cpp", reference, answers, cut_at_eos=True)


def test_the_comparison_fails_on_a_shifted_answer(reference: dict[str, Any]) -> None:
    """The check has teeth: the reference against itself passes, shifted by one token it fails."""
    own = [(list(r["tokens"]), [top2_of(row) for row in r["logp"]]) for r in reference["rows"]]
    _compare("reference itself", reference, own)
    shifted = [([t + 1 for t in tokens], top2) for tokens, top2 in own]
    with pytest.raises(AssertionError):
        _compare("shifted", reference, shifted)
    assert np.isfinite(reference["rows"][0]["logp"]).all()

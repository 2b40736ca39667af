"""max_new_tokens, EOS and stop strings end every strategy's output where plain decoding ends.

A long accepted draft must be cut at the limit, at the first EOS and at the token that completes a
stop string -- even when the EOS or the stop string sits in the middle of an accepted run.
"""

from __future__ import annotations

from typing import Any

import pytest

from picker.engine.backend import TorchBackend
from picker.engine.loop import generate
from tests.conformance.conftest import Strategy

PROMPTS = ["x = 1\ny = 2\nx = 1\ny = 2\nx =", "def add(a, b):\n    return a + b\n\ndef add(",
           '{"name": "Ada", "city": "Oslo"}\n{"name": "Ada", "city":']


@pytest.fixture(scope="session")
def cases(tokenizer: Any, target: TorchBackend) -> list[tuple[list[int], list[int]]]:
    from picker.engine.runtime import encode

    out = []
    for text in PROMPTS:
        ids = encode(tokenizer, text)
        out.append((ids, generate(target, ids, max_new_tokens=24).tokens))
    return out


@pytest.mark.parametrize("limit", [1, 2, 5, 13])
def test_max_new_tokens(strategy: Strategy, target: TorchBackend, cases: list[Any], limit: int) -> None:
    for ids, plain in cases:
        out = generate(target, ids, strategy.spec, max_new_tokens=limit)
        assert out.tokens == plain[:limit] and out.stop_reason == "max_tokens"


def test_eos_ends_the_output(strategy: Strategy, target: TorchBackend, cases: list[Any]) -> None:
    for ids, plain in cases:
        for at in (1, 6, 11):  # pretend the token plain decoding emits there is the EOS id
            eos = plain[at]
            cut = plain.index(eos) + 1
            out = generate(target, ids, strategy.spec, max_new_tokens=24, eos_token_id=eos)
            assert out.tokens == plain[:cut] and out.stop_reason == "eos"


def test_stop_strings_end_the_output(strategy: Strategy, target: TorchBackend, tokenizer: Any,
                                     cases: list[Any]) -> None:
    for ids, plain in cases:
        text = tokenizer.decode(plain)
        for start in (3, len(text) // 2):
            stop = text[start : start + 3]
            if not stop.strip():
                continue
            reference = generate(target, ids, max_new_tokens=24, stop=[stop], tokenizer=tokenizer)
            out = generate(target, ids, strategy.spec, max_new_tokens=24, stop=[stop],
                           tokenizer=tokenizer)
            assert out.tokens == reference.tokens and out.stop_reason == "stop"
            assert out.text is not None and stop in out.text

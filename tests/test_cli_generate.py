"""`specpick generate` on a tiny local model folder: JSON contract, strategies agree, bad input."""

from __future__ import annotations

import json
import string
from pathlib import Path

import pytest
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from typer.testing import CliRunner

from picker.cli.main import app
from tests.tiny import tiny_llama

RUNNER = CliRunner()
CHARS = string.printable[:95]  # one token per printable character


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A target and a draft folder, each with a character-level tokenizer.json."""
    vocab = {"<s>": 0, "</s>": 1, "<pad>": 2, **{c: i + 3 for i, c in enumerate(CHARS)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    out = []
    for name, seed, layers in (("target", 0, 2), ("draft", 1, 1)):
        folder = tmp_path_factory.mktemp(name)
        tiny_llama(seed, vocab=len(vocab), layers=layers, scale=30.0).save_pretrained(folder)
        tok.save(str(folder / "tokenizer.json"))
        out.append(folder)
    return out[0], out[1]


def run(*args: str) -> tuple[int, str, str]:
    result = RUNNER.invoke(app, ["generate", *args])
    return result.exit_code, result.stdout, result.stderr


def test_json_output_and_every_local_strategy_agrees_at_temperature_zero(folders: tuple[Path, Path]) -> None:
    target, draft = folders
    outputs = {}
    for strategy in ("none", "ngram", "vanilla", "lookahead"):
        code, out, err = run("--model", str(target), "--draft", str(draft), "--strategy", strategy,
                             "--prompt", "abcabcabc", "--max-new-tokens", "12", "--format", "json")
        assert code == 0, err
        doc = json.loads(out)
        assert set(doc) >= {"tokens", "text", "stats", "stop_reason"}
        assert set(doc["stats"]) >= {"steps", "drafted", "accepted", "tokens_per_second"}
        assert len(doc["tokens"]) == 12 and isinstance(doc["text"], str)
        outputs[strategy] = doc["tokens"]
    assert len({tuple(t) for t in outputs.values()}) == 1


def test_sampling_is_seeded_and_text_format_prints_text(folders: tuple[Path, Path]) -> None:
    target, _ = folders
    args = ("--model", str(target), "--strategy", "ngram", "--prompt", "hello", "--max-new-tokens", "8",
            "--temperature", "1", "--top-p", "0.9", "--seed", "4", "--format", "json")
    first, second = run(*args), run(*args)
    assert first[0] == 0 and json.loads(first[1])["tokens"] == json.loads(second[1])["tokens"]
    code, out, err = run("--model", str(target), "--prompt", "hello", "--max-new-tokens", "4")
    assert code == 0 and out.endswith("\n") and "tokens in" in err


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--strategy", "nope"), "--strategy"),
        (("--strategy", "ngram", "--set", "bogus"), "--set"),
        (("--strategy", "ngram", "--set", "no_such_knob=3"), "--set"),
        (("--set", "window=3"), "--set"),
        (("--strategy", "vanilla", "--draft", "/nonexistent"), "--draft"),
        (("--strategy", "vanilla"), "--draft"),  # no zoo draft beside a user's own target
        (("--model", "/nonexistent"), "--model"),
        (("--top-p", "0"), "--top-p"),
        (("--device", "tpu"), "--device"),
        (("--device", "cuda:99"), "--device"),  # no such device here (or no CUDA at all)
    ],
)
def test_bad_input_is_one_line_and_exit_2(folders: tuple[Path, Path], args: tuple[str, ...], needle: str) -> None:
    target, _ = folders
    base = ("--model", str(target)) if "--model" not in args else ()
    code, out, err = run(*base, "--prompt", "hi", *args)
    assert code == 2, (out, err)
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0]


def test_a_prompt_file_at_concurrency_gives_every_prompt_and_the_totals(folders: tuple[Path, Path],
                                                                       tmp_path: Path) -> None:
    """``--prompts FILE --concurrency 3``: five requests, three in flight; each output equals the
    same prompt's ``--prompt`` run (batching changes no token), and the totals add up."""
    target, draft = folders
    texts = ["abcabcabc", "hello", "x = 1\ny = 2\nx =", "zzz", "the cat sat on the"]
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"p{i}", "category": "code", "prompt": t}) + "\n"
                               for i, t in enumerate(texts)))
    code, out, err = run("--model", str(target), "--draft", str(draft), "--strategy", "vanilla",
                         "--prompts", str(prompts), "--concurrency", "3", "--max-new-tokens", "10", "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    gens, totals = doc["generations"], doc["totals"]
    assert [g["id"] for g in gens] == [f"p{i}" for i in range(len(texts))]
    assert totals["concurrency"] == 3 and totals["requests"] == len(texts)
    assert totals["new_tokens"] == sum(len(g["tokens"]) for g in gens)
    assert totals["steps"] < sum(g["stats"]["steps"] for g in gens)  # requests shared forwards
    for text, g in zip(texts, gens):
        code, one, err = run("--model", str(target), "--strategy", "none", "--prompt", text,
                             "--max-new-tokens", "10", "--format", "json")
        assert code == 0, err
        assert json.loads(one)["tokens"] == g["tokens"]
    code, _, err = run("--model", str(target), "--prompt", "a", "--prompts", str(prompts))
    assert code != 0 and "--prompt" in err

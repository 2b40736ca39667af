"""Chat-formatted prompts in the profiler: the model's chat template when it has one, raw otherwise.

The zoo's tokenizer has no template, so it is profiled raw and says so. A copy of the zoo target
whose ``tokenizer_config.json`` carries a small Jinja template stands in for an instruct model:
the reference loop must decode exactly the ids ``encode_prompt(..., template=True)`` renders,
every turn of a multi-turn prompt included, and a live server (llama.cpp, vLLM doubles on
loopback) must be sent those same ids. Each record and the summary say which rendering it was.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from picker.cli.main import app
from picker.errors import UserError
from picker.profiler.prompt_format import PromptRenderer, resolve_format
from picker.profiler.provenance import CHAT_TEMPLATE, MODEL_TEMPLATE
from picker.profiler.run import records_of
from picker.tasks import builtin_prompts, render_turn
from picker.tasks.encoding import encode_prompt, load_prompt_tokenizer
from picker.tasks.files import load_prompt_file
from picker.zoo.resolve import zoo_paths
from tests.test_endpoints import GOOD_METRICS, _vllm_with
from tests.test_endpoints_llamacpp import RATES, LlamaDouble, llama
from tests.test_profiler_sglang_double import SGLangDouble, vllm_reply

runner = CliRunner()
TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{{ eos_token }}{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")
QUIET = ["--quiet", "--no-plot"]


@pytest.fixture(scope="module")
def zoo_target() -> Path:
    return Path(zoo_paths(progress=False).target)


@pytest.fixture(scope="module")
def templated(zoo_target: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The zoo target with a chat template: an 'instruct model' of the zoo's weights."""
    out = tmp_path_factory.mktemp("templated") / "target"
    shutil.copytree(zoo_target, out)
    config = json.loads((out / "tokenizer_config.json").read_text())
    (out / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": TEMPLATE}))
    return out


@pytest.fixture(scope="module")
def turns_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("prompts") / "chat.jsonl"
    rows = [{"id": f"c{i}", "category": "chat", "turns": [f"What is {i} + {i}?", "And times two?"]} for i in range(2)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_the_format_follows_the_tokenizer_and_the_request(zoo_target: Path, templated: Path) -> None:
    zoo, inst = load_prompt_tokenizer(zoo_target), load_prompt_tokenizer(templated)
    assert (resolve_format("auto", zoo), resolve_format("raw", zoo)) == ("raw", "raw")
    assert (resolve_format("auto", inst), resolve_format("chat", inst), resolve_format("raw", inst)) == \
        ("chat_template", "chat_template", "raw")
    assert resolve_format("auto", None) == "raw"  # a live server without --model: text, as before
    with pytest.raises(UserError, match="no chat template"):
        resolve_format("chat", zoo)
    with pytest.raises(UserError, match="--model"):
        resolve_format("chat", None)
    # A raw built-in goes through the template too: an instruct model is served all traffic that way.
    p = builtin_prompts(["math"], 1)[0]
    ids = PromptRenderer(inst, "auto").payload(p, 0, [])
    assert ids == encode_prompt(inst, p, template=True)
    assert inst.decode(ids) == f"<|user|>{p.turns[0]}</s><|assistant|>"
    assert PromptRenderer(inst, "raw").payload(p, 0, []) == p.turns[0]


def _spy_on_generate(monkeypatch: pytest.MonkeyPatch) -> list[tuple[list[int], str]]:
    """Every (prompt ids, generated text) the reference loop decodes; the real loop runs."""
    from picker.engine import loop

    seen: list[tuple[list[int], str]] = []
    real = loop.generate

    def spy(target: Any, ids: Any, *args: Any, **kwargs: Any) -> Any:
        out = real(target, ids, *args, **kwargs)
        seen.append((list(ids), out.text or ""))
        return out

    monkeypatch.setattr(loop, "generate", spy)
    return seen


def _torch(model: Path | str, out: Path, *args: str) -> Any:
    return runner.invoke(app, ["profile", "--model", str(model), "--out", str(out), "--strategies", "ngram",
                               "--temperatures", "0", "--max-new-tokens", "6", "--no-early-stop",
                               "--limit-per-task", "2", *QUIET, *args])


def test_the_zoo_has_no_template_and_is_profiled_raw(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _spy_on_generate(monkeypatch)
    result = _torch("zoo", tmp_path, "--tasks", "code", "--no-plain")
    assert result.exit_code == 0, result.output
    tok = load_prompt_tokenizer(zoo_paths(progress=False).target)
    prompts = builtin_prompts(["code"], 2)
    assert [ids for ids, _ in seen] == [tok(p.turns[0])["input_ids"] for p in prompts]  # the text, as it is
    assert {r.extra["prompt_format"] for r in records_of(tmp_path)} == {"raw"}
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["run"]["prompt_format"] == "raw" and summary["run"]["source"]["prompt_format"] == "raw"
    assert {c["prompt_format"] for c in summary["cells"]} == {"raw"}
    assert summary["run"]["provenance"]["chat_template"] == CHAT_TEMPLATE
    refused = _torch("zoo", tmp_path / "chat", "--tasks", "code", "--prompt-format", "chat")
    assert refused.exit_code == 2 and "no chat template" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1


def test_a_templated_model_decodes_the_rendered_ids_every_turn(templated: Path, turns_file: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _spy_on_generate(monkeypatch)
    result = _torch(templated, tmp_path, "--prompts", str(turns_file))
    assert result.exit_code == 0, result.output
    tok = load_prompt_tokenizer(templated)
    prompts = load_prompt_file(str(turns_file), {})
    # Plain baseline and ngram each decode both turns of both prompts, in rounds of one prompt.
    assert len(seen) == 2 * 2 * 2
    for i, (ids, text) in enumerate(seen):
        if i % 2:
            continue
        p = prompts[i // 4]
        assert ids == encode_prompt(tok, p, 0, [], template=True)
        second, _ = seen[i + 1]
        assert second == encode_prompt(tok, p, 1, [text], template=True)  # the first answer inside
        assert tok.decode(second).startswith(f"<|user|>{p.turns[0]}</s><|assistant|>")
        assert tok.decode(second).endswith(f"<|user|>{p.turns[1]}</s><|assistant|>")
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert {c["prompt_format"] for c in summary["cells"] + summary["baselines"]} == {"chat_template"}
    assert summary["run"]["prompt_format"] == "chat_template"
    assert summary["run"]["provenance"]["chat_template"] == MODEL_TEMPLATE
    # --prompt-format raw keeps the old role tags on the same model, and says so.
    raw = _torch(templated, tmp_path / "raw", "--prompts", str(turns_file), "--prompt-format", "raw", "--no-plain")
    assert raw.exit_code == 0, raw.output
    assert {r.extra["prompt_format"] for r in records_of(tmp_path / "raw")} == {"raw"}
    assert seen[-1][0] == tok(render_turn(prompts[-1], 1, [seen[-2][1]]))["input_ids"]


def test_batched_reference_loop_renders_the_same_way(templated: Path, turns_file: Path, tmp_path: Path) -> None:
    result = _torch(templated, tmp_path, "--prompts", str(turns_file), "--concurrency", "2", "--no-plain")
    assert result.exit_code == 0, result.output
    records = records_of(tmp_path)
    assert records and all(r.source == "torch-batched" and r.extra["prompt_format"] == "chat_template"
                           for r in records)


def test_llamacpp_is_sent_the_templates_ids(templated: Path, turns_file: Path, tmp_path: Path) -> None:
    tok = load_prompt_tokenizer(templated)
    prompts = {p.id: p for p in load_prompt_file(str(turns_file), {})}
    with LlamaDouble(RATES) as server:
        result = llama(server.url, tmp_path, "--model", str(templated), "--strategies", "vanilla", "--prompts",
                       str(turns_file), "--temperatures", "0", "--max-new-tokens", "8", "--no-early-stop",
                       "--num-draft-tokens", "3", "--concurrency", "1")
        assert result.exit_code == 0, result.output
        log = list(server.log)[1:]  # the first request is the profiler's untimed warm-up
    assert len(log) == 2 * 2
    for p, (first, second) in zip(prompts.values(), zip(log[::2], log[1::2])):
        assert first["prompt"] == encode_prompt(tok, p, 0, [], template=True)
        # The double answers " tok" per token: the second turn carries that answer inside the template.
        assert second["prompt"] == encode_prompt(tok, p, 1, [" tok" * first["tokens"]], template=True)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["run"]["source"]["prompt_format"] == "chat_template"
    assert {c["prompt_format"] for c in summary["cells"]} == {"chat_template"}
    # Without --model the server gets the raw text, and the records say raw.
    with LlamaDouble(RATES) as server:
        result = llama(server.url, tmp_path / "raw", "--strategies", "vanilla", "--prompts", str(turns_file),
                       "--temperatures", "0", "--max-new-tokens", "8", "--num-draft-tokens", "3", "--concurrency", "1")
        assert result.exit_code == 0, result.output
        sent = [r["prompt"] for r in server.log][1:]  # the first request is the untimed warm-up
    assert sent[0] == render_turn(prompts["c0"], 0, []) and all(isinstance(s, str) for s in sent)
    assert {r.extra["prompt_format"] for r in records_of(tmp_path / "raw")} == {"raw"}


def test_vllm_is_sent_the_templates_ids(templated: Path, tmp_path: Path) -> None:
    tok = load_prompt_tokenizer(templated)
    bodies: list[dict[str, Any]] = []
    def completions(body: bytes) -> Any:
        bodies.append(json.loads(body))
        return vllm_reply(4)

    with _vllm_with(GOOD_METRICS, completions) as server:
        result = runner.invoke(app, ["profile", "--backend", "vllm", "--url", server.url, "--model", str(templated),
                                     "--out", str(tmp_path), "--strategies", "ngram", "--tasks", "math",
                                     "--limit-per-task", "2", "--temperatures", "0", "--no-early-stop",
                                     "--concurrency", "1", "--retries", "1", "--timeout", "30", *QUIET])
    assert result.exit_code == 0, result.output
    timed = bodies[1:]  # after the untimed warm-up
    assert [b["prompt"] for b in timed] == [encode_prompt(tok, p, template=True) for p in builtin_prompts(["math"], 2)]
    records = records_of(tmp_path)
    assert records and {r.extra["prompt_format"] for r in records} == {"chat_template"}
    assert json.loads((tmp_path / "summary.json").read_text())["cells"][0]["prompt_format"] == "chat_template"


def test_sglang_is_sent_the_templates_ids(templated: Path, turns_file: Path, tmp_path: Path) -> None:
    tok = load_prompt_tokenizer(templated)
    with SGLangDouble(rates=[0.5], steps=1) as server:
        result = runner.invoke(app, ["profile", "--backend", "sglang", "--url", server.url, "--model", str(templated),
                                     "--out", str(tmp_path), "--prompts", str(turns_file), "--temperatures", "0",
                                     "--max-new-tokens", "6", "--no-early-stop", "--concurrency", "1",
                                     "--retries", "1", "--timeout", "30", *QUIET])
        log = list(server.log)[1:]  # the first request is the profiler's untimed warm-up
    assert result.exit_code == 0, result.output
    p = load_prompt_file(str(turns_file), {})[0]
    assert log[0]["input_ids"] == encode_prompt(tok, p, 0, [], template=True)
    assert log[1]["input_ids"] == encode_prompt(tok, p, 1, [" tok" * log[0]["tokens"]], template=True)
    assert {r.extra["prompt_format"] for r in records_of(tmp_path)} == {"chat_template"}


def test_a_live_model_folder_without_a_tokenizer_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    result = runner.invoke(app, ["profile", "--backend", "vllm", "--url", "http://127.0.0.1:9", "--model",
                                 str(tmp_path / "empty"), "--out", str(tmp_path / "o"), "--strategies", "ngram",
                                 *QUIET])
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "--model" in result.stderr and "tokenizer" in result.stderr

"""``picker.tasks.encoding.encode_prompt``: the model's tokenizer decides special tokens and chat format."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from picker.tasks import Prompt, render_turn
from picker.tasks.encoding import chat_messages, encode_prompt, load_prompt_tokenizer
from picker.zoo.resolve import zoo_paths

# A template that writes its own BOS, so a second one added by the encoder would show.
TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{{ eos_token }}{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")
TWO_TURNS = Prompt("q", "chat", ("Hi?", "More?"), raw=False)


@pytest.fixture(scope="module")
def zoo_tokenizer() -> Any:
    return load_prompt_tokenizer(zoo_paths(progress=False).target)


@pytest.fixture(scope="module")
def templated(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The zoo tokenizer with a chat template in its ``tokenizer_config.json``."""
    src, out = zoo_paths(progress=False).target, tmp_path_factory.mktemp("templated")
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(src / name, out / name)
    config = json.loads((out / "tokenizer_config.json").read_text())
    (out / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": TEMPLATE}))
    return load_prompt_tokenizer(out)


def test_raw_prompt_gets_the_tokenizers_special_tokens_once(zoo_tokenizer: Any) -> None:
    ids = encode_prompt(zoo_tokenizer, Prompt("p", "code", ("def f(x):",)))
    assert ids == zoo_tokenizer("def f(x):")["input_ids"]  # what an engine given the text computes
    assert ids[0] == zoo_tokenizer.bos_token_id and ids.count(zoo_tokenizer.bos_token_id) == 1
    assert zoo_tokenizer.decode(ids[1:]) == "def f(x):"
    assert encode_prompt(zoo_tokenizer, "def f(x):") == ids


def test_chat_prompt_without_a_template_uses_the_profilers_role_tags(zoo_tokenizer: Any) -> None:
    assert zoo_tokenizer.chat_template is None
    ids = encode_prompt(zoo_tokenizer, TWO_TURNS, 1, [" Hello."])
    assert zoo_tokenizer.decode(ids, skip_special_tokens=True) == render_turn(TWO_TURNS, 1, [" Hello."])


def test_chat_prompt_goes_through_the_template_without_a_second_bos(templated: Any) -> None:
    ids = encode_prompt(templated, TWO_TURNS, 1, [" Hello."])
    assert templated.decode(ids) == "<s><|user|>Hi?</s><|assistant|> Hello.</s><|user|>More?</s><|assistant|>"
    assert ids.count(templated.bos_token_id) == 1 and ids[0] == templated.bos_token_id
    # A raw prompt is sent verbatim even when the tokenizer has a template.
    assert templated.decode(encode_prompt(templated, "x = 1")) == "<s>x = 1"


def test_turns_need_their_history() -> None:
    assert chat_messages(TWO_TURNS, 0, []) == [{"role": "user", "content": "Hi?"}]
    with pytest.raises(ValueError, match="needs 1 earlier"):
        chat_messages(TWO_TURNS, 1, [])


def test_loader_is_offline(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        load_prompt_tokenizer(tmp_path / "nothing-here")

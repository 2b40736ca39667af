"""A prompt's token ids, encoded once for every backend: the model's own tokenizer config decides.

The reference engine, transformers' ``generate`` and the live engines must see the same ids, or a
disagreement between them says nothing about the engines. So one function turns a
:class:`picker.tasks.Prompt` turn into ids, and it follows the model folder's tokenizer config
instead of rules of ours:

- special tokens (BOS, EOS) are the tokenizer's: ``tokenizer(text)`` with
  ``add_special_tokens=True``, which applies ``tokenizer_config.json`` (``add_bos_token`` ...)
  and ``tokenizer.json``'s post-processor, as the engines do when they get text;
- a chat-formatted prompt (``raw=False``: the multi-turn files, Spec-Bench) goes through the
  tokenizer's chat template when it has one, with the generation prompt added, and then no special
  tokens are added again (a template writes its own BOS); without a template it is rendered with
  the plain role tags of :func:`picker.tasks.render_turn`, as the live profilers send it;
- ``template=True`` renders every prompt through the template, raw ones too: an instruct model is
  served all its traffic that way, so the profiler measures it so (``picker.profiler.prompt_format``);
  ``template=False`` never uses it.

    >>> from picker.zoo.resolve import zoo_paths
    >>> from picker.tasks import Prompt
    >>> tok = load_prompt_tokenizer(zoo_paths(progress=False).target)
    >>> ids = encode_prompt(tok, Prompt("p", "code", ("def f(x):",)))
    >>> ids[0] == tok.bos_token_id and tok.decode(ids[1:]) == "def f(x):"
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from picker.tasks import Prompt, render_turn

__all__ = ["chat_messages", "encode_prompt", "has_chat_template", "load_prompt_tokenizer"]


def load_prompt_tokenizer(folder: Path | str) -> Any:
    """The folder's tokenizer through transformers (it reads ``tokenizer_config.json``), offline."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)


def chat_messages(prompt: Prompt, turn: int, history: Sequence[str]) -> list[dict[str, str]]:
    """The conversation up to ``turn``: user turns with the earlier generations between them."""
    if len(history) != turn:
        raise ValueError(f"turn {turn} needs {turn} earlier generations, got {len(history)}")
    messages: list[dict[str, str]] = []
    for text, reply in zip(prompt.turns, history):
        messages += [{"role": "user", "content": text}, {"role": "assistant", "content": reply}]
    messages.append({"role": "user", "content": prompt.turns[turn]})
    return messages


def has_chat_template(tokenizer: Any) -> bool:
    """Whether the tokenizer carries a chat template (an instruct model's; the zoo's has none)."""
    return bool(getattr(tokenizer, "chat_template", None))


def encode_prompt(tokenizer: Any, prompt: Prompt | str, turn: int = 0, history: Sequence[str] = (),
                  *, template: bool | None = None) -> list[int]:
    """Token ids of ``prompt``'s ``turn`` (after ``history``, the earlier turns' generations).

    ``tokenizer`` is a transformers tokenizer (:func:`load_prompt_tokenizer`). A ``str`` is a raw
    single-turn prompt. ``template``: None follows the prompt (the template for chat-formatted
    prompts, when there is one); True renders any prompt through it (ValueError without one);
    False never does.
    """
    if isinstance(prompt, str):
        prompt = Prompt("text", "chat", (prompt,))
    if template and not has_chat_template(tokenizer):
        raise ValueError("the tokenizer has no chat template")
    if template is None:
        template = not prompt.raw and has_chat_template(tokenizer)
    if template:
        # Rendered to text first, then encoded without special tokens: the template already wrote
        # the ones it wants, and adding BOS again would give the model a sequence it never saw.
        text = tokenizer.apply_chat_template(chat_messages(prompt, turn, history), tokenize=False,
                                             add_generation_prompt=True)
        return [int(t) for t in tokenizer(text, add_special_tokens=False)["input_ids"]]
    text = render_turn(prompt, turn, list(history))
    return [int(t) for t in tokenizer(text, add_special_tokens=True)["input_ids"]]

"""How the profiler renders a prompt's turn for the model: through its chat template, or raw.

An instruct model is served every request through its chat template, so acceptance measured on
raw text is acceptance on traffic it never sees. So with ``--prompt-format auto`` (the default)
every prompt -- built-in, file, each turn of a multi-turn one after the earlier generations -- is
rendered by the model's own template (``picker.tasks.encoding.encode_prompt(..., template=True)``)
when its tokenizer has one, and sent raw otherwise (the zoo has none). ``chat`` demands the
template; ``raw`` sends text as before (:func:`picker.tasks.render_turn`: verbatim single-turn
prompts, plain role tags between turns).

Every backend renders the same way: the torch backend decodes the rendered ids; a live server
gets those same ids (``--model DIR``: the served model's folder, whose tokenizer renders), so all
backends measure one prompt as one sequence. Without a local tokenizer a live server gets raw
text. Each record says which rendering it was measured under (``extra["prompt_format"]``:
``chat_template`` or ``raw``), and so does the summary.

    >>> from picker.tasks import Prompt
    >>> r = PromptRenderer(None, "auto")
    >>> r.format, r.payload(Prompt("p", "chat", ("Hi?", "More?"), raw=False), 1, [" Hello."])
    ('raw', 'User: Hi?\\nAssistant: Hello.\\nUser: More?\\nAssistant:')
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from picker.errors import UserError
from picker.tasks import Prompt, render_turn
from picker.tasks.encoding import encode_prompt, has_chat_template

REQUESTS = ("auto", "chat", "raw")  # --prompt-format
CHAT_TEMPLATE, RAW = "chat_template", "raw"  # what a record says it was measured under
PromptFormat = Literal["chat_template", "raw"]


def resolve_format(requested: str, tokenizer: Any | None) -> PromptFormat:
    """``--prompt-format`` against the tokenizer at hand (None: a live server with no ``--model``)."""
    if requested not in REQUESTS:
        raise UserError(f"must be one of {', '.join(REQUESTS)} (got {requested!r})", field="--prompt-format")
    templated = tokenizer is not None and has_chat_template(tokenizer)
    if requested == "chat" and not templated:
        why = ("no --model folder to render the template with: pass the served model's Hugging Face folder"
               if tokenizer is None else "the model's tokenizer has no chat template")
        raise UserError(f"chat needs a chat template; {why}", field="--prompt-format")
    return CHAT_TEMPLATE if templated and requested != "raw" else RAW


class PromptRenderer:
    """One run's rendering: ``format`` is resolved once, every turn goes through :meth:`payload`."""

    def __init__(self, tokenizer: Any | None, requested: str = "auto") -> None:
        self.tokenizer = tokenizer
        self.format: PromptFormat = resolve_format(requested, tokenizer)

    @property
    def templated(self) -> bool:
        return self.format == CHAT_TEMPLATE

    def ids(self, prompt: Prompt, turn: int, history: Sequence[str]) -> list[int]:
        """Token ids of the turn (needs a tokenizer): the template's rendering, or the raw text's."""
        if self.tokenizer is None:
            raise ValueError("no tokenizer to encode with")
        return encode_prompt(self.tokenizer, prompt, turn, history, template=self.templated)

    def payload(self, prompt: Prompt, turn: int, history: Sequence[str]) -> str | list[int]:
        """What a live server is sent: the template's ids, else the raw text (the server tokenizes it)."""
        return self.ids(prompt, turn, history) if self.templated else render_turn(prompt, turn, list(history))

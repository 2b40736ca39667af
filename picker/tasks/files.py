"""User prompt files: JSONL with ``prompt`` or ``turns`` and a ``category``, Spec-Bench included.

One JSON object per line::

    {"id": "a1", "category": "code", "prompt": "def fib(n):"}
    {"question_id": 81, "category": "writing", "turns": ["Write a travel blog post ...", "Rewrite it ..."]}

The second line is Spec-Bench's ``question.jsonl`` shape (``question_id``, ``category``,
``turns``). A category is mapped to a task type by the category map (``--category-map
writing=creative,coding=code``), then by :data:`SPEC_BENCH_CATEGORIES`, then as itself when it is
already a task type. Any problem is one :class:`~picker.errors.UserError` naming file, line and field.

    >>> parse_category_map("writing=creative, qa=chat")
    {'writing': 'creative', 'qa': 'chat'}
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from picker.errors import UserError
from picker.inputs.workload import TASK_TYPES
from picker.tasks import Prompt

# Spec-Bench's 13 categories (its question.jsonl: MT-bench's eight, then translation,
# summarization, qa, math_reasoning, rag) mapped to our task types; entries of --category-map win.
SPEC_BENCH_CATEGORIES: dict[str, str] = {
    "writing": "creative", "roleplay": "chat", "reasoning": "chat", "math": "math", "coding": "code",
    "extraction": "structured", "stem": "chat", "humanities": "chat", "translation": "translation",
    "summarization": "summarization", "qa": "chat", "math_reasoning": "math", "rag": "rag",
}
MAX_FILE_BYTES = 256 * 1024 * 1024  # a prompt file larger than this is a mistake, not a workload


def parse_category_map(text: str, *, field: str = "--category-map") -> dict[str, str]:
    """``cat=task,cat=task`` into a dict; every task must be a known task type."""
    out: dict[str, str] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        category, sep, task = (s.strip() for s in item.partition("="))
        if not sep or not category or not task:
            raise UserError(f"expected CATEGORY=TASK, got {item!r}", field=field)
        if task not in TASK_TYPES:
            raise UserError(f"{task!r} is not a task type; one of {', '.join(TASK_TYPES)}", field=field)
        out[category] = task
    return out


def load_prompt_file(path: str | Path, category_map: dict[str, str] | None = None) -> list[Prompt]:
    """Read a JSONL prompt file into prompts, in file order."""
    name = str(path)
    try:
        if Path(path).stat().st_size > MAX_FILE_BYTES:
            raise UserError(f"larger than {MAX_FILE_BYTES >> 20} MiB", file=name)
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError("file not found", file=name) from None
    except IsADirectoryError:
        raise UserError("is a directory; give a JSONL file", file=name) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read: {exc.__class__.__name__}", file=name) from None
    mapping = {**SPEC_BENCH_CATEGORIES, **(category_map or {})}
    prompts: list[Prompt] = []
    seen: dict[str, int] = {}
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        prompt = _parse_line(line, lineno, name, mapping)
        if prompt.id in seen:
            raise UserError(f"duplicate id {prompt.id!r} (first on line {seen[prompt.id]})",
                            file=name, field=f"line {lineno}: id")
        seen[prompt.id] = lineno
        prompts.append(prompt)
    if not prompts:
        raise UserError("no prompts (empty file)", file=name)
    return prompts


def _parse_line(line: str, lineno: int, name: str, mapping: dict[str, str]) -> Prompt:
    """One JSONL line into a :class:`Prompt`, or a UserError naming the line and field."""
    def bad(field: str, message: str) -> UserError:
        return UserError(message, file=name, field=f"line {lineno}: {field}")

    try:
        obj: Any = json.loads(line)
    except json.JSONDecodeError as exc:
        raise bad("json", f"malformed JSON at column {exc.colno}: {exc.msg}") from None
    if not isinstance(obj, dict):
        raise bad("json", f"expected an object, got {type(obj).__name__}")
    has_prompt, has_turns = "prompt" in obj, "turns" in obj
    if has_prompt == has_turns:
        raise bad("prompt", "give exactly one of 'prompt' (a string) and 'turns' (a list of strings)")
    if has_prompt:
        if not isinstance(obj["prompt"], str) or not obj["prompt"].strip():
            raise bad("prompt", "must be a non-empty string")
        turns: tuple[str, ...] = (obj["prompt"],)
    else:
        raw_turns = obj["turns"]
        if not isinstance(raw_turns, list) or not raw_turns:
            raise bad("turns", "must be a non-empty list of strings")
        for i, turn in enumerate(raw_turns):
            if not isinstance(turn, str) or not turn.strip():
                raise bad(f"turns[{i}]", "must be a non-empty string")
        turns = tuple(raw_turns)
    category = obj.get("category")
    if not isinstance(category, str) or not category.strip():
        raise bad("category", "missing or not a string (needed to pick the task type)")
    task = mapping.get(category, category if category in TASK_TYPES else None)
    if task is None:
        raise bad("category", f"no task type for {category!r}; map it, e.g. --category-map {category}=chat")
    raw_id = obj.get("id", obj.get("question_id", f"line-{lineno}"))
    if isinstance(raw_id, bool) or not isinstance(raw_id, (str, int)):
        raise bad("id", "must be a string or an integer")
    return Prompt(id=str(raw_id), task=task, turns=turns, category=category, raw=has_prompt)

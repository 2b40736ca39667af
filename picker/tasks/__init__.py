"""Prompts by task type: built-in deterministic sets, and user prompt files (JSONL, Spec-Bench).

A :class:`Prompt` is one unit the profiler measures: one or more user turns of one task type.
Single-turn prompts are sent as they are; multi-turn prompts are rendered turn by turn, each
turn's generation appended to the conversation before the next turn (:func:`render_turn`).

    >>> from picker.tasks import builtin_prompts
    >>> ps = builtin_prompts(["math", "code"], limit=2)
    >>> [(p.task, p.id) for p in ps]
    [('math', 'math-0'), ('math', 'math-1'), ('code', 'code-0'), ('code', 'code-1')]
    >>> ps == builtin_prompts(["math", "code"], limit=2)     # deterministic
    True

Task types are the workload profile's (``picker.inputs.workload.TASK_TYPES``), so measured cells line
up with a profile's task mix. Every task type except ``translation`` has a built-in set (no
parallel text ships with Python); prompt files may use any of them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from picker.inputs.workload import TASK_TYPES

# Sent in front of a turn when a prompt has several turns (the Spec-Bench / MT-bench shape). Plain
# role tags rather than one model's chat template: live endpoints get raw text through /generate
# and /v1/completions, and the zoo models were never trained on any template.
USER_TAG = "User: "
ASSISTANT_TAG = "\nAssistant:"


@dataclass(frozen=True)
class Prompt:
    """One measured unit: ``turns`` of user text for task type ``task``.

    ``raw`` prompts (built-ins, files with a ``prompt`` field) are sent verbatim; the others get
    the role tags of :func:`render_turn`. ``category`` is the file's own label (Spec-Bench's
    ``writing``, ``coding`` ...), kept for reports.
    """

    id: str
    task: str
    turns: tuple[str, ...]
    category: str = ""
    raw: bool = True

    def digest(self) -> str:
        """A short hash of the content: resumed runs check that a prompt id still means the same text."""
        h = hashlib.sha256(f"{self.task}\0{self.raw}\0".encode())
        for turn in self.turns:
            h.update(turn.encode() + b"\0")
        return h.hexdigest()[:16]


def render_turn(prompt: Prompt, turn: int, history: list[str]) -> str:
    """The text sent for ``turn``: earlier turns with their generations (``history``), then this one.

        >>> p = Prompt("q1", "chat", ("Hi?", "And then?"), raw=False)
        >>> render_turn(p, 1, [" Hello."])
        'User: Hi?\\nAssistant: Hello.\\nUser: And then?\\nAssistant:'
    """
    if prompt.raw and len(prompt.turns) == 1:
        return prompt.turns[0]
    if len(history) != turn:
        raise ValueError(f"turn {turn} needs {turn} earlier generations, got {len(history)}")
    parts = [f"{USER_TAG}{text}{ASSISTANT_TAG}{reply}" for text, reply in zip(prompt.turns, history)]
    parts.append(f"{USER_TAG}{prompt.turns[turn]}{ASSISTANT_TAG}")
    return "\n".join(parts)


def builtin_prompts(tasks: list[str] | tuple[str, ...], limit: int, seed: int = 0) -> list[Prompt]:
    """``limit`` prompts for each task type in ``tasks`` (in that order), the same on every call."""
    from picker.tasks.builtin import BUILDERS

    out: list[Prompt] = []
    for task in tasks:
        if task not in BUILDERS:
            raise KeyError(task)
        out.extend(BUILDERS[task](limit, seed))
    return out


def builtin_tasks() -> tuple[str, ...]:
    """Task types with a built-in prompt set, in the workload profile's order."""
    from picker.tasks.builtin import BUILDERS

    return tuple(t for t in TASK_TYPES if t in BUILDERS)


__all__ = ["ASSISTANT_TAG", "Prompt", "TASK_TYPES", "USER_TAG", "builtin_prompts", "builtin_tasks",
           "render_turn"]

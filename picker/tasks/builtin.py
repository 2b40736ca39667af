"""Built-in prompt sets per task type, made from text present on every Python install.

    >>> from picker.tasks.builtin import BUILDERS
    >>> p = BUILDERS["math"](1, 0)[0]
    >>> p.turns[0].startswith("Problem: compute")
    True

- ``chat``: questions about ``pydoc_data`` help topics, with the answer begun;
- ``code``: function signatures and docstrings from standard-library modules the zoo never trains
  on (so acceptance is not inflated by memorised training text), to complete;
- ``structured``: a sentence describing a record, to extract as JSON with given keys;
- ``math``: arithmetic problems to solve step by step;
- ``summarization`` / ``rag``: source text (help topics) the answer can copy from;
- ``creative``: story openings, meant for high temperature;
- ``agentic``: an agent's loop -- multi-turn transcripts of JSON tool calls whose results come
  back as the next turn, and code edits that restate a whole file -- where outputs repeat earlier
  outputs, across requests as well as within one (suffix decoding's home ground).

Each builder takes ``(limit, seed)`` and returns at most ``limit`` prompts (fewer only where the
source runs out: help topics give a few hundred paragraphs). The order is fixed by the seed,
never by the machine, so two runs with the same limit measure the same prompts.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import random
import re
import zlib
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

from picker.tasks import Prompt

# Disjoint from picker.zoo.corpus.STDLIB_MODULES (the zoo's training text); all present in 3.11-3.13.
CODE_MODULES: tuple[str, ...] = (
    "email.utils", "http.client", "http.cookiejar", "imaplib", "mailbox", "poplib", "pydoc",
    "sqlite3.dump", "ssl", "subprocess", "sysconfig", "tarfile", "urllib.parse", "urllib.request",
    "xml.dom.minidom", "zipfile",
)
SOURCE_CHARS = 1200   # summarization source / code prompt cap: fits a 512-token zoo context
PASSAGE_CHARS = 600   # each of the two RAG passages

_NAMES = ["Ada Lovelace", "Alan Turing", "Grace Hopper", "Maria Garcia", "Chen Wei", "Priya Patel",
          "Omar Haddad", "Sofia Rossi", "Yuki Tanaka", "Kwame Okafor", "Elena Novak", "Diego Silva"]
_CITIES = ["Berlin", "Lagos", "Lima", "Osaka", "Toronto", "Madrid", "Nairobi", "Oslo", "Pune", "Seoul"]
_ITEMS = ["keyboard", "monitor", "desk lamp", "notebook", "backpack", "headphones", "charger", "webcam"]
_FINDS = ["a brass key", "a map drawn in pencil", "a radio that hummed", "a door in the old wall",
          "a letter without a name", "a clock that ran backwards", "a seed that glowed"]
_TWISTS = ["nobody else could see it", "it remembered every owner", "it only worked at night",
           "the whole town had been waiting for it", "it was addressed to a stranger"]


def _rng(task: str, seed: int) -> random.Random:
    # crc32 of the task name: a stable per-task stream (hash() of a str is salted per process).
    return random.Random(seed * 1_000_003 + zlib.crc32(task.encode()))


def _pick(task: str, items: list[str], limit: int, seed: int, raw: bool = True) -> list[Prompt]:
    """Shuffle ``items`` with the task's seed and keep ``limit`` of them as prompts."""
    order = list(items)
    _rng(task, seed).shuffle(order)
    return [Prompt(id=f"{task}-{i}", task=task, turns=(text,), category=task, raw=raw)
            for i, text in enumerate(order[:limit])]


@lru_cache(maxsize=1)
def _topic_paragraphs() -> tuple[tuple[str, str], ...]:
    """(topic title, prose paragraph) pairs from ``pydoc_data``; grammar and code blocks skipped."""
    from pydoc_data.topics import topics

    out: list[tuple[str, str]] = []
    for key in sorted(topics):
        text = topics[key].strip()
        title = text.split("\n", 1)[0].strip()
        for para in re.split(r"\n\s*\n", text)[1:]:
            # Indented blocks are grammar or examples; short ones are headings or list stubs.
            if para[:1].isspace() or len(para) < 160 or set(para.strip()) <= set("*=-"):
                continue
            out.append((title, " ".join(para.split())))
    return tuple(out)


def _first_words(text: str, n: int) -> str:
    return " ".join(text.split()[:n])


def chat(limit: int, seed: int) -> list[Prompt]:
    """Questions about a help topic, the answer begun with the topic's own first words."""
    items = [f"Question: Can you explain {title} in Python?\nAnswer: {_first_words(para, 8)}"
             for title, para in _topic_paragraphs()]
    return _pick("chat", items, limit, seed)


def summarization(limit: int, seed: int) -> list[Prompt]:
    """A source paragraph group, then a summary that starts by quoting it (prompt lookup's home)."""
    items = []
    paras = _topic_paragraphs()
    for i in range(0, len(paras) - 2, 2):
        source = " ".join(p for _, p in paras[i:i + 3])[:SOURCE_CHARS]
        items.append(f"Text: {source}\n\nSummary of the text above: {_first_words(source, 5)}")
    return _pick("summarization", items, limit, seed)


def rag(limit: int, seed: int) -> list[Prompt]:
    """Two retrieved passages and a question answered from the second one."""
    paras = _topic_paragraphs()
    items = []
    for i in range(len(paras) - 7):
        (_, first), (title, second) = paras[i], paras[i + 7]  # 7 apart: usually another topic
        items.append(f"Passage 1: {first[:PASSAGE_CHARS]}\nPassage 2: {second[:PASSAGE_CHARS]}\n\n"
                     f"Question: Using the passages, describe {title}.\nAnswer: {_first_words(second, 4)}")
    return _pick("rag", items, limit, seed)


@lru_cache(maxsize=1)
def _functions() -> tuple[str, ...]:
    """Signature + docstring (+ first body line) of every documented top-level or method function."""
    out: list[str] = []
    for name in CODE_MODULES:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
            continue
        source = Path(spec.origin).read_text(encoding="utf-8")
        lines = source.splitlines(keepends=True)
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.FunctionDef) or ast.get_docstring(node) is None:
                continue
            body_start = node.body[1].lineno if len(node.body) > 1 else node.body[0].end_lineno
            if body_start is None:
                continue
            # Up to and including the first statement after the docstring: a start to continue from.
            text = "".join(lines[node.lineno - 1:body_start])
            if len(text) <= SOURCE_CHARS:
                out.append(_dedent(text))
    return tuple(out)


def _dedent(text: str) -> str:
    """Methods come indented; shift the block left so every prompt starts at column 0."""
    first = text.splitlines()[0]
    pad = len(first) - len(first.lstrip())
    return "".join(line[pad:] if line[:pad].isspace() else line for line in text.splitlines(keepends=True))


def code(limit: int, seed: int) -> list[Prompt]:
    """Complete a standard-library function from its signature and docstring."""
    return _pick("code", list(_functions()), limit, seed)


def structured(limit: int, seed: int) -> list[Prompt]:
    """Extract a described record as JSON; the output copies values from the sentence."""
    rng = _rng("structured-data", seed)
    items = []
    for _ in range(max(limit, 0)):
        name, city, item = rng.choice(_NAMES), rng.choice(_CITIES), rng.choice(_ITEMS)
        age, qty, price = rng.randint(18, 80), rng.randint(1, 9), round(rng.uniform(3, 300), 2)
        email = name.lower().replace(" ", ".") + "@example.com"
        record = {"name": name, "email": email, "age": age, "city": city,
                  "order": {"product": item, "quantity": qty, "unit_price": price}}
        text = (f"{name} ({email}), aged {age}, from {city}, ordered {qty} x {item} "
                f"at {price} each.")
        keys = ", ".join(record)
        head = json.dumps(record)[:12]  # begin the answer: the format is then unambiguous
        items.append(f"Text: {text}\nExtract the fields {keys} as JSON.\nJSON: {head}")
    return [Prompt(id=f"structured-{i}", task="structured", turns=(t,), category="structured")
            for i, t in enumerate(items)]


def math(limit: int, seed: int) -> list[Prompt]:
    """Arithmetic with precedence, to be solved in ``Step:`` lines (the zoo's math format)."""
    rng = _rng("math", seed)
    items = []
    for _ in range(max(limit, 0)):
        n = rng.randint(2, 4)
        nums = [rng.randint(1, 60) for _ in range(n)]
        ops = [rng.choice("+-*") for _ in range(n - 1)]
        expr = " ".join(f"{x} {o}" for x, o in zip(nums, ops)) + f" {nums[-1]}"
        items.append(f"Problem: compute {expr}.\nStep:")
    return [Prompt(id=f"math-{i}", task="math", turns=(t,), category="math") for i, t in enumerate(items)]


def creative(limit: int, seed: int) -> list[Prompt]:
    """Story openings: little to copy, many good continuations (run these at high temperature)."""
    items = [f"Write a short story.\nIn {city}, {name.split()[0]} found {find}, and {twist}. "
             for city in _CITIES for name in _NAMES for find in _FINDS for twist in _TWISTS]
    return _pick("creative", items, limit, seed)


_TOOLS = ("read_file", "search", "run_tests", "edit_file", "list_dir")
_MODULES = ("orders", "billing", "users", "events", "reports", "cart", "invoices", "shipping")
_FUNCS = ("parse_date", "total_price", "load_config", "send_email", "apply_discount", "format_name",
          "validate_sku", "round_amount")
_FAILS = ("AssertionError: expected 42, got 41", "KeyError: 'unit_price'", "TypeError: 'NoneType' object",
          "ValueError: invalid literal for int()", "ZeroDivisionError: division by zero")


def _call(tool: str, **args: object) -> str:
    return json.dumps({"tool": tool, "args": args})


def _tool_loop(rng: random.Random, i: int) -> Prompt:
    """Three turns of one agent fixing a failing test: each turn's result is the next user turn."""
    module, func = rng.choice(_MODULES), rng.choice(_FUNCS)
    path, test = f"src/{module}.py", f"tests/test_{module}.py"
    history = "\n".join([_call("list_dir", path="src"), _call("read_file", path=path),
                         _call("run_tests", path=test)])
    turns = (
        f"You are a coding agent. Reply with exactly one JSON tool call per turn, one of: {', '.join(_TOOLS)}.\n"
        f"Task: make {test} pass; the bug is in {func} in {path}.\nCalls so far:\n{history}\n"
        f"Result: 1 failed: test_{func} ({rng.choice(_FAILS)}).\nNext call:",
        f"Result: {path} read (48 lines); {func} is defined on line {rng.randint(5, 40)}.\nNext call:",
        f"Result: edit applied to {path}; {rng.randint(1, 3)} lines changed.\nNext call:",
    )
    return Prompt(id=f"agentic-{i}", task="agentic", turns=turns, category="agentic-tool-loop", raw=False)


def _code_edit(rng: random.Random, i: int) -> Prompt:
    """A small module and a rename: the answer restates the whole file with one name changed."""
    module, old, new = rng.choice(_MODULES), *rng.sample(_FUNCS, 2)
    body = (f"import json\n\n\ndef {old}(record):\n    \"\"\"Return the {module} value of one record.\"\"\"\n"
            f"    value = record.get(\"{module}\")\n    if value is None:\n        return 0\n    return value\n\n\n"
            f"def {old}_all(records):\n    return [{old}(r) for r in records]\n")
    text = (f"File src/{module}.py:\n{body}\nRename {old} to {new} everywhere and write the whole file again.\n"
            f"File src/{module}.py:\nimport json\n")
    return Prompt(id=f"agentic-{i}", task="agentic", turns=(text,), category="agentic-code-edit")


def agentic(limit: int, seed: int) -> list[Prompt]:
    """Agent loops (two in three) and whole-file edits: outputs that repeat across requests."""
    rng = _rng("agentic", seed)
    return [(_code_edit if i % 3 == 2 else _tool_loop)(rng, i) for i in range(max(limit, 0))]


BUILDERS: dict[str, Callable[[int, int], list[Prompt]]] = {
    "chat": chat, "code": code, "structured": structured, "math": math,
    "summarization": summarization, "rag": rag, "creative": creative, "agentic": agentic,
}

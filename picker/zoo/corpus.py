"""A deterministic multi-domain corpus made only from text present on every machine.

Four domains, each split into train and held-out documents:

- ``code``: Python standard-library sources, from a fixed sorted module list (never the machine's
  extras), cut at top-level statement boundaries;
- ``prose``: the English help topics shipped in ``pydoc_data.topics``;
- ``json``: generated records with realistic keys and values (structured output);
- ``math``: generated arithmetic with worked steps (``12 + 7 * 3`` → ``7 * 3 = 21`` → ``33``).

The same (``chars_per_domain``, ``seed``) gives the same corpus on the same Python version; the
stdlib text differs between Python versions, so callers hash :meth:`Corpus.digest`, not the inputs.

    >>> corpus = build_corpus(chars_per_domain=20_000, heldout_chars=4_000, seed=0)
    >>> sorted(corpus.train)
    ['code', 'json', 'math', 'prose']
    >>> corpus.digest() == build_corpus(20_000, 4_000, seed=0).digest()
    True
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

# Bump when the text a given (size, seed) produces changes; it is part of every zoo recipe hash.
CORPUS_VERSION = 1

DOMAINS: tuple[str, ...] = ("code", "prose", "json", "math")

# Pure-Python modules present in CPython 3.11-3.13; sorted so the order never depends on the machine.
STDLIB_MODULES: tuple[str, ...] = (
    "argparse", "ast", "base64", "bisect", "calendar", "cmd", "codecs", "collections", "colorsys",
    "configparser", "contextlib", "copy", "csv", "dataclasses", "datetime", "difflib", "dis",
    "enum", "filecmp", "fileinput", "fnmatch", "fractions", "ftplib", "functools", "getopt",
    "gettext", "glob", "graphlib", "gzip", "heapq", "hmac", "html", "inspect", "ipaddress",
    "json.decoder", "json.encoder", "keyword", "linecache", "locale", "logging", "mimetypes",
    "numbers", "operator", "optparse", "pickle", "pkgutil", "platform", "plistlib", "pprint",
    "queue", "quopri", "random", "reprlib", "sched", "secrets", "selectors", "shlex", "shutil",
    "smtplib", "socketserver", "statistics", "string", "tabnanny", "tempfile", "textwrap",
    "threading", "timeit", "tokenize", "trace", "traceback", "types", "typing", "uuid",
    "warnings", "wave", "weakref", "zipapp",
)

# Documents are cut to roughly this many characters: long enough for context, short enough to shuffle.
DOC_CHARS = 1500


@dataclass(frozen=True)
class Corpus:
    """Train and held-out documents per domain; the text is the whole state."""

    train: dict[str, list[str]]
    heldout: dict[str, list[str]]

    def digest(self) -> str:
        """SHA-256 over every document, in order: the corpus's identity in recipe hashes."""
        h = hashlib.sha256(f"v{CORPUS_VERSION}".encode())
        for split in (self.train, self.heldout):
            for domain in sorted(split):
                for doc in split[domain]:
                    h.update(domain.encode() + b"\0" + doc.encode() + b"\0")
        return h.hexdigest()

    def chars(self, split: str = "train") -> dict[str, int]:
        """Characters per domain in one split (``train`` or ``heldout``)."""
        docs = self.train if split == "train" else self.heldout
        return {d: sum(len(t) for t in docs[d]) for d in docs}


def build_corpus(chars_per_domain: int, heldout_chars: int, seed: int) -> Corpus:
    """Build the corpus: about ``chars_per_domain`` train and ``heldout_chars`` held-out text each.

    Held-out documents are drawn first from a seeded shuffle, so they never reach training. The
    finite domains (code, prose) give what they have when asked for more.
    """
    sources: dict[str, Callable[[random.Random], list[str]]] = {
        "code": lambda _rng: _code_documents(),
        "prose": lambda _rng: _prose_documents(),
        "json": lambda rng: _generated(rng, _json_document, chars_per_domain + heldout_chars),
        "math": lambda rng: _generated(rng, _math_document, chars_per_domain + heldout_chars),
    }
    train: dict[str, list[str]] = {}
    heldout: dict[str, list[str]] = {}
    for i, domain in enumerate(DOMAINS):
        rng = random.Random(seed * 1000 + i)
        docs = sources[domain](rng)
        rng.shuffle(docs)
        heldout[domain], rest = _take(docs, heldout_chars)
        train[domain], _ = _take(rest, chars_per_domain)
    return Corpus(train=train, heldout=heldout)


def _take(docs: list[str], budget: int) -> tuple[list[str], list[str]]:
    """Split ``docs`` after the first prefix that reaches ``budget`` characters."""
    total = 0
    for n, doc in enumerate(docs):
        if total >= budget:
            return docs[:n], docs[n:]
        total += len(doc)
    return docs, []


def _pack_blocks(blocks: Iterator[str], limit: int = DOC_CHARS) -> list[str]:
    """Join consecutive blocks into documents of about ``limit`` characters."""
    docs: list[str] = []
    current = ""
    for block in blocks:
        if current and len(current) + len(block) > limit:
            docs.append(current)
            current = ""
        current += block
    if current.strip():
        docs.append(current)
    return docs


def _code_documents() -> list[str]:
    """Stdlib sources cut before top-level statements (a new ``def``/``class``/name at column 0)."""
    docs: list[str] = []
    for name in STDLIB_MODULES:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
            continue  # absent on this Python; the corpus digest records the difference
        source = Path(spec.origin).read_text(encoding="utf-8")
        blocks = re.split(r"(?m)^(?=\S)", source)
        docs.extend(_pack_blocks(iter(b for b in blocks if b)))
    return docs


def _prose_documents() -> list[str]:
    """``pydoc_data`` topics cut at paragraph boundaries, with the topic name as a heading."""
    from pydoc_data.topics import topics

    docs: list[str] = []
    for key in sorted(topics):
        paragraphs = re.split(r"(?<=\n\n)", topics[key].strip() + "\n\n")
        blocks = iter([f"{key}\n\n", *paragraphs])
        docs.extend(_pack_blocks(blocks))
    return docs


def _generated(rng: random.Random, make: Callable[[random.Random], str], chars: int) -> list[str]:
    """Draw documents from ``make`` until they hold ``chars`` characters."""
    docs: list[str] = []
    total = 0
    while total < chars:
        docs.append(make(rng))
        total += len(docs[-1])
    return docs


_FIRST = ["Ada", "Alan", "Grace", "Linus", "Maria", "Chen", "Priya", "Omar", "Sofia", "Yuki",
          "Lars", "Amara", "Diego", "Fatima", "Ivan", "Noor", "Elena", "Kwame", "Mei", "Tomas"]
_LAST = ["Lovelace", "Turing", "Hopper", "Garcia", "Nguyen", "Smith", "Patel", "Kim", "Rossi",
         "Okafor", "Novak", "Silva", "Haddad", "Berg", "Tanaka", "Moreau", "Kowalski", "Reyes"]
_CITIES = ["Berlin", "Lagos", "Lima", "Osaka", "Toronto", "Madrid", "Nairobi", "Oslo", "Pune",
           "Seoul", "Austin", "Lyon", "Krakow", "Porto", "Accra", "Hanoi"]
_PRODUCTS = ["keyboard", "monitor", "desk lamp", "notebook", "backpack", "headphones", "mug",
             "water bottle", "charger", "webcam", "chair", "stylus", "router", "speaker"]
_TAGS = ["new", "sale", "popular", "eco", "premium", "gift", "limited", "bundle", "refurbished"]
_STATUS = ["pending", "paid", "shipped", "delivered", "cancelled", "refunded"]
_EVENTS = ["login", "logout", "page_view", "add_to_cart", "checkout", "search", "signup"]


def _person(rng: random.Random) -> dict[str, object]:
    first, last = rng.choice(_FIRST), rng.choice(_LAST)
    return {
        "id": rng.randint(1000, 99999),
        "name": f"{first} {last}",
        "email": f"{first.lower()}.{last.lower()}@example.com",
        "age": rng.randint(18, 80),
        "city": rng.choice(_CITIES),
        "active": rng.random() < 0.8,
        "tags": sorted(rng.sample(_TAGS, rng.randint(0, 3))),
    }


def _order(rng: random.Random) -> dict[str, object]:
    items = []
    for _ in range(rng.randint(1, 4)):
        qty, price = rng.randint(1, 5), round(rng.uniform(2, 300), 2)
        items.append({"sku": f"SKU-{rng.randint(100, 999)}", "product": rng.choice(_PRODUCTS),
                      "quantity": qty, "unit_price": price})
    total = round(sum(i["quantity"] * i["unit_price"] for i in items), 2)  # type: ignore[operator]
    return {
        "order_id": f"ORD-{rng.randint(10000, 99999)}",
        "customer_id": rng.randint(1000, 99999),
        "status": rng.choice(_STATUS),
        "created_at": f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T"
                      f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00Z",
        "items": items,
        "total": total,
        "currency": rng.choice(["EUR", "USD", "GBP", "JPY"]),
    }


def _event(rng: random.Random) -> dict[str, object]:
    return {
        "event": rng.choice(_EVENTS),
        "user_id": rng.randint(1000, 99999),
        "timestamp": 1_700_000_000 + rng.randint(0, 30_000_000),
        "properties": {"path": f"/{rng.choice(_PRODUCTS).replace(' ', '-')}",
                       "duration_ms": rng.randint(5, 5000),
                       "referrer": rng.choice([None, "search", "email", "social"])},
    }


def _json_document(rng: random.Random) -> str:
    """One to four records of one kind, compact or indented, as a JSON array or JSON lines."""
    make = rng.choice([_person, _order, _event])
    records = [make(rng) for _ in range(rng.randint(1, 4))]
    if rng.random() < 0.5:
        return json.dumps(records, indent=2) + "\n"
    return "".join(json.dumps(r) + "\n" for r in records)


def _math_document(rng: random.Random) -> str:
    """A few problems, each an expression or a word problem, solved step by step."""
    parts = [_expression_problem(rng) if rng.random() < 0.7 else _word_problem(rng)
             for _ in range(rng.randint(2, 5))]
    return "\n".join(parts) + "\n"


def _expression_problem(rng: random.Random) -> str:
    """``a op b op c ...`` with precedence shown: products first, then left to right."""
    n = rng.randint(2, 4)
    nums = [rng.randint(1, 99 if n < 4 else 30) for _ in range(n)]
    ops = [rng.choice("+-*") for _ in range(n - 1)]
    expr = " ".join(f"{x} {o}" for x, o in zip(nums, ops)) + f" {nums[-1]}"
    lines = [f"Problem: compute {expr}."]
    vals, rest = [nums[0]], []
    for o, x in zip(ops, nums[1:]):  # fold products first, recording each step
        if o == "*":
            lines.append(f"Step: {vals[-1]} * {x} = {vals[-1] * x}")
            vals[-1] *= x
        else:
            rest.append(o)
            vals.append(x)
    acc = vals[0]
    for o, x in zip(rest, vals[1:]):
        new = acc + x if o == "+" else acc - x
        lines.append(f"Step: {acc} {o} {x} = {new}")
        acc = new
    lines.append(f"Answer: {acc}")
    return "\n".join(lines) + "\n"


def _word_problem(rng: random.Random) -> str:
    """A shopping problem in words: count times price, plus a fee, minus a discount."""
    name, item = rng.choice(_FIRST), rng.choice(_PRODUCTS)
    count, price, fee, off = (rng.randint(2, 9), rng.randint(3, 60), rng.randint(1, 15),
                              rng.randint(1, 20))
    cost = count * price
    return (f"Problem: {name} buys {count} items of type {item} at {price} dollars each, pays a "
            f"{fee} dollar delivery fee and gets {off} dollars off. What is the total?\n"
            f"Step: {count} * {price} = {cost}\n"
            f"Step: {cost} + {fee} = {cost + fee}\n"
            f"Step: {cost + fee} - {off} = {cost + fee - off}\n"
            f"Answer: {cost + fee - off}\n")

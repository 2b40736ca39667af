"""Read user files (YAML, and the JSON a profile points at) defensively, failing with one clear line.

Everything here raises :class:`picker.errors.UserError` naming the file: missing or unreadable
paths, directories and other non-regular files, empty files, files over ``MAX_BYTES``, bytes that
are not UTF-8, malformed YAML (with line and column), duplicate mapping keys, alias bombs, and a
top level that is not a mapping where one is required.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "p.yaml"
    >>> _ = p.write_text("name: demo\\nsizes: [1, 2]\\n")
    >>> load_yaml_file(p, require_mapping=True)
    {'name': 'demo', 'sizes': [1, 2]}

Parsing uses a subclass of PyYAML's ``SafeLoader`` (never the full loader, so no Python objects
are built from tags). Aliases (``*name``) are allowed, but the document is measured with every
alias expanded before anything is constructed, and refused above ``MAX_NODES`` nodes. That stops
"billion laughs" documents, whose aliases nest to expand a few hundred bytes into billions of
nodes: PyYAML shares aliased nodes, so loading them is cheap, but anything that then walks the
data (validation, printing, json.dumps) does the full expansion.

Pydantic's reports are turned into the same form by :func:`user_error_from_validation`, one line
per problem (``file: dotted.field[0].path: message``, listing allowed values and field names), and
:func:`fail_at` lets a model-level validator blame one field.
"""

from __future__ import annotations

import json
import os
import re
import stat
import types
import typing
from pathlib import Path
from typing import Any, NoReturn

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from picker.errors import UserError, UserErrors

MAX_BYTES = 1 << 20           # 1 MiB: a workload profile is a few KiB; anything bigger is a mistake
MAX_NODES = 100_000           # expanded YAML nodes; a profile has a few hundred
MAX_FLOW_DEPTH = 100          # '[' / '{' nesting; PyYAML's scanner is quadratic in it
_MERGE_TAG = "tag:yaml.org,2002:merge"


class _StrictSafeLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys instead of silently keeping the last one."""

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[object, Node] = {}
        for key_node, _value_node in node.value:
            # Merge keys ('<<: *base') may legitimately repeat keys that the mapping overrides.
            if key_node.tag == _MERGE_TAG:
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:  # unhashable key: the base class reports it with its own message
                continue
            if first is not None:
                raise ConstructorError(
                    None, None,
                    f"duplicate key {key!r} (first defined at line {first.start_mark.line + 1})",
                    key_node.start_mark,
                )
            seen[key] = key_node
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping


def read_text_file(
    path: str | os.PathLike[str], *, max_bytes: int = MAX_BYTES, what: str = "file"
) -> str:
    """Return the UTF-8 text of a regular, non-empty file of at most ``max_bytes`` bytes.

    ``what`` names the file's role in messages (e.g. "Hugging Face config").
    """
    p = Path(path)
    name = str(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise UserError(f"{what} not found", file=name) from None
    except NotADirectoryError:
        raise UserError(f"{what} not found (a parent in the path is not a directory)",
                        file=name) from None
    except OSError as exc:
        raise UserError(f"cannot access {what}: {exc.strerror or exc}", file=name) from None
    if stat.S_ISDIR(st.st_mode):
        raise UserError(f"is a directory, expected a {what}", file=name)
    if not stat.S_ISREG(st.st_mode):
        # FIFOs and devices: reading them could block forever or never end.
        raise UserError(f"not a regular file, expected a {what}", file=name)
    if st.st_size > max_bytes:
        raise UserError(f"{what} is {st.st_size} bytes, over the {_human(max_bytes)} limit", file=name)
    try:
        with p.open("rb") as fh:
            data = fh.read(max_bytes + 1)  # the file may have grown since stat()
    except PermissionError:
        raise UserError(f"cannot read {what}: permission denied", file=name) from None
    except OSError as exc:
        raise UserError(f"cannot read {what}: {exc.strerror or exc}", file=name) from None
    if len(data) > max_bytes:
        raise UserError(f"{what} is over the {_human(max_bytes)} limit", file=name)
    if not data.strip():
        raise UserError(f"{what} is empty", file=name)
    try:
        # utf-8-sig: editors on some platforms prepend a byte-order mark; it is not content.
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise UserError(
            f"not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start}, line {line}); "
            "save the file as UTF-8",
            file=name,
        ) from None


def load_yaml_file(
    path: str | os.PathLike[str],
    *,
    require_mapping: bool = False,
    max_bytes: int = MAX_BYTES,
    max_nodes: int = MAX_NODES,
) -> object:
    """Parse one YAML document safely; see the module docstring for everything it refuses."""
    name = str(path)
    text = read_text_file(path, max_bytes=max_bytes, what="file")
    if _flow_depth(text) > MAX_FLOW_DEPTH:
        raise UserError(f"invalid YAML: brackets nested more than {MAX_FLOW_DEPTH} deep", file=name)
    try:
        loader = _StrictSafeLoader(text)  # the reader checks for control characters right here
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        raise UserError(
            f"invalid YAML at line {line}: character #x{exc.character:04x} is not allowed in YAML "
            "(control characters must be escaped inside double quotes)",
            file=name,
        ) from None
    try:
        node = loader.get_single_node()
        if node is None:
            raise UserError("file is empty (no YAML document, only comments or blank lines)", file=name)
        _check_expanded_size(node, max_nodes, name)
        data = loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        raise UserError(_describe_yaml_error(exc), file=name) from None
    except yaml.YAMLError as exc:  # e.g. ReaderError for control characters; carries no mark
        raise UserError(f"invalid YAML: {_one_line(str(exc))}", file=name) from None
    except RecursionError:  # PyYAML composes and constructs recursively: '[[[[...' exhausts the stack
        raise UserError("invalid YAML: nested too deeply", file=name) from None
    finally:
        loader.dispose()
    if data is None:
        raise UserError("file is empty (the YAML document is null)", file=name)
    if require_mapping and not isinstance(data, dict):
        raise UserError(f"expected a mapping (key: value pairs) at the top level, got {_kind(data)}",
                        file=name)
    return data


def load_yaml_mapping(path: str | os.PathLike[str]) -> dict[str, object]:
    """:func:`load_yaml_file` for files whose top level must be a mapping."""
    data = load_yaml_file(path, require_mapping=True)
    assert isinstance(data, dict)  # guaranteed by require_mapping
    return data


def load_json_mapping(path: str | os.PathLike[str], *, what: str = "JSON file") -> dict[str, object]:
    """Read a JSON object from a file with the same guards as YAML (size, UTF-8, emptiness)."""
    name = str(path)
    text = read_text_file(path, what=what)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        raise UserError(f"invalid JSON at {where}: {exc.msg}", file=name) from None
    except RecursionError:
        raise UserError("invalid JSON: nested too deeply", file=name) from None
    if not isinstance(data, dict):
        raise UserError(f"expected a JSON object at the top level, got {_kind(data)}", file=name)
    return data


def _flow_depth(text: str) -> int:
    """Deepest '[' / '{' nesting, counting brackets inside quotes too (an upper bound).

    Checked before parsing because PyYAML's scanner rescans every open flow level on each token:
    a few thousand nested brackets take seconds before its recursion limit is even reached.
    """
    depth = deepest = 0
    for ch in re.sub(r"[^\[\]{}]", "", text):
        depth = depth + 1 if ch in "[{" else max(depth - 1, 0)
        deepest = max(deepest, depth)
    return deepest


def _check_expanded_size(root: Node, max_nodes: int, name: str) -> None:
    """Count nodes with aliases expanded, stopping as soon as the budget is spent.

    The walk is bounded by ``max_nodes`` steps whatever the document, and it also ends on
    recursive anchors ('&a [*a]'), which would otherwise expand forever.
    """
    count = 0
    saw_alias = False
    seen_ids: set[int] = set()
    stack: list[Node] = [root]
    while stack:
        node = stack.pop()
        count += 1
        if id(node) in seen_ids:
            saw_alias = True  # the composer hands back the same node object for every alias
        seen_ids.add(id(node))
        if count > max_nodes:
            if saw_alias:
                raise UserError(
                    f"YAML aliases expand to more than {max_nodes} nodes; refusing a possible "
                    "alias bomb (write the repeated parts out, or use fewer '*' aliases)",
                    file=name,
                )
            raise UserError(f"YAML document has more than {max_nodes} nodes", file=name)
        if isinstance(node, SequenceNode):
            stack.extend(node.value)
        elif isinstance(node, MappingNode):
            for key_node, value_node in node.value:
                stack.append(key_node)
                stack.append(value_node)
        else:
            assert isinstance(node, ScalarNode)


# --------------------------------------------------------------------------- pydantic errors -> one line

_TYPE_MESSAGES = {   # pydantic error type -> our wording (pydantic's names internal classes)
    "missing": "required field is missing",
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_type": "must be a string",
    "model_type": "must be a mapping (key: value pairs)",
    "model_attributes_type": "must be a mapping (key: value pairs)",
    "dict_type": "must be a mapping (key: value pairs)",
    "tuple_type": "must be a list",
    "list_type": "must be a list",
    "string_too_short": "must not be empty",
}


_BOUND_OPS = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}


def fail_at(loc: tuple[str | int, ...], message: str, value: object) -> NoReturn:
    """Raise a validation error at ``loc`` (relative to the model being validated).

    Use it in a model-level validator when the fault belongs to one field, so the reported path
    names that field instead of the whole section.
    """
    fail_at_many([(loc, message, value)])


def fail_at_many(problems: list[tuple[tuple[str | int, ...], str, object]]) -> NoReturn:
    """:func:`fail_at` for several fields at once: each ``(loc, message, value)`` is its own error."""
    details = [InitErrorDetails(type=PydanticCustomError("value_error", message), loc=loc, input=value)
               for loc, message, value in problems]
    raise ValidationError.from_exception_data("profile", details)


def user_error_from_validation(
    exc: ValidationError, *, file: str | None, root: type[BaseModel]
) -> UserError:
    """Turn pydantic's report into one line per problem: the dotted path and what is allowed.

    One problem gives a :class:`UserError`, several a :class:`UserErrors` (all of them, in the order
    pydantic found them, repeated lines dropped), so the user fixes everything in one pass.
    """
    errors: list[UserError] = []
    seen: set[str] = set()
    found = exc.errors(include_url=False)
    for err in found:
        loc = tuple(err["loc"])
        if err["type"] == "too_short" and any(tuple(o["loc"])[:len(loc)] == loc and len(o["loc"]) > len(loc)
                                              for o in found):
            continue  # a list emptied by its own items' errors: those errors say it
        one = _one_error(err, file=file, root=root)
        if str(one) not in seen:
            seen.add(str(one))
            errors.append(one)
    return errors[0] if len(errors) == 1 else UserErrors(errors)


def _one_error(err: Any, *, file: str | None, root: type[BaseModel]) -> UserError:
    loc, kind, value = tuple(err["loc"]), err["type"], err.get("input")
    ctx: dict[str, Any] = err.get("ctx") or {}
    if kind == "literal_error":
        allowed = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
        message = f"must be one of {', '.join(allowed)} (got {_show(value)})"
    elif kind == "extra_forbidden":
        fields = _fields_at(root, loc[:-1])
        message = "unknown field" + (f"; allowed: {', '.join(fields)}" if fields else "")
    elif kind == "missing":
        message = _TYPE_MESSAGES[kind]
    elif kind in ("value_error", "assertion_error"):
        message = str(err["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
    elif kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        op = _BOUND_OPS[kind]
        bound = next(iter(ctx.values()), "?")
        message = f"must be {op} {bound} (got {_show(value)})"
    elif kind == "too_short":
        message = f"must have at least {ctx.get('min_length', 1)} item(s)"
    else:
        base = _TYPE_MESSAGES.get(kind) or str(err["msg"])
        message = f"{base[:1].lower()}{base[1:]} (got {_show(value)})"
    return UserError(_one_line(message), file=file, field=_dotted(loc) or None)


def _dotted(loc: tuple[object, ...]) -> str:
    out = ""
    for part in loc:
        if part == "[key]":  # pydantic marks dict-key errors with this extra component
            continue
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _fields_at(root: type[BaseModel], loc: tuple[object, ...]) -> list[str]:
    """Names (aliases where set) of the fields of the model found at ``loc`` under ``root``."""
    tp: Any = root
    for part in loc:
        tp = _unwrap(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            field = next((f for n, f in tp.model_fields.items() if part in (n, f.alias)), None)
            if field is None:
                return []
            tp = field.annotation
        elif typing.get_origin(tp) in (list, tuple, dict):
            tp = typing.get_args(tp)[-1 if typing.get_origin(tp) is dict else 0]
        else:
            return []
    tp = _unwrap(tp)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [f.alias or n for n, f in tp.model_fields.items() if not f.exclude]  # excluded: internal
    return []


def _unwrap(tp: Any) -> Any:
    """Strip Annotated[...] and Optional[...] down to the one real type."""
    while True:
        if typing.get_origin(tp) is typing.Annotated:
            tp = typing.get_args(tp)[0]
            continue
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if typing.get_origin(tp) in (typing.Union, types.UnionType) and len(args) == 1:
            tp = args[0]
            continue
        return tp


def _show(value: object) -> str:
    if isinstance(value, (dict, list, tuple)):
        return _kind(list(value) if isinstance(value, tuple) else value)
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]  # as the YAML was written
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _describe_yaml_error(exc: yaml.MarkedYAMLError) -> str:
    mark = exc.problem_mark or exc.context_mark
    problem = exc.problem or exc.context or "syntax error"
    # Parser contexts read "while parsing a block mapping" and add noise; composer contexts such as
    # "expected a single document in the stream" are the actual explanation.
    if exc.problem and exc.context and not exc.context.startswith("while"):
        problem = f"{exc.context}, {exc.problem}"
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    # The fault is often where a bracket or block opened, lines before PyYAML notices: say where.
    cm = exc.context_mark
    if exc.context and exc.context.startswith("while") and cm is not None and cm is not mark:
        problem = f"{problem} ({exc.context} at line {cm.line + 1}, column {cm.column + 1})"
    kind = "invalid YAML"
    if isinstance(exc, ConstructorError) and problem.startswith("duplicate key"):
        kind = "invalid mapping"
    return f"{kind}{where}: {_one_line(problem)}"


def _kind(value: object) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return f"a {type(value).__name__}"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _human(n: int) -> str:
    return f"{n >> 20} MiB" if n % (1 << 20) == 0 else f"{n} bytes"

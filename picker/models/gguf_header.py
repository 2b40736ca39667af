"""A small reader for the GGUF v3 header: magic, version, metadata key/values, tensor infos.

Written here (not the ``gguf`` package) so that verifying a fetched file needs nothing beyond
the standard library, and so a damaged or foreign file ends as one :class:`GGUFError` line
instead of a crash deep in a third-party parser. Only the header is read, never tensor data.

    >>> import io, struct
    >>> raw = b"GGUF" + struct.pack("<IQQ", 3, 0, 1)
    >>> raw += struct.pack("<Q", 20) + b"general.architecture" + struct.pack("<IQ", 8, 5) + b"qwen2"
    >>> header = read_header(io.BytesIO(raw))
    >>> header.version, header.metadata["general.architecture"], header.tensor_count
    (3, 'qwen2', 0)

Layout (little-endian, https://github.com/ggml-org/ggml/blob/master/docs/gguf.md): ``b"GGUF"``,
``uint32 version``, ``uint64 tensor_count``, ``uint64 kv_count``, then each key/value as a
``uint64``-length-prefixed UTF-8 key, a ``uint32`` value type and the value; then each tensor as
name, ``uint32 n_dims``, ``n_dims x uint64`` shape, ``uint32`` ggml type, ``uint64`` offset.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

__all__ = ["GGUFError", "GGUFHeader", "TensorInfo", "read_header", "read_header_file"]

MAGIC = b"GGUF"
# value type id -> struct format of one scalar (8 = string, 9 = array are handled apart)
_SCALARS: dict[int, str] = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f",
                            7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
# Sanity bounds, so that a file that is not GGUF fails with a message instead of a MemoryError.
_MAX_STRING = 64 * 2**20
_MAX_COUNT = 2**26


class GGUFError(ValueError):
    """The bytes are not a GGUF header this reader understands (one line, says what is wrong)."""


@dataclass(frozen=True)
class TensorInfo:
    """One tensor's entry in the header: name, shape (GGUF order: fastest dimension first), type."""

    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True)
class GGUFHeader:
    """What the header says. Arrays of strings/numbers come back as Python lists."""

    version: int
    tensor_count: int
    metadata: dict[str, object]
    tensors: list[TensorInfo] = field(repr=False)

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", ""))

    def arch_value(self, key: str) -> object:
        """``<architecture>.<key>``, e.g. ``block_count`` -> ``qwen2.block_count``."""
        return self.metadata.get(f"{self.architecture}.{key}")

    @property
    def vocab_size(self) -> int:
        """Tokens in the embedded tokenizer (the architecture's ``vocab_size`` key if present)."""
        explicit = self.arch_value("vocab_size")
        if isinstance(explicit, int):
            return explicit
        tokens = self.metadata.get("tokenizer.ggml.tokens")
        return len(tokens) if isinstance(tokens, list) else 0

    @property
    def n_parameters(self) -> int:
        return sum(t.n_elements for t in self.tensors)


class _Reader:
    """Reads little-endian fields from a stream; a short read is a GGUFError (truncated file)."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream

    def take(self, n: int) -> bytes:
        data = self.stream.read(n)
        if len(data) != n:
            raise GGUFError("truncated header")
        return data

    def scalar(self, fmt: str) -> object:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def u32(self) -> int:
        return int(struct.unpack("<I", self.take(4))[0])

    def u64(self) -> int:
        return int(struct.unpack("<Q", self.take(8))[0])

    def string(self) -> str:
        n = self.u64()
        if n > _MAX_STRING:
            raise GGUFError(f"string of {n} bytes in header (corrupt?)")
        try:
            return self.take(n).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise GGUFError(f"string is not UTF-8 ({exc.reason})") from None

    def value(self, vtype: int) -> object:
        if vtype in _SCALARS:
            return self.scalar(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            item_type, count = self.u32(), self.u64()
            if count > _MAX_COUNT:
                raise GGUFError(f"array of {count} items in header (corrupt?)")
            if item_type in _SCALARS:  # one unpack for the whole array: vocab-sized arrays are common
                fmt = _SCALARS[item_type]
                size = struct.calcsize(fmt)
                return list(struct.unpack(f"<{count}{fmt[1]}", self.take(size * count)))
            return [self.value(item_type) for _ in range(count)]
        raise GGUFError(f"unknown metadata value type {vtype}")


def read_header(stream: BinaryIO) -> GGUFHeader:
    """Parse the header from the start of ``stream``; raise :class:`GGUFError` if it is not GGUF v3."""
    r = _Reader(stream)
    magic = stream.read(4)
    if magic != MAGIC:
        raise GGUFError(f"not a GGUF file (starts with {magic!r}, expected {MAGIC!r})")
    version = r.u32()
    if version != 3:
        raise GGUFError(f"GGUF version {version}; only version 3 is supported")
    tensor_count, kv_count = r.u64(), r.u64()
    if tensor_count > _MAX_COUNT or kv_count > _MAX_COUNT:
        raise GGUFError(f"{tensor_count} tensors / {kv_count} keys in header (corrupt?)")
    metadata: dict[str, object] = {}
    for _ in range(kv_count):
        key = r.string()
        metadata[key] = r.value(r.u32())
    tensors = []
    for _ in range(tensor_count):
        name = r.string()
        n_dims = r.u32()
        if n_dims > 8:
            raise GGUFError(f"tensor {name!r} has {n_dims} dimensions (corrupt?)")
        shape = tuple(r.u64() for _ in range(n_dims))
        tensors.append(TensorInfo(name, shape, r.u32(), r.u64()))
    return GGUFHeader(version, tensor_count, metadata, tensors)


def read_header_file(path: Path) -> GGUFHeader:
    """:func:`read_header` on a file (buffered: the tokenizer arrays are many small reads)."""
    with open(path, "rb", buffering=1 << 20) as fh:
        return read_header(fh)

"""What a cache holds for each registered model: wheels, the GGUF, its verification, the HF folder.

Reads only: nothing is hashed again (``verified`` means the GGUF is the very file this cache
verified: same size and modification time as its verification record, expected sha256).

    >>> from pathlib import Path
    >>> from picker.models.registry import find_pair
    >>> row = model_status(find_pair("qwen2.5-coder").draft, "draft", Path("/nonexistent"))
    >>> row.wheels, row.parts, row.gguf_bytes, row.verified, row.hf_folder
    (0, 6, None, False, None)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from picker.models.convert import hf_converted
from picker.models.fetch import Layout, recorded_ok
from picker.models.registry import PAIRS, ModelSpec

__all__ = ["ModelStatus", "cache_status", "model_status"]


@dataclass(frozen=True)
class ModelStatus:
    """One model in one cache. Sizes in bytes; paths None where the file is absent."""

    pair: str
    role: str
    name: str
    wheels: int
    parts: int
    wheels_bytes: int
    gguf: str | None
    gguf_bytes: int | None
    verified: bool
    hf_folder: str | None
    hf_bytes: int | None


def _du(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def model_status(spec: ModelSpec, role: str, cache: Path, pair: str = "") -> ModelStatus:
    layout = Layout(spec, cache)
    wheels = [layout.wheel_for(n) for n in range(1, spec.parts + 1)]
    present = [w for w in wheels if w is not None]
    gguf = layout.gguf if layout.gguf.is_file() else None
    hf = layout.hf if hf_converted(layout) is not None else None
    return ModelStatus(pair, role, spec.name, len(present), spec.parts,
                       sum(w.stat().st_size for w in present),
                       str(gguf) if gguf else None, gguf.stat().st_size if gguf else None,
                       recorded_ok(layout), str(hf) if hf else None, _du(hf) if hf else None)


def cache_status(cache: Path) -> list[ModelStatus]:
    """Every registered model's status in ``cache`` (target before draft, pairs by name)."""
    rows = []
    for name in sorted(PAIRS):
        pair = PAIRS[name]
        rows += [model_status(pair.target, "target", cache, name),
                 model_status(pair.draft, "draft", cache, name)]
    return rows

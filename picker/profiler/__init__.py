"""The profiler: acceptance per task type × strategy × temperature × draft length, cheaply.

    >>> from pathlib import Path
    >>> from picker.profiler import ProfileConfig, Profiler, StopRule     # doctest: +SKIP
    >>> from picker.profiler.torch_source import TorchSource              # doctest: +SKIP
    >>> source = TorchSource(Path("zoo/target"), {"vanilla": Path("zoo/draft")})  # doctest: +SKIP
    >>> cfg = ProfileConfig(out=Path("runs/a"), tasks=["code"], temperatures=[0.0, 1.0],
    ...                     strategies=["ngram", "vanilla"], num_draft_tokens=[4],
    ...                     max_new_tokens=64, limit_per_task=40)   # doctest: +SKIP
    >>> summary = Profiler(source, {"code": builtin_prompts(["code"], 40)}, cfg).run()  # doctest: +SKIP

Modules: ``records`` (append-only JSONL of counters), ``stats`` (rates and bootstrap intervals),
``stopping`` (sequential stopping), ``run`` (the rounds), ``summary`` (``summary.json``), sources
``torch_source`` (the reference loop), ``sglang``, ``vllm`` and ``llamacpp`` (live endpoints over
``http``),
and ``progress`` / ``table`` / ``plot`` for people. The CLI is ``picker.cli.profile``.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["CellKey", "ProfileConfig", "Profiler", "Record", "RecordLog", "StopRule"]
_HOMES = {"CellKey": "records", "Record": "records", "RecordLog": "records", "ProfileConfig": "run",
          "Profiler": "run", "StopRule": "stopping"}


def __getattr__(name: str) -> Any:
    # Lazy: the CLI imports picker.profiler.options at start-up, which must not pull in numpy.
    if name not in _HOMES:
        raise AttributeError(f"module 'picker.profiler' has no attribute {name!r}")
    return getattr(importlib.import_module(f"picker.profiler.{_HOMES[name]}"), name)

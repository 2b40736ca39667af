"""Record what a profiling run measured: model, drafts, engine, hardware, dtype, prompts, date.

The run puts the result under ``run.provenance`` in ``run.json`` and ``summary.json``; the reader
and the check against a workload profile are ``picker.inputs.provenance``. A source may offer a
``provenance()`` method returning the parts only it knows (the loaded model's size, the server's
model path and version); everything else is filled here.

    >>> sha256_files([])  is None
    True
    >>> p = collect(None, {"backend": "echo", "target": "m", "prompts": "builtin"}, {})
    >>> p["model"]["name"], p["chat_template"], p["schema_"]
    ('m', 'picker.tasks role tags (User: / Assistant:), no model chat template', 'specpicker.provenance/1')
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import os
import platform
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from picker.inputs.provenance import SCHEMA

# How prompts were rendered (picker.profiler.prompt_format), in words, by the run's prompt_format.
CHAT_TEMPLATE = "picker.tasks role tags (User: / Assistant:), no model chat template"
MODEL_TEMPLATE = "the model's own chat template (its tokenizer's), every turn"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
                   "vocab.json", "merges.txt")
TORCH_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def sha256_files(paths: Iterable[Path]) -> str | None:
    """One digest over the files' names and bytes (in name order); None when there are none."""
    found = sorted((p for p in paths if p.is_file()), key=lambda p: p.name)
    if not found:
        return None
    h = hashlib.sha256()
    for p in found:
        h.update(p.name.encode() + b"\0")
        with p.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def local_artifact(name: str, folder: Path | None, params: int | None = None) -> dict[str, Any]:
    """An ``ArtifactId`` dict for a model or heads folder on this machine (hashes where files exist)."""
    out: dict[str, Any] = {"name": name, "params": params}
    if folder is not None and folder.is_dir():
        out.update(path=str(folder), config_sha256=sha256_files([folder / "config.json"]),
                   tokenizer_sha256=sha256_files(folder / f for f in TOKENIZER_FILES))
    return out


def _cpu_name() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def local_hardware(device: str) -> dict[str, Any]:
    """This machine: CPU name and cores, and the accelerator when ``device`` is one."""
    from picker.inputs.hardware import resolve_hardware_name

    out: dict[str, Any] = {"cpu": _cpu_name(), "cores": os.cpu_count(), "device": device}
    if device.startswith("cuda"):
        import torch

        name = torch.cuda.get_device_name(torch.device(device))
        # "NVIDIA H100 80GB HBM3" -> the catalog's key where an alias knows it, else the driver's name.
        words = name.replace("NVIDIA", "").strip()
        out.update(gpu_name=name, gpu_count=1,
                   gpu=resolve_hardware_name(words) or resolve_hardware_name(words.split()[0]) or words)
    return out


def prompt_set_sha256(prompts: Mapping[str, Sequence[Any]]) -> str | None:
    """A digest of the prompt ids measured per task (ids are content hashes: same text, same id)."""
    ids = [f"{task}:{getattr(p, 'id', p)}" for task in sorted(prompts) for p in prompts[task]]
    return hashlib.sha256("\n".join(ids).encode()).hexdigest() if ids else None


def collect(source: Any, meta: Mapping[str, Any], prompts: Mapping[str, Sequence[Any]]) -> dict[str, Any]:
    """The ``run.provenance`` dict (``picker.inputs.provenance.Provenance``) of a run over ``source``."""
    backend = str(meta.get("backend") or getattr(source, "name", "") or "unknown")
    own: dict[str, Any] = {}
    hook = getattr(source, "provenance", None)
    if callable(hook):
        own = dict(hook())
    out: dict[str, Any] = {
        "schema_": SCHEMA,
        "model": {"name": str(meta.get("target") or "unknown")},
        "drafts": {},
        "backend": backend,
        "engine": None,
        "engine_version": None,
        "hardware": {"device": "server"} if backend != "torch" else local_hardware("cpu"),
        "dtype": None,
        "prompts": str(meta.get("prompts") or "builtin"),
        "prompt_set_sha256": prompt_set_sha256(prompts),
        "chat_template": MODEL_TEMPLATE if meta.get("prompt_format") == "chat_template" else CHAT_TEMPLATE,
        "date": _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat(),
    }
    out.update({k: v for k, v in own.items() if v is not None})
    return out

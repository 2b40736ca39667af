"""Write a Hugging Face folder (config, tokenizer with chat template, safetensors) from a fetched GGUF.

The torch backend and vLLM read Hugging Face folders. transformers can load a GGUF file itself
(``from_pretrained(folder, gguf_file=...)``, through the ``gguf`` and ``accelerate`` packages of
the ``real`` extra) but takes minutes to dequantize, and ``save_pretrained`` refuses a
GGUF-loaded model; so we load it once and write the folder ourselves:

- ``config.json`` without the GGUF ``quantization_config`` and with ``architectures`` (vLLM
  needs it); ``generation_config.json`` with the token ids the GGUF declares;
- ``tokenizer.json`` + ``tokenizer_config.json`` carrying the GGUF's ``chat_template``;
- ``model.safetensors`` in **float32**: transformers dequantizes Q4_K_M to float32, so float32
  weights reproduce the GGUF-loaded model bit for bit (bfloat16 would round them again, and this
  CPU kind, AVX2 without bf16 instructions, runs bfloat16 matmuls slower than float32). Cost:
  4 bytes a parameter (0.5B: 2.5 GB, 1.5B: 7.1 GB).

The folder is written under a temporary name, checked (it loads with ``local_files_only=True``
and greedy-decodes the same tokens as the GGUF-loaded model on a chat prompt), then renamed.

    >>> from picker.models.registry import find_pair
    >>> from picker.models.fetch import Layout
    >>> Layout(find_pair("qwen2.5-coder").target, Path("/c")).hf.as_posix()
    '/c/qwen2.5-coder-1.5b-instruct/hf'
"""

from __future__ import annotations

import gc
import importlib.util
import json
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from picker.errors import UserError
from picker.models.fetch import Layout, default_cache, recorded_ok, require_free
from picker.models.gguf_header import read_header_file
from picker.models.registry import ModelSpec

__all__ = ["CHECK_PROMPT", "ConvertResult", "MARKER", "convert_to_hf", "hf_converted"]

MARKER = "specpicker-conversion.json"
CHECK_PROMPT = "Write a Python function that returns the n-th Fibonacci number."
_WEIGHTS = "model.safetensors"


@dataclass(frozen=True)
class ConvertResult:
    """Where the folder is and what the check saw. Seconds are wall time."""

    name: str
    folder: Path
    load_gguf_seconds: float
    write_seconds: float
    load_folder_seconds: float
    check_tokens: list[int]
    max_abs_logit_diff: float
    already_converted: bool


def hf_converted(layout: Layout) -> dict[str, Any] | None:
    """The conversion marker of a complete folder made from this very GGUF, else None."""
    try:
        marker = json.loads((layout.hf / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    ok = marker.get("gguf_sha256") == layout.spec.sha256 and (layout.hf / _WEIGHTS).is_file()
    return marker if ok else None


def convert_to_hf(spec: ModelSpec, cache: Path | None = None, *, check_tokens: int = 8,
                  progress: bool = True) -> ConvertResult:
    """Write ``<cache>/<model>/hf/`` from the fetched GGUF (skipped when already done)."""
    layout = Layout(spec, (cache or default_cache()).expanduser().resolve())
    if (done := hf_converted(layout)) is not None:
        return ConvertResult(spec.name, layout.hf, 0.0, 0.0, 0.0, done["check_tokens"],
                             done["max_abs_logit_diff"], True)
    if not recorded_ok(layout):
        raise UserError(f"{spec.name} is not fetched and verified yet; run `specpick models fetch` "
                        "first", file=str(layout.gguf))
    missing = [m for m in ("gguf", "accelerate", "torch", "transformers", "safetensors")
               if importlib.util.find_spec(m) is None]
    if missing:
        raise UserError(f"converting needs {', '.join(missing)}: pip install 'specpicker[torch,real]'",
                        field="extra")
    header = read_header_file(layout.gguf)
    require_free(layout.folder, 4 * header.n_parameters, f"{spec.name} float32 safetensors")
    console = Console(stderr=True, quiet=not progress)
    for stale in layout.folder.glob(".hf.*.partial"):
        shutil.rmtree(stale, ignore_errors=True)  # a killed conversion's leftovers
    tmp = Path(tempfile.mkdtemp(dir=layout.folder, prefix=".hf.", suffix=".partial"))
    try:
        result = _convert(layout, tmp, header.metadata.get("tokenizer.chat_template"),
                          check_tokens, console)
        os.chmod(tmp, 0o755)  # mkdtemp makes it owner-only
        shutil.rmtree(layout.hf, ignore_errors=True)  # an incomplete folder (no marker)
        os.replace(tmp, layout.hf)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return ConvertResult(**{**asdict(result), "folder": layout.hf})


def _convert(layout: Layout, out: Path, chat_template: object, check_tokens: int,
             console: Console) -> ConvertResult:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    spec, gguf = layout.spec, layout.gguf.name
    t0 = time.perf_counter()
    with console.status(f"{spec.name}: loading the GGUF and dequantizing (minutes)"):
        tok = AutoTokenizer.from_pretrained(str(layout.folder), gguf_file=gguf)
        model = AutoModelForCausalLM.from_pretrained(str(layout.folder), gguf_file=gguf,
                                                     dtype=torch.float32)
    t1 = time.perf_counter()
    prompt = _chat_prompt(tok)
    with console.status(f"{spec.name}: greedy reference from the GGUF-loaded model"):
        ref_tokens, ref_logits = _greedy(model, prompt, check_tokens)
    t2 = time.perf_counter()
    with console.status(f"{spec.name}: writing {out.name}"):
        _write_config(model, out)
        _write_tokenizer(tok, chat_template, out)
        _write_weights(model, out)
    t3 = time.perf_counter()
    del model  # free the GGUF-loaded copy before loading the folder: 1.5B float32 is 7 GB
    gc.collect()
    with console.status(f"{spec.name}: checking the folder loads and decodes the same"):
        folder_model = AutoModelForCausalLM.from_pretrained(str(out), local_files_only=True)
        t4 = time.perf_counter()
        tokens, logits = _greedy(folder_model, prompt, check_tokens)
    if tokens != ref_tokens:
        raise UserError(f"the written folder decodes {tokens}, the GGUF-loaded model {ref_tokens}; "
                        "nothing kept", file=str(layout.hf))
    diff = float((logits - ref_logits).abs().max())
    marker = {"gguf": gguf, "gguf_sha256": spec.sha256, "dtype": "float32",
              "check_prompt": CHECK_PROMPT, "check_tokens": tokens, "max_abs_logit_diff": diff,
              "seconds": {"load_gguf": t1 - t0, "reference_decode": t2 - t1, "write": t3 - t2,
                          "load_folder": t4 - t3},
              "converted_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    (out / MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
    return ConvertResult(spec.name, out, t1 - t0, t3 - t2, t4 - t3, tokens, diff, False)


def _chat_prompt(tok: Any) -> list[int]:
    """The check prompt rendered through the model's own chat template (an instruct model)."""
    messages = [{"role": "user", "content": CHECK_PROMPT}]
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
    return [int(i) for i in ids]


def _greedy(model: Any, prompt: list[int], n: int) -> tuple[list[int], Any]:
    """``n`` greedy tokens (plain argmax, no generation-config processors) and the step logits."""
    import torch

    # No KV cache: a full forward per token costs a few seconds here and keeps this check clear
    # of transformers' cache-argument changes (5.x renames past_key_values).
    tokens: list[int] = []
    rows = []
    with torch.inference_mode():
        for _ in range(n):
            logits = model(input_ids=torch.tensor([prompt + tokens])).logits[0, -1].float()
            rows.append(logits)
            tokens.append(int(logits.argmax()))
    return tokens, torch.stack(rows)


def _write_config(model: Any, out: Path) -> None:
    config = model.config.to_dict()
    # The folder holds plain float32 weights: a leftover GGUF quantization_config would make
    # loaders look for the GGUF file again.
    for key in ("quantization_config", "_model_name_or_path", "transformers_version"):
        config.pop(key, None)
    config["architectures"] = [type(model).__name__]
    config["dtype"] = "float32"
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    model.generation_config.save_pretrained(str(out))


def _write_tokenizer(tok: Any, chat_template: object, out: Path) -> None:
    tok.save_pretrained(str(out))
    # transformers 5 writes the template to chat_template.jinja; engines and older readers look
    # in tokenizer_config.json, so it lives there, once (from the GGUF's own metadata).
    template = chat_template if isinstance(chat_template, str) else tok.chat_template
    if not template:
        raise UserError("the GGUF has no tokenizer.chat_template", field="tokenizer.chat_template")
    path = out / "tokenizer_config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    config["chat_template"] = template
    for key in ("is_local", "local_files_only"):  # how this process loaded it, not tokenizer facts
        config.pop(key, None)
    path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (out / "chat_template.jinja").unlink(missing_ok=True)


def _write_weights(model: Any, out: Path) -> None:
    from safetensors.torch import save_model

    # save_model drops the duplicate of tied tensors (a tied head shares the embedding's storage)
    # where a plain save_file(state_dict) would refuse them.
    save_model(model, str(out / _WEIGHTS), metadata={"format": "pt"})
    os.chmod(out / _WEIGHTS, 0o644)  # written owner-only; it is shared read-only data

"""Helpers for the engine-validated tier (``pytest -m engines``).

The engines live in venvs of their own, built by ``scripts/engines-setup.sh`` under
``$SPECPICKER_ENGINES_DIR`` (default ``<repo>/.engines``); tests drive them in subprocesses. A
missing venv fails the tier (with the command that builds it) rather than skipping it: a skipped
tier would look like a passed one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENGINES_DIR = Path(os.environ.get("SPECPICKER_ENGINES_DIR", ROOT / ".engines"))

# A tiny Llama config: enough for SGLang's and vLLM's config code (no weights are read from it).
TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
    "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
    "vocab_size": 512, "max_position_embeddings": 1024, "rms_norm_eps": 1e-6, "torch_dtype": "float32",
    "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": False, "rope_theta": 10000.0,
    "hidden_act": "silu",
}


def engine_python(name: str) -> Path:
    """The interpreter of the ``name`` venv (``sglang`` or ``vllm``), or a failed test."""
    python = ENGINES_DIR / f"{name}-venv" / "bin" / "python"
    if not python.exists():
        pytest.fail(f"no {name} venv at {python.parent.parent}: run `bash scripts/engines-setup.sh {name}`",
                    pytrace=False)
    return python


def write_config_folder(path: Path, **overrides: object) -> Path:
    """A model folder holding only a ``config.json`` (what config resolution reads)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({**TINY_LLAMA, **overrides}))
    return path


# Artifact kinds that live inside the target checkpoint when a profile says so: an engine resolves
# such a config only against a target of that kind (vLLM refuses method "mtp" on a Llama). The
# DeepSeek-V3 config.json shipped with the MTP profile stands in as that target.
CHECKPOINT_ARTIFACTS: dict[str, tuple[Path, dict[str, object]]] = {
    "mtp": (ROOT / "profiles" / "hf" / "deepseek-v3-mtp-sglang.config.json", {"modules": 1, "builtin": True}),
}


def profile_hf_config(profile_path: Path) -> Path | None:
    """The config.json of a profile's model: the one ``model.hf_config`` names (relative to the
    profile), else the published copy shipped as ``hf/<profile name>.config.json``; None otherwise."""
    import yaml

    ref = (yaml.safe_load(profile_path.read_text()).get("model") or {}).get("hf_config")
    if ref:
        return (profile_path.parent / ref).resolve()
    shipped = profile_path.parent / "hf" / f"{profile_path.stem}.config.json"
    return shipped if shipped.is_file() else None


def write_model_folder(path: Path, config_json: Path) -> Path:
    """A model folder holding a copy of ``config_json`` as its ``config.json`` (nothing else)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(config_json.read_text())
    return path


def config_dtype(config_json: Path) -> str:
    """The dtype a config check runs at: the checkpoint's own when it is quantized (vLLM builds FP8
    only in bfloat16 or float16), else float32 as everywhere else in this tier."""
    cfg = json.loads(config_json.read_text())
    return str(cfg.get("torch_dtype", "bfloat16")) if "quantization_config" in cfg else "float32"

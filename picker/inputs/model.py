"""The profile's ``model`` section: a catalog name, a Hugging Face folder / config.json, or a shape.

Three ways to say which model is served, shortest first:

    model: llama-3.1-8b-instruct            # a catalog name (picker.inputs.model_catalog)
    model: ./Llama-3.1-8B-Instruct          # a Hugging Face folder (or its config.json), beside the profile
    model: {name: my-org/my-model, num_layers: 32, hidden_size: 4096, ...}   # the shape itself

A mapping may mix them: fields given win over the ``hf_config`` file, which wins over the catalog.
The shape is layers, hidden size, heads, KV heads, vocabulary and, where present, MoE experts.

    >>> spec = ModelSpec.model_validate({"name": "llama-3.1-8b-instruct"})
    >>> spec.name, spec.num_layers, spec.num_kv_heads, spec.params_b
    ('meta-llama/Llama-3.1-8B-Instruct', 32, 8, 8.03)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, StrictBool, ValidationInfo, model_validator

from picker.errors import UserError
from picker.inputs.fields import Dim, Name, Params, Section, record_default
from picker.inputs.model_catalog import CATALOG, CatalogModel, catalog_names, find_model
from picker.inputs.yamlio import fail_at, fail_at_many, load_json_mapping

Dtype = Literal["bf16", "fp16", "fp8", "int8", "int4"]
BYTES_PER_PARAM: dict[str, float] = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}

_HF_KEYS: dict[str, tuple[str, ...]] = {   # our field -> config.json keys (Llama/Qwen/Mistral, GPT-2)
    "num_layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "hidden_size": ("hidden_size", "n_embd", "d_model"),
    "num_attention_heads": ("num_attention_heads", "n_head"),
    "num_kv_heads": ("num_key_value_heads",),
    "head_dim": ("head_dim",),
    "vocab_size": ("vocab_size",),
    "intermediate_size": ("intermediate_size", "n_inner"),
    # Mixture of experts: Mixtral / Qwen-MoE / DeepSeek spellings of the routed-expert count.
    "num_experts": ("num_local_experts", "num_experts", "n_routed_experts"),
    "num_experts_per_tok": ("num_experts_per_tok",),
    "expert_intermediate_size": ("moe_intermediate_size",),
}
_HF_REQUIRED = ("num_layers", "hidden_size", "num_attention_heads", "vocab_size")
_HF_DTYPES = {"bfloat16": "bf16", "float16": "fp16"}
_SHAPE_FIELDS = (*_HF_KEYS, "tie_word_embeddings", "params_b")


def shape_from_hf_config(
    cfg: dict[str, Any], *, source: str, profile: str | None = None
) -> dict[str, Any]:
    """Map a Hugging Face ``config.json`` to ModelSpec fields; ``source`` names it in errors."""
    def bad(message: str) -> UserError:
        return UserError(f"{source}: {message}", file=profile, field="model.hf_config")

    # Multimodal wrappers (Llama 4, Gemma 3, Mistral 3) keep the language model under text_config.
    text = cfg.get("text_config") if "num_hidden_layers" not in cfg else None
    inner: dict[str, Any] = text if isinstance(text, dict) else cfg
    out: dict[str, Any] = {}
    for ours, keys in _HF_KEYS.items():
        key = next((k for k in keys if inner.get(k) is not None), None)
        if key is None:
            continue
        value = inner[key]
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise bad(f"{key} must be a positive integer (got {value!r})")
        out[ours] = value
    if out.get("num_experts") == 1:  # a dense model that spells out its one "expert"
        out.pop("num_experts")
    tie = inner.get("tie_word_embeddings", cfg.get("tie_word_embeddings"))
    if isinstance(tie, bool):
        out["tie_word_embeddings"] = tie
    dtype = _HF_DTYPES.get(str(cfg.get("torch_dtype") or cfg.get("dtype") or ""))
    if dtype:
        out["dtype"] = dtype
    return out


def estimate_params(num_layers: int, hidden_size: int, num_attention_heads: int, num_kv_heads: int,
                    head_dim: int, vocab_size: int, intermediate_size: int, *, tied: bool = False,
                    num_experts: int | None = None, expert_intermediate_size: int | None = None) -> int:
    """Parameter count of a Llama-style decoder (GQA attention, gated MLP, RMSNorm).

    Per layer: q and o projections (hidden x heads*head_dim each), k and v (hidden x
    kv_heads*head_dim each), gate/up/down (3 x hidden x intermediate), two norms. Plus the
    embedding and, unless tied, the LM head. Attention biases (Qwen) are ignored: < 0.01 %.
    A mixture of experts has ``num_experts`` gated MLPs of ``expert_intermediate_size`` (default
    ``intermediate_size``) per layer plus a router (hidden x experts), and no dense MLP.
    """
    attn = 2 * hidden_size * num_attention_heads * head_dim + 2 * hidden_size * num_kv_heads * head_dim
    if num_experts:
        inner = expert_intermediate_size or intermediate_size
        mlp = num_experts * 3 * hidden_size * inner + hidden_size * num_experts
    else:
        mlp = 3 * hidden_size * intermediate_size
    per_layer = attn + mlp + 2 * hidden_size
    embed = vocab_size * hidden_size * (1 if tied else 2)
    return num_layers * per_layer + embed + hidden_size


class ModelSpec(Section):
    """The target model: a catalog name, a Hugging Face config.json, or its shape given here."""

    name: Name = Field(description=(
        "Model name, for reports (e.g. meta-llama/Llama-3.1-8B-Instruct). A catalog name or hub id "
        f"({', '.join(catalog_names())}) fills the shape; so does a Hugging Face folder or "
        "config.json path (relative to this profile). `model: NAME` alone is short for `model: {name: NAME}`."))
    hf_config: Name | None = Field(None, description=(
        "Path to the model's Hugging Face folder or its config.json, relative to this profile file. "
        "Shape fields missing here are read from it; fields given here win."))
    params_b: Params | None = Field(None, description=(
        "Parameter count in billions. Estimated from the shape when absent (needs intermediate_size)."))
    num_layers: Dim | None = Field(None, description="Decoder layers (num_hidden_layers).")
    hidden_size: Dim | None = Field(None, description="Hidden (model) dimension.")
    num_attention_heads: Dim | None = Field(None, description="Query heads per layer.")
    num_kv_heads: Dim | None = Field(None, description=(
        "Key/value heads per layer (grouped-query attention); defaults to num_attention_heads."))
    head_dim: Dim | None = Field(None, description=(
        "Per-head dimension; defaults to hidden_size / num_attention_heads."))
    vocab_size: Dim | None = Field(None, description="Vocabulary size (embedding and LM-head rows).")
    intermediate_size: Dim | None = Field(None, description="MLP inner dimension (to estimate params_b).")
    num_experts: Dim | None = Field(None, description=(
        "Mixture of experts: routed experts per layer (num_local_experts / num_experts); absent for "
        "a dense model."))
    num_experts_per_tok: Dim | None = Field(None, description=(
        "Mixture of experts: experts each token is routed to."))
    expert_intermediate_size: Dim | None = Field(None, description=(
        "Mixture of experts: each expert's MLP inner dimension (moe_intermediate_size); defaults to "
        "intermediate_size."))
    tie_word_embeddings: StrictBool | None = Field(None, description=(
        "Whether the LM head shares the embedding matrix; used to estimate params_b (default false)."))
    dtype: Dtype = Field("bf16", description="Weight precision served: bf16, fp16, fp8, int8 or int4.")

    @model_validator(mode="before")
    @classmethod
    def _fill_shape(cls, data: Any, info: ValidationInfo) -> Any:
        if isinstance(data, str):
            data = {"name": data}
        if not isinstance(data, dict):
            return data  # a wrong type: the field validation reports it
        out = _resolve(data, info)
        if isinstance(out, dict) and "dtype" not in out:
            record_default(info, "model.dtype", "bf16", "weights served in bfloat16; give model.dtype "
                           "(fp8, int4, ...) for a quantized deployment")
        return out

    @model_validator(mode="after")
    def _check_shape(self) -> ModelSpec:
        missing = [f for f in _HF_REQUIRED if getattr(self, f) is None]
        if missing:
            fail_at_many([((f,), "required field is missing (give it here, through hf_config, or name a "
                           "catalog model)", None) for f in missing])
        heads, kv = self.num_attention_heads, self.resolved_num_kv_heads
        assert heads is not None and self.hidden_size is not None
        if heads % kv:
            fail_at(("num_kv_heads",), f"must divide num_attention_heads ({heads}) (got {kv})", kv)
        if self.head_dim is None and self.hidden_size % heads:
            fail_at(("head_dim",), f"required: hidden_size {self.hidden_size} is not a multiple of "
                    f"num_attention_heads {heads}", None)
        if self.params_b is None and self.intermediate_size is None and self.expert_intermediate_size is None:
            fail_at(("params_b",), "required field is missing (or give intermediate_size, or an "
                    "hf_config that has it, so it can be estimated)", None)
        if self.num_experts_per_tok is not None and self.num_experts is not None \
                and self.num_experts_per_tok > self.num_experts:
            fail_at(("num_experts_per_tok",), f"must be <= num_experts ({self.num_experts}) "
                    f"(got {self.num_experts_per_tok})", self.num_experts_per_tok)
        return self

    @property
    def resolved_num_kv_heads(self) -> int:
        return self.num_kv_heads or self.num_attention_heads or 1

    @property
    def resolved_head_dim(self) -> int:
        assert self.hidden_size is not None and self.num_attention_heads is not None
        return self.head_dim or self.hidden_size // self.num_attention_heads


def _resolve(data: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
    """``data`` with its shape completed from a config.json, the catalog or the nearest catalog size."""
    ctx = info.context or {}
    base = Path(ctx.get("base_dir", "."))
    if isinstance(data.get("hf_config"), str):
        return _with_config(data, data["hf_config"].strip(), base, info)
    if not isinstance(data.get("name"), str) or all(data.get(f) is not None for f in _HF_REQUIRED):
        return data  # the shape is given (or the name is bad: reported by field validation)
    name = data["name"].strip()
    local = _config_path(base / name)
    if local is not None:
        return _with_config(data, name, base, info)
    entry = find_model(name)
    if entry is not None:
        return _with_catalog(data, entry, info)
    params_b = data.get("params_b")
    if _is_number(params_b) and not any(data.get(f) is not None for f in _HF_KEYS):
        return _with_nearest(data, float(params_b), info)
    if any(data.get(f) is not None for f in _SHAPE_FIELDS):
        return data  # a partial shape: the missing fields are reported one by one
    fail_at((), f"{name!r} is not in the model catalog ({', '.join(catalog_names())}) nor a "
            "Hugging Face folder or config.json beside the profile; give one of those, its "
            "params_b, or its shape (num_layers, hidden_size, num_attention_heads, vocab_size)", name)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < float("inf")


def _config_path(path: Path) -> Path | None:
    """``path`` when it is a .json file, its config.json when it is a folder holding one, else None."""
    try:
        if path.suffix == ".json" and path.is_file():
            return path
        if path.is_dir() and (path / "config.json").is_file():
            return path / "config.json"
    except (OSError, ValueError):  # a name too long for the file system, a NUL byte: not a path
        return None
    return None


def _with_config(data: dict[str, Any], ref: str, base: Path, info: ValidationInfo) -> dict[str, Any]:
    """``data`` with the shape fields it lacks read from the config.json that ``ref`` names."""
    where = base / ref
    path = _config_path(where) or where
    try:
        cfg = load_json_mapping(path, what="Hugging Face config")
        values = shape_from_hf_config(cfg, source=str(path))
    except UserError as exc:
        fail_at(("hf_config",), f"cannot use {ref!r}: {exc}", ref)
    missing = [ours for ours in _HF_REQUIRED if ours not in values and data.get(ours) is None]
    if missing:
        keys = "; ".join(" / ".join(_HF_KEYS[m]) for m in missing)
        fail_at(("hf_config",), f"{path} has no {keys}; give "
                f"{', '.join('model.' + m for m in missing)} in the profile", ref)
    filled = sorted(k for k in values if data.get(k) is None)
    if filled:
        record_default(info, "model", f"{data.get('name', ref)}", f"shape read from {path}: " + ", ".join(filled))
    return {**values, **{k: v for k, v in data.items() if v is not None}, "hf_config": ref}


def _with_nearest(data: dict[str, Any], params_b: float, info: ValidationInfo) -> dict[str, Any]:
    """``data`` (a name the catalog does not know, and its size) with the shape of the dense catalog
    model nearest in size, as ``specpick estimate`` does for a bare parameter count."""
    import math

    dense = [m for m in CATALOG.values() if "num_experts_per_tok" not in m.config]
    entry = min(dense, key=lambda m: abs(math.log(m.params_b / params_b)))
    values = shape_from_hf_config(entry.config, source=entry.hub_id)
    record_default(info, "model", f"shape of {entry.hub_id}",
                   f"the catalog model nearest to {params_b:g}B parameters; give hf_config (the model's "
                   "config.json) for its own shape")
    return {**values, **{k: v for k, v in data.items() if v is not None}}


def _with_catalog(data: dict[str, Any], entry: CatalogModel, info: ValidationInfo) -> dict[str, Any]:
    """``data`` with the shape fields it lacks from the catalog entry (fields given win)."""
    values = {**shape_from_hf_config(entry.config, source=entry.hub_id), "params_b": entry.params_b}
    record_default(info, "model", entry.hub_id, f"the model catalog: its config.json's shape, "
                   f"{entry.params_b:g}B parameters from its model card")
    return {**values, **{k: v for k, v in data.items() if v is not None}, "name": entry.hub_id}

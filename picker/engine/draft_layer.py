"""One decoder layer for draft heads, and the frozen target parts they share.

Draft heads that run a Llama-shaped layer of their own over target features -- EAGLE-3's draft
layer, an MTP module's transformer block -- build it from these pieces: pre-norm grouped-query
attention with RoPE over explicit keys and a boolean mask (so one layer serves a causal prefix, a
token tree and training-time patterns), and a SwiGLU MLP. :class:`FrozenTarget` holds what a head
borrows from the target, detached: the embedding, the final norm and the LM head.

A layer's shape comes from any object with the attributes of :class:`LayerShape` (a head's own
config dataclass has them).

    >>> import torch
    >>> shape = LayerShape(hidden_size=16, intermediate_size=32, num_heads=2, num_kv_heads=1)
    >>> g, (k, v) = DraftLayer(shape)(torch.randn(1, 4, 16), torch.arange(4), causal_mask(4, 0), None)
    >>> g.shape, k.shape
    (torch.Size([1, 4, 16]), torch.Size([1, 1, 4, 8]))
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.nn.functional as F

KV = tuple[torch.Tensor, torch.Tensor]  # keys, values: (B, kv_heads, S, head_dim)


class Shape(Protocol):
    """What a draft layer reads of its head's config."""

    hidden_size: int
    intermediate_size: int
    num_heads: int
    num_kv_heads: int
    rms_norm_eps: float
    rope_theta: float


@dataclass(frozen=True)
class LayerShape:
    """A plain :class:`Shape` (heads usually pass their own config instead)."""

    hidden_size: int
    intermediate_size: int
    num_heads: int
    num_kv_heads: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0


def causal_mask(new: int, past: int) -> torch.Tensor:
    """``(new, past + new)`` bool: every new row sees the whole past and the new rows up to itself."""
    mask = torch.ones(new, past + new, dtype=torch.bool)
    mask[:, past:] = torch.ones(new, new, dtype=torch.bool).tril()
    return mask


class Rotary(torch.nn.Module):
    """Rotary position embedding (Llama's half-split layout); cos/sin computed once per step."""

    def __init__(self, head_dim: int, theta: float) -> None:
        super().__init__()
        half = head_dim // 2
        inv_freq = theta ** (-torch.arange(half, dtype=torch.float32) / half)
        self.inv_freq: torch.Tensor
        self.register_buffer("inv_freq", inv_freq, persistent=False)  # derived, never saved

    def angles(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin for ``positions``: ``(T, head_dim / 2)`` for ``(T,)`` (shared by the batch), or
        ``(B, 1, T, head_dim / 2)`` for per-row ``(B, T)`` positions (broadcast over heads)."""
        angle = positions.to(torch.float32)[..., None] * self.inv_freq
        if positions.dim() == 2:
            angle = angle[:, None]
        return angle.cos(), angle.sin()

    @staticmethod
    def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class DraftAttention(torch.nn.Module):
    """Grouped-query attention over cached keys plus the new rows, under an explicit bool mask."""

    def __init__(self, cfg: Shape) -> None:
        super().__init__()
        d, h = cfg.hidden_size // cfg.num_heads, cfg.hidden_size
        self.cfg = cfg
        self.q_proj = torch.nn.Linear(h, cfg.num_heads * d, bias=False)
        self.k_proj = torch.nn.Linear(h, cfg.num_kv_heads * d, bias=False)
        self.v_proj = torch.nn.Linear(h, cfg.num_kv_heads * d, bias=False)
        self.o_proj = torch.nn.Linear(cfg.num_heads * d, h, bias=False)
        self.rotary = Rotary(d, cfg.rope_theta)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor,
                past: KV | None) -> tuple[torch.Tensor, KV]:
        cfg = self.cfg
        b, t, _ = x.shape
        d = cfg.hidden_size // cfg.num_heads
        q = self.q_proj(x).view(b, t, cfg.num_heads, d).transpose(1, 2)
        k = self.k_proj(x).view(b, t, cfg.num_kv_heads, d).transpose(1, 2)
        v = self.v_proj(x).view(b, t, cfg.num_kv_heads, d).transpose(1, 2)
        cos, sin = self.rotary.angles(positions)
        q, k = Rotary.rotate(q, cos, sin), Rotary.rotate(k, cos, sin)
        keys = k if past is None else torch.cat((past[0], k), dim=2)
        values = v if past is None else torch.cat((past[1], v), dim=2)
        out = F.scaled_dot_product_attention(
            q, keys, values, attn_mask=mask, enable_gqa=cfg.num_heads != cfg.num_kv_heads)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1)), (k, v)


class DraftLayer(torch.nn.Module):
    """A Llama-shaped decoder layer: x + attn(norm x), then + SwiGLU(norm x)."""

    def __init__(self, cfg: Shape) -> None:
        super().__init__()
        h, m = cfg.hidden_size, cfg.intermediate_size
        self.input_layernorm = torch.nn.RMSNorm(h, eps=cfg.rms_norm_eps)
        self.self_attn = DraftAttention(cfg)
        self.post_attention_layernorm = torch.nn.RMSNorm(h, eps=cfg.rms_norm_eps)
        self.gate_proj = torch.nn.Linear(h, m, bias=False)
        self.up_proj = torch.nn.Linear(h, m, bias=False)
        self.down_proj = torch.nn.Linear(m, h, bias=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor,
                past: KV | None) -> tuple[torch.Tensor, KV]:
        attn, kv = self.self_attn(self.input_layernorm(x), positions, mask, past)
        x = x + attn
        y = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(y)) * self.up_proj(y)), kv



@dataclass(frozen=True)
class FrozenTarget:
    """The pieces of the target the draft head shares, detached: embedding, final norm, LM head."""

    embed: torch.nn.Module
    norm: torch.nn.Module
    lm_head: torch.Tensor  # (V, H)

    def logits(self, g: torch.Tensor) -> torch.Tensor:
        return self.norm(g) @ self.lm_head.T

    @classmethod
    def of(cls, model: Any) -> FrozenTarget:
        """Read the parts from a Hugging Face causal LM (Llama-style ``model.norm``)."""
        base = model.get_decoder() if hasattr(model, "get_decoder") else model.model
        norm = getattr(base, "norm", None)
        if norm is None:
            raise TypeError("the target's decoder has no final `norm` module: a draft head needs a Llama-style target")
        return cls(model.get_input_embeddings(), norm,
                   model.get_output_embeddings().weight.detach())


def causal_lm(target_backend: Any, who: str) -> Any:
    """The Hugging Face causal LM itself, or the one a backend wraps as ``.model`` (a head reads its parts)."""
    for candidate in (target_backend, getattr(target_backend, "model", None)):
        getter = getattr(candidate, "get_output_embeddings", None)
        if getter is not None and getter() is not None:
            return candidate
    raise TypeError(f"{who}: target_backend must be a Hugging Face causal LM or wrap one as .model")


CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"


def save_head(module: torch.nn.Module, folder: Path, config_json: str) -> None:
    """Write ``config.json`` and ``model.safetensors`` (no pickle) into ``folder``."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().contiguous() for k, v in module.state_dict().items()}
    save_file(tensors, str(folder / WEIGHTS_NAME), metadata={"format": "pt"})
    (folder / CONFIG_NAME).write_text(config_json)


def load_head_weights(module: torch.nn.Module, folder: Path) -> torch.nn.Module:
    """Fill ``module`` from the ``model.safetensors`` :func:`save_head` wrote; in eval mode."""
    from safetensors.torch import load_file

    module.load_state_dict(load_file(str(folder / WEIGHTS_NAME)))
    return module.eval()

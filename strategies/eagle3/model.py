"""The EAGLE-3 draft head: fused target features plus a token embedding through one decoder layer.

One draft step at position t reads a *feature* and a *token*. At the first step the feature is the
target's own: the hidden states of a low, a mid and a high layer at t, concatenated and projected
to the target's width (``fuse``). Later steps feed back the draft layer's own output instead
(training-time test teaches it to cope). The token is ``x_{t+1}``, embedded by the target's frozen
embedding. Both inputs are RMS-normalised (their scales differ), concatenated, projected to width
H (``merge``), then run through one Llama-shaped decoder layer (pre-norm attention with RoPE and a
SwiGLU MLP). The layer's output ``g_t`` is both the next step's feature and, after the target's
final norm and LM head (frozen, shared), the draft distribution for ``x_{t+2}``.

Attention takes explicit keys and a boolean mask, so one layer serves the three callers: a causal
prefix (extending the draft cache), a token tree (drafting), and the block-diagonal pattern of
training-time test.

    >>> import torch
    >>> cfg = Eagle3Config(hidden_size=16, intermediate_size=32, num_heads=2, num_kv_heads=1,
    ...                    vocab_size=50, feature_layers=(0, 0, 0))
    >>> head = Eagle3Head(cfg)
    >>> feat = head.fuse(torch.randn(1, 4, 48))
    >>> g, (k, v) = head.step(feat, torch.randn(1, 4, 16), torch.arange(4),
    ...                       causal_mask(4, 0), past=None)
    >>> g.shape, k.shape
    (torch.Size([1, 4, 16]), torch.Size([1, 1, 4, 8]))
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from picker.engine.draft_layer import (
    CONFIG_NAME,
    KV,
    WEIGHTS_NAME,
    DraftLayer,
    causal_mask,
    load_head_weights,
    save_head,
)

__all__ = ["CONFIG_NAME", "KV", "WEIGHTS_NAME", "Eagle3Config", "Eagle3Head", "causal_mask", "default_feature_layers"]


@dataclass(frozen=True)
class Eagle3Config:
    """Shape of the draft layer, which target layers it fuses, and its drafting defaults."""

    hidden_size: int
    intermediate_size: int
    num_heads: int
    num_kv_heads: int
    vocab_size: int
    feature_layers: tuple[int, int, int]  # 0-based decoder layers (DraftContext.hidden keys)
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    # Dynamic tree (EAGLE-2): expand `topk` nodes per depth for `depth` depths, keep the best
    # num_draft_tokens - 1 nodes (the count includes the root, as in SGLang's flag).
    # Measured on the zoo ci target at T = 0: topk 2 / depth 6 / 11 accepted 4.3 tokens per step,
    # topk 4 / depth 5 / 8 accepted 3.8, a top-1 chain of 6 accepted 4.2.
    topk: int = 2
    depth: int = 6
    num_draft_tokens: int = 11
    # Greedy verification accepts a node when it is the target's argmax, which a head distilled
    # on soft labels predicts far more often than its (flat) probabilities say. Node scores at
    # temperature 0 use softmax(logits / greedy_temperature), fitted on held-out rows so that the
    # mean top-1 confidence equals the measured top-1 accuracy; at T > 0 they use logits / T.
    greedy_temperature: float = 1.0
    meta: dict[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "feature_layers", tuple(int(x) for x in self.feature_layers))
        if self.hidden_size % self.num_heads or self.num_heads % self.num_kv_heads:
            raise ValueError("Eagle3Config: heads must divide the width and kv heads the heads")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    def to_json(self) -> str:
        data = asdict(self)
        data["feature_layers"] = list(self.feature_layers)
        return json.dumps({"model_type": "specpicker_eagle3", **data}, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Eagle3Config:
        data = json.loads(text)
        data.pop("model_type", None)
        return cls(**data)


def default_feature_layers(num_layers: int) -> tuple[int, int, int]:
    """Low, mid and high decoder layers (0-based) of a ``num_layers``-layer target.

    The last layer is skipped: its entry is the final-normed state the LM head already reads.
    Shallow targets repeat layers (a 2-layer target gives ``(0, 0, 0)``).
    """
    high = max(0, num_layers - 2)
    return (0, min(high, (num_layers - 1) // 2), high)


class Eagle3Head(torch.nn.Module):
    """``fuse`` (3H -> H), ``merge`` ([embed, feature] 2H -> H) and one :class:`DraftLayer`."""

    def __init__(self, cfg: Eagle3Config) -> None:
        super().__init__()
        h = cfg.hidden_size
        self.config = cfg
        self.fc = torch.nn.Linear(3 * h, h, bias=False)
        self.embed_norm = torch.nn.RMSNorm(h, eps=cfg.rms_norm_eps)
        self.feature_norm = torch.nn.RMSNorm(h, eps=cfg.rms_norm_eps)
        self.merge = torch.nn.Linear(2 * h, h, bias=False)
        self.layer = DraftLayer(cfg)

    def fuse(self, stacked: torch.Tensor) -> torch.Tensor:
        """``(..., 3H)`` concatenated low/mid/high target states -> ``(..., H)`` feature."""
        return self.fc(stacked)

    def step(self, feature: torch.Tensor, embedded: torch.Tensor, positions: torch.Tensor,
             mask: torch.Tensor, past: KV | None) -> tuple[torch.Tensor, KV]:
        """One draft step for ``(B, T, H)`` features and embedded tokens; returns g and new K/V.

        ``positions``: ``(T,)`` for every row, or ``(B, T)``; ``mask``: bool ``(T, S)`` for every row,
        or ``(B, 1, T, S)`` (S = past + T key slots)."""
        x = self.merge(torch.cat((self.embed_norm(embedded), self.feature_norm(feature)), dim=-1))
        return self.layer(x, positions, mask, past)

    def save(self, folder: Path) -> None:
        """Write ``config.json`` and ``model.safetensors`` (no pickle) into ``folder``."""
        save_head(self, folder, self.config.to_json())

    @classmethod
    def load(cls, folder: str | Path) -> Eagle3Head:
        """Load a head written by :meth:`save`."""
        folder = Path(folder)
        return load_head_weights(cls(Eagle3Config.from_json((folder / CONFIG_NAME).read_text())), folder)  # type: ignore[return-value]

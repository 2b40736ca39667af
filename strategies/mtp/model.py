"""Multi-token prediction modules in the DeepSeek-V3 shape (arXiv:2412.19437, section 2.2).

Module k (k = 1..D) takes, at position i, the previous depth's representation ``h^{k-1}_i`` (the
target's final hidden state for k = 1) and the embedding of token ``t_{i+k}``, normalises each
(RMSNorm), concatenates them, projects back to the width (``proj``) and runs one transformer block
of its own; its output ``h^k_i``, through the target's final norm and LM head (shared, frozen),
predicts ``t_{i+k+1}``. The embedding is the target's too. So a module costs one decoder layer and a
projection, and D modules draft D tokens in a chain; a longer chain reuses the last module.

Each module attends over the sequence with its own keys. What it may see is what is committed when
it drafts (:func:`module_mask`): module k at the root i sees its own entries at positions u <= i + 1 - k
-- where ``t_{u+k}`` is known -- and itself, so training and drafting agree.

    >>> import torch
    >>> cfg = MtpConfig(hidden_size=16, intermediate_size=32, num_heads=2, num_kv_heads=1, vocab_size=50)
    >>> heads = MtpHeads(cfg)
    >>> h, (k, v) = heads.modules_[0](torch.randn(1, 4, 16), torch.randn(1, 4, 16), torch.arange(4),
    ...                               module_mask(4, 1), None)
    >>> h.shape, len(heads.modules_)
    (torch.Size([1, 4, 16]), 1)
    >>> module_mask(4, 3).int()
    tensor([[1, 0, 0, 0],
            [0, 1, 0, 0],
            [1, 0, 1, 0],
            [1, 1, 0, 1]], dtype=torch.int32)
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from picker.engine.draft_layer import CONFIG_NAME, KV, DraftLayer, load_head_weights, save_head


@dataclass(frozen=True)
class MtpConfig:
    """Shape of each module's block (the target's decoder layer), how many modules, the default depth."""

    hidden_size: int
    intermediate_size: int
    num_heads: int
    num_kv_heads: int
    vocab_size: int
    num_modules: int = 1  # D: DeepSeek-V3 ships one (section 2.2 sets D = 1)
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    depth: int = 3        # tokens drafted per step unless the caller says
    meta: dict[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_heads or self.num_heads % self.num_kv_heads or self.num_modules < 1:
            raise ValueError("MtpConfig: heads must divide the width, kv heads the heads, and D >= 1")

    def module_for(self, depth: int) -> int:
        """0-based module drafting depth ``depth`` (1-based): module k for k <= D, then the last again."""
        return min(depth, self.num_modules) - 1

    def to_json(self) -> str:
        return json.dumps({"model_type": "specpicker_mtp", **asdict(self)}, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> MtpConfig:
        data = json.loads(text)
        data.pop("model_type", None)
        return cls(**data)


def module_mask(length: int, depth: int, past: int = 0, first: int = 0, rows_are_keys: bool = True) -> torch.Tensor:
    """``(length, past + length)`` bool: rows are positions ``first..first+length-1`` of a module drafting
    ``depth``, keys are ``past`` cached positions (0..past-1) then the rows themselves. A row at i sees
    keys u <= i + 1 - depth (their input tokens are known when i drafts) and itself. With
    ``rows_are_keys`` False the other rows are hidden: they are queries of other roots (a module
    reused past its own depth), not entries of this module's cache."""
    rows = torch.arange(first, first + length)[:, None]
    keys = torch.cat((torch.arange(past), torch.arange(first, first + length)))[None, :]
    seen = keys <= rows + 1 - depth
    if not rows_are_keys:
        seen[:, past:] = False
    seen[:, past:] |= torch.eye(length, dtype=torch.bool)
    return seen


class MtpModule(torch.nn.Module):
    """One depth: ``proj([RMSNorm(h); RMSNorm(embed)])`` through its own transformer block."""

    def __init__(self, cfg: MtpConfig) -> None:
        super().__init__()
        h = cfg.hidden_size
        self.hnorm = torch.nn.RMSNorm(h, eps=cfg.rms_norm_eps)
        self.enorm = torch.nn.RMSNorm(h, eps=cfg.rms_norm_eps)
        self.proj = torch.nn.Linear(2 * h, h, bias=False)
        self.block = DraftLayer(cfg)

    def forward(self, hidden: torch.Tensor, embedded: torch.Tensor, positions: torch.Tensor,
                mask: torch.Tensor, past: KV | None) -> tuple[torch.Tensor, KV]:
        """``(B, T, H)`` representations and embedded next tokens -> this depth's ``(B, T, H)`` and new K/V."""
        x = self.proj(torch.cat((self.hnorm(hidden), self.enorm(embedded)), dim=-1))
        return self.block(x, positions, mask, past)


class MtpHeads(torch.nn.Module):
    """The D modules; saved as ``config.json`` + ``model.safetensors`` (no pickle)."""

    def __init__(self, cfg: MtpConfig) -> None:
        super().__init__()
        self.config = cfg
        self.modules_ = torch.nn.ModuleList(MtpModule(cfg) for _ in range(cfg.num_modules))

    def save(self, folder: Path) -> None:
        save_head(self, folder, self.config.to_json())

    @classmethod
    def load(cls, folder: str | Path) -> MtpHeads:
        folder = Path(folder)
        return load_head_weights(cls(MtpConfig.from_json((folder / CONFIG_NAME).read_text())), folder)  # type: ignore[return-value]

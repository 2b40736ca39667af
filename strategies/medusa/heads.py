"""Medusa heads: K residual blocks on the target's last hidden state, read out by the target's LM head.

Head k (0-based) looks at the final-layer hidden state ``h_t`` (after the final norm) of the
position whose logits produce token ``x_{t+1}`` and guesses ``x_{t+2+k}``: head 0 drafts depth 1
of the tree, head 1 depth 2, and so on. Each head is one residual block ``h + SiLU(W_k h + b_k)``
followed by the target's own LM head, frozen and shared (not a per-head copy): the vocabulary
projection is most of a small model's parameters, sharing it keeps the heads file tiny, training
fast, and the heads' logits in the target's own output space. ``W_k`` starts at zero, so an
untrained head repeats the target's next-token guess.

The tree the heads fill is data: ``choices`` (Medusa-style rank paths) stored in ``config.json``
beside ``model.safetensors``, in the order a greedy search added them, so every prefix of the list
is itself a valid tree (the drafter cuts it to the loop's ``max_draft``).

    >>> import torch
    >>> cfg = MedusaConfig(hidden_size=8, vocab_size=11, num_heads=2, choices=((0,), (1,), (0, 0)))
    >>> heads = MedusaHeads(cfg)
    >>> lm_head = torch.randn(11, 8)
    >>> heads.logits(torch.randn(5, 8), lm_head).shape      # (positions, heads, vocab)
    torch.Size([5, 2, 11])
    >>> greedy_choices([[0.6, 0.2], [0.4, 0.1]], budget=3)  # per-head, per-rank accuracy
    ((0,), (0, 0), (1,))
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"

# A reasonable tree before any accuracy was measured: two candidates at depth 1, a short spine.
DEFAULT_CHOICES: tuple[tuple[int, ...], ...] = (
    (0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0), (0, 0, 1), (0, 0, 0, 0),
)


@dataclass(frozen=True)
class MedusaConfig:
    """Shape of the heads plus the tree they fill; written as ``config.json`` (no pickle)."""

    hidden_size: int
    vocab_size: int
    num_heads: int = 4
    choices: tuple[tuple[int, ...], ...] = DEFAULT_CHOICES
    # Where the heads came from and how well they did, for people reading the folder.
    meta: dict[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "choices", tuple(tuple(int(r) for r in c) for c in self.choices))
        too_deep = [c for c in self.choices if not 1 <= len(c) <= self.num_heads]
        if too_deep:
            raise ValueError(f"MedusaConfig: choices {too_deep} need 1..{self.num_heads} heads")

    def to_json(self) -> str:
        data = asdict(self)
        data["choices"] = [list(c) for c in self.choices]
        return json.dumps({"model_type": "specpicker_medusa", **data}, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> MedusaConfig:
        data = json.loads(text)
        data.pop("model_type", None)
        data["choices"] = tuple(tuple(c) for c in data["choices"])
        return cls(**data)


class MedusaHeads(torch.nn.Module):
    """K residual SiLU blocks, stacked into one weight so every head runs in one einsum."""

    def __init__(self, config: MedusaConfig) -> None:
        super().__init__()
        self.config = config
        k, h = config.num_heads, config.hidden_size
        # Zero init: the residual block starts as the identity (Medusa's own choice, and a stable one).
        self.weight = torch.nn.Parameter(torch.zeros(k, h, h))
        self.bias = torch.nn.Parameter(torch.zeros(k, h))

    def features(self, hidden: torch.Tensor, heads: int | None = None) -> torch.Tensor:
        """``(..., H)`` last hidden states -> ``(..., K, H)`` per-head features (first ``heads``)."""
        k = self.config.num_heads if heads is None else heads
        z = torch.einsum("...h,kgh->...kg", hidden, self.weight[:k]) + self.bias[:k]
        return hidden.unsqueeze(-2) + F.silu(z)

    def logits(
        self, hidden: torch.Tensor, lm_head: torch.Tensor, heads: int | None = None
    ) -> torch.Tensor:
        """``(..., K, V)`` logits through the target's (frozen) LM head weight ``(V, H)``."""
        return self.features(hidden, heads) @ lm_head.T

    def save(self, folder: Path) -> None:
        """Write ``config.json`` and ``model.safetensors`` into ``folder``."""
        folder.mkdir(parents=True, exist_ok=True)
        tensors = {"heads.weight": self.weight.detach().contiguous(),
                   "heads.bias": self.bias.detach().contiguous()}
        save_file(tensors, str(folder / WEIGHTS_NAME), metadata={"format": "pt"})
        (folder / CONFIG_NAME).write_text(self.config.to_json())

    @classmethod
    def load(cls, folder: str | Path) -> MedusaHeads:
        """Load heads written by :meth:`save` (safetensors + JSON only)."""
        folder = Path(folder)
        config = MedusaConfig.from_json((folder / CONFIG_NAME).read_text())
        heads = cls(config)
        tensors = load_file(str(folder / WEIGHTS_NAME))
        with torch.no_grad():
            heads.weight.copy_(tensors["heads.weight"])
            heads.bias.copy_(tensors["heads.bias"])
        heads.eval()
        return heads


def greedy_choices(
    accuracy: Sequence[Sequence[float]], budget: int
) -> tuple[tuple[int, ...], ...]:
    """The tree of ``budget`` nodes that maximises expected accepted length, built greedily.

    ``accuracy[k][r]`` estimates how often head k's rank-r candidate is the right token. Treating
    depths as independent, a node's chance of being on the accepted path is the product of its
    path's accuracies, and E[accepted] is the sum over nodes (Sequoia; EAGLE-2). Adding the best
    frontier node each time is optimal because a child's product never exceeds its parent's, and
    the result lists nodes in the order added, so each prefix is the best tree of its own size.
    """
    chosen: list[tuple[int, ...]] = []
    value: dict[tuple[int, ...], float] = {}
    frontier: dict[tuple[int, ...], float] = {(r,): float(a) for r, a in enumerate(accuracy[0])}
    while frontier and len(chosen) < budget:
        # Ties go to the shallower, then lexicographically smaller path: stable across runs.
        best = max(frontier, key=lambda path: (frontier[path], -len(path), [-r for r in path]))
        value[best] = frontier.pop(best)
        chosen.append(best)
        depth = len(best)
        if depth < len(accuracy):
            for r, acc in enumerate(accuracy[depth]):
                frontier[(*best, r)] = value[best] * float(acc)
    return tuple(chosen)

"""The batched slab KV cache: one preallocated ``(rows, heads, slots, dim)`` slab per decoder layer.

Each row of the slab is one sequence's cache. The slab holds no lengths of its own: before every
forward the backend tells each layer where the fed tokens go (:meth:`SlabLayer.plan`: the rows
fed, each row's first slot, the padded width T), taken from the ledger's plan
(``picker.engine.rollback.Forward.start``). Slots past a row's committed length hold stale
entries of rejected drafts or padding; the attention mask hides them, and the next forward
overwrites them, so rolling a chain back is free and a tree's rollback only compacts its path.

    >>> import torch
    >>> layer = SlabLayer(capacity=4, rows=2)
    >>> layer.plan(torch.tensor([0, 1]), [3, 0], width=2)       # row 0 writes 3..4, row 1 writes 0..1
    >>> k, v = layer.update(torch.ones(2, 1, 2, 8), torch.ones(2, 1, 2, 8))
    >>> k.shape, layer.capacity                                  # keys for slots 0 .. 4, grown
    (torch.Size([2, 1, 5, 8]), 8)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers.cache_utils import CacheLayerMixin

__all__ = ["SlabLayer"]


class SlabLayer(CacheLayerMixin):
    """One layer's keys and values, written in place at per-row starts, grown by doubling.

    ``DynamicCache`` concatenates on every update (a fresh allocation of the whole layer per
    step); a slab writes the new entries into spare capacity and hands the model a view, so a
    step allocates nothing once the slab is big enough.
    """

    is_croppable = True
    is_sliding = False

    def __init__(self, capacity: int, rows: int = 1) -> None:
        super().__init__()
        self.capacity = capacity
        self.rows = rows
        self._fed: torch.Tensor | None = None  # rows fed by the next update; None: all of them
        self._starts: list[int] = [0]
        self._width = 0
        self._slots: torch.Tensor | None = None

    def plan(self, fed: torch.Tensor | None, starts: Sequence[int], width: int,
             slots: torch.Tensor | None = None) -> None:
        """Where the next update writes: fed row i (slab row ``fed[i]``) at slots ``starts[i]..``
        (``slots``: those ``(B, T)`` slot indices precomputed, shared by every layer)."""
        self._fed, self._starts, self._width, self._slots = fed, list(starts), width, slots

    @property
    def kv_length(self) -> int:
        """Key slots the next forward attends over: up to the furthest row's last fed slot."""
        return max(self._starts) + self._width

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        shape = (self.rows, key_states.shape[1], self.capacity, key_states.shape[3])
        self.keys = key_states.new_zeros(shape)
        self.values = value_states.new_zeros(shape)
        self.is_initialized = True

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.kv_length
        if end > self.capacity:
            self._grow(end)
        width, starts = key_states.shape[-2], self._starts
        if len(set(starts)) == 1:  # one start for every fed row (batch 1 always): plain slices
            s = starts[0]
            if self._fed is None:
                self.keys[:, :, s : s + width] = key_states
                self.values[:, :, s : s + width] = value_states
            else:
                self.keys[self._fed, :, s : s + width] = key_states
                self.values[self._fed, :, s : s + width] = value_states
        else:  # per-row starts: one scatter over (row, slot) pairs, (B, T, H, D) in that order
            slots = self._slots
            if slots is None:
                slots = torch.tensor(starts, device=self.device)[:, None] + torch.arange(width, device=self.device)
            rows = (torch.arange(self.rows, device=self.device) if self._fed is None else self._fed)[:, None]
            self.keys[rows, :, slots] = key_states.transpose(1, 2)
            self.values[rows, :, slots] = value_states.transpose(1, 2)
        if self._fed is None:
            return self.keys[:, :, :end], self.values[:, :, :end]
        return self.keys[self._fed, :, :end], self.values[self._fed, :, :end]

    def _grow(self, needed: int) -> None:
        capacity = max(needed, 2 * self.capacity)
        for name in ("keys", "values"):
            old = getattr(self, name)
            new = old.new_zeros((*old.shape[:2], capacity, old.shape[3]))
            new[:, :, : self.capacity] = old
            setattr(self, name, new)
        self.capacity = capacity

    def add_row(self) -> None:
        """One more row (a sequence's cache), empty; the rows held keep their entries."""
        if self.is_initialized:
            for name in ("keys", "values"):
                old = getattr(self, name)
                setattr(self, name, torch.cat([old, old.new_zeros((1, *old.shape[1:]))]))
        self.rows += 1

    def compact(self, row: int, index: torch.Tensor, base: int) -> None:
        """Move row ``row``'s slots ``index`` to ``base, base + 1, ...`` (gathered first: overlaps are safe)."""
        if self.is_initialized:
            n = index.shape[0]
            self.keys[row, :, base : base + n] = self.keys[row].index_select(1, index)
            self.values[row, :, base : base + n] = self.values[row].index_select(1, index)

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.kv_length, 0

    def get_seq_length(self) -> int:
        return min(self._starts)

    def get_max_length(self) -> int:
        return -1  # grows on demand

    def crop(self, tokens_to_remove: int) -> None:
        raise NotImplementedError("the slab keeps no lengths: roll back through TorchBackend")

    def reset(self) -> None:
        self._starts = [0]

"""The torch backend: a Hugging Face causal LM behind a KV cache that can be rolled back.

One :class:`TorchBackend` wraps any ``AutoModelForCausalLM`` (a local folder, CPU or CUDA). Its
cache holds the committed tokens; :meth:`TorchBackend.forward` appends the pending token(s) and a
draft chain or tree in ONE forward (a 4-D attention mask: each draft node sees the committed
prefix, the pending tokens and its own ancestors; position ids = prefix length + depth), and
:meth:`TorchBackend.rollback` keeps only what verification accepted (a crop for chains; for trees
the accepted path is compacted first, since its nodes need not be contiguous in the cache).

    >>> import torch
    >>> from transformers import LlamaConfig, LlamaForCausalLM
    >>> from picker.engine.tree import TokenTree
    >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
    <...>
    >>> cfg = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
    ...                   num_attention_heads=2, num_key_value_heads=1)
    >>> be = TorchBackend(LlamaForCausalLM(cfg))
    >>> be.forward([1, 5, 9]).logits.shape        # prefill: 3 pending tokens, no drafts
    torch.Size([1, 3, 64])
    >>> tree = TokenTree((7, 8, 3), (-1, -1, 0))  # two children of the root, one grandchild
    >>> out = be.forward([4], tree, logits_from=0)
    >>> out.logits.shape, be.length               # q at the root + after each node; all cached
    (torch.Size([1, 4, 64]), 7)
    >>> be.keep([5, 6], base=4); be.length       # accept node 0 and node 2: compact, then crop
    6

Conventions: ``length`` is the number of cache slots in use; ``crop(length)`` keeps the first
``length`` slots (an absolute length -- note that ``DynamicCache.crop`` in transformers 5.x takes a
*negative count* instead; we do not use it). Shapes are ``(batch, ...)`` throughout; batch 1 is what
the decode loop drives today.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import AutoModelForCausalLM, PreTrainedModel
from transformers.cache_utils import Cache, CacheLayerMixin

from picker.engine.rollback import CacheEdit
from picker.engine.tree import TokenTree

__all__ = ["ForwardOutput", "SlabLayer", "TorchBackend", "resolve_dtype"]

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
HiddenKey = str | int  # "last" (final hidden state, after the final norm) or a decoder-layer index


def resolve_dtype(name: str | torch.dtype) -> torch.dtype:
    """``"float32" | "float16" | "bfloat16"`` (or a torch dtype) -> torch dtype."""
    if isinstance(name, torch.dtype):
        return name
    if name not in _DTYPES:
        raise ValueError(f"unknown dtype {name!r}; choose one of {', '.join(_DTYPES)}")
    return _DTYPES[name]


class SlabLayer(CacheLayerMixin):
    """One layer's keys and values in a preallocated slab, written in place, grown by doubling.

    ``DynamicCache`` concatenates on every update (a fresh allocation of the whole layer per
    step); a slab writes the new entries into spare capacity and hands the model a view, so a
    step allocates nothing once the slab is big enough, and a crop is just a new length.
    """

    is_croppable = True
    is_sliding = False

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity
        self.length = 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        self.keys = key_states.new_zeros((*key_states.shape[:2], self.capacity, key_states.shape[3]))
        self.values = value_states.new_zeros((*value_states.shape[:2], self.capacity, value_states.shape[3]))
        self.is_initialized = True

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        start, end = self.length, self.length + key_states.shape[-2]
        if end > self.capacity:
            self._grow(end)
        self.keys[:, :, start:end] = key_states
        self.values[:, :, start:end] = value_states
        self.length = end
        return self.keys[:, :, :end], self.values[:, :, :end]

    def _grow(self, needed: int) -> None:
        capacity = max(needed, 2 * self.capacity)
        for name in ("keys", "values"):
            old = getattr(self, name)
            new = old.new_zeros((*old.shape[:2], capacity, old.shape[3]))
            new[:, :, : self.length] = old[:, :, : self.length]
            setattr(self, name, new)
        self.capacity = capacity

    def compact(self, index: torch.Tensor, base: int) -> None:
        """Move slots ``index`` to ``base, base + 1, ...`` (gathered first, so overlaps are safe)."""
        if self.is_initialized:
            n = index.shape[0]
            self.keys[:, :, base : base + n] = self.keys.index_select(2, index)
            self.values[:, :, base : base + n] = self.values.index_select(2, index)

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.length + query_length, 0

    def get_seq_length(self) -> int:
        return self.length

    def get_max_length(self) -> int:
        return -1  # grows on demand

    def crop(self, tokens_to_remove: int) -> None:
        # transformers' convention (5.x): a negative count of tokens to drop from the end.
        if tokens_to_remove > 0:
            raise ValueError("SlabLayer.crop takes a negative count; use TorchBackend.crop(length)")
        self.length = max(0, self.length + tokens_to_remove)

    def reset(self) -> None:
        self.length = 0


@dataclass(frozen=True)
class ForwardOutput:
    """Logits for the requested rows, and hidden states for every fed row when asked for.

    ``logits``: ``(B, R, V)`` for fed rows ``logits_from ..`` (R = fed - logits_from).
    ``hidden``: ``{"last": (B, T, H), layer_index: (B, T, H), ...}`` for all T fed rows, or None.
    """

    logits: torch.Tensor
    hidden: dict[HiddenKey, torch.Tensor] | None = None


class TorchBackend:
    """A Hugging Face causal LM with a rollback-able KV cache and tree-masked forwards.

    ``hidden_layers`` lists decoder-layer indices whose outputs :meth:`forward` returns (with
    ``hidden=True``) beside ``"last"``: the output of decoder layer ``i`` (0-based) is
    transformers' ``hidden_states[i + 1]``, the residual stream before any norm -- except for the
    last layer, whose entry transformers 5.x replaces by the final-norm output (``"last"``).
    ``forward_seconds`` / ``forward_calls`` count time spent inside model forwards, so callers
    can tell model time from their own overhead.
    """

    def __init__(
        self, model: PreTrainedModel, *, hidden_layers: Sequence[int] = (), capacity: int = 256
    ) -> None:
        self.model = model.eval()
        text_config = model.config.get_text_config()
        self.num_layers = int(text_config.num_hidden_layers)
        self.vocab_size = int(text_config.vocab_size)
        bad = [i for i in hidden_layers if not 0 <= i < self.num_layers]
        if bad:
            raise ValueError(f"hidden_layers {bad} outside 0..{self.num_layers - 1}")
        self.hidden_layers = tuple(int(i) for i in hidden_layers)
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self._layers = [SlabLayer(capacity) for _ in range(self.num_layers)]
        self.cache = Cache(layers=list(self._layers))
        self._blocks: dict[tuple[int, tuple[int, ...]], tuple[torch.Tensor, torch.Tensor]] = {}
        self._positions = torch.arange(capacity, device=self.device)[None]
        self._neg = torch.finfo(self.dtype).min  # additive "masked" value: works for sdpa and eager
        self.forward_seconds = 0.0
        self.forward_calls = 0

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        *,
        device: str = "cpu",
        dtype: str | torch.dtype = "float32",
        hidden_layers: Sequence[int] = (),
        attn_implementation: str = "sdpa",
    ) -> TorchBackend:
        """Load a local Hugging Face folder (``config.json`` + safetensors) onto ``device``."""
        model = AutoModelForCausalLM.from_pretrained(
            str(path), dtype=resolve_dtype(dtype), attn_implementation=attn_implementation,
            local_files_only=True,
        )
        return cls(model.to(device), hidden_layers=hidden_layers)

    @property
    def length(self) -> int:
        """Cache slots in use: the committed tokens (plus a forward's drafts until rollback)."""
        return self._layers[0].length

    def reset(self) -> None:
        """Forget every cached token (the slabs are kept for the next sequence)."""
        for layer in self._layers:
            layer.length = 0

    def prefill(self, ids: Sequence[int], *, hidden: bool = False) -> ForwardOutput:
        """Reset, then feed ``ids`` causally; logits for the last row only."""
        self.reset()
        return self.forward(ids, logits_from=len(ids) - 1, hidden=hidden)

    def forward(
        self,
        tokens: Sequence[int],
        tree: TokenTree | None = None,
        *,
        logits_from: int = 0,
        hidden: bool = False,
        layers: Sequence[int] | None = None,
    ) -> ForwardOutput:
        """Append ``tokens`` (fed causally) then ``tree``'s nodes (tree attention) to the cache.

        Row ``len(tokens) - 1`` of the fed rows holds q at the root (after the last pending
        token); row ``len(tokens) + i`` holds q after draft node i. Logits are computed for rows
        ``logits_from ..`` only (a long prefill needs just its last row). With ``hidden``, also
        return hidden states for every fed row: ``"last"`` and the decoder layers ``layers``
        (default: the backend's ``hidden_layers``).
        """
        if torch.is_inference_mode_enabled():  # the decode loop enters it once per generation
            return self._forward(tokens, tree, logits_from, hidden, layers)
        with torch.inference_mode():
            return self._forward(tokens, tree, logits_from, hidden, layers)

    def _forward(
        self,
        tokens: Sequence[int],
        tree: TokenTree | None,
        logits_from: int,
        hidden: bool,
        layers: Sequence[int] | None,
    ) -> ForwardOutput:
        p = len(tokens)
        nodes = () if tree is None else tree.tokens
        fed = p + len(nodes)
        if p < 1 or not 0 <= logits_from < fed:
            raise ValueError(f"forward: need >= 1 pending token and 0 <= logits_from < {fed}")
        start = self.length
        block, offsets = self._block(p, tree)
        # numpy -> torch is several times cheaper than torch.tensor(list) for a handful of ids.
        ids = torch.from_numpy(np.array([[*tokens, *nodes]], dtype=np.int64)).to(self.device)
        mask = None
        if block is None:  # causal: positions start, start + 1, ... (a view of a shared arange)
            positions = self._arange(start + fed)[:, start : start + fed]
        else:  # (1, 1, T, start + T): everything committed is visible, the block says the rest
            positions = offsets + start
            mask = torch.cat((block.new_zeros((1, 1, fed, start)), block), dim=-1)
        t0 = time.perf_counter()
        out = self.model(
            input_ids=ids, attention_mask=mask, position_ids=positions, cache=self.cache,
            use_cache=True, logits_to_keep=fed - logits_from, output_hidden_states=hidden,
        )
        self.forward_seconds += time.perf_counter() - t0
        self.forward_calls += 1
        if not hidden:
            return ForwardOutput(out.logits)
        return ForwardOutput(out.logits, self._hidden(out.hidden_states, layers))

    def _arange(self, n: int) -> torch.Tensor:
        if self._positions.shape[1] < n:
            size = max(n, 2 * self._positions.shape[1])
            self._positions = torch.arange(size, device=self.device)[None]
        return self._positions

    def _hidden(
        self, states: tuple[torch.Tensor, ...], layers: Sequence[int] | None
    ) -> dict[HiddenKey, torch.Tensor]:
        picked: dict[HiddenKey, torch.Tensor] = {"last": states[-1]}
        for i in self.hidden_layers if layers is None else layers:
            if not 0 <= i < self.num_layers:
                raise ValueError(f"hidden layer {i} outside 0..{self.num_layers - 1}")
            picked[i] = states[i + 1]
        return picked

    def _block(self, p: int, tree: TokenTree | None) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """The (T, T) additive mask among fed rows and their position offsets, cached per shape.

        A causal block (no drafts, or a chain) needs no explicit mask: transformers builds the
        causal one, and positions are consecutive. Trees of one shape recur every step (static
        trees), so their block and offsets are built once.
        """
        if tree is None or all(par == i - 1 for i, par in enumerate(tree.parents)):
            return None, None
        key = (p, tree.parents)
        hit = self._blocks.get(key)
        if hit is not None:
            return hit
        fed = p + len(tree)
        offsets = torch.tensor([[*range(p), *(p - 1 + d for d in tree.depths)]], device=self.device)
        allowed = torch.ones((fed, fed), dtype=torch.bool).tril()  # pending rows: causal
        allowed[p:, p:] = torch.from_numpy(tree.ancestor_mask().copy())
        block = torch.zeros((1, 1, fed, fed), dtype=self.dtype)
        block.masked_fill_(~allowed, self._neg)
        if len(self._blocks) > 64:  # dynamic trees change shape every step: keep the dict small
            self._blocks.clear()
        self._blocks[key] = (block.to(self.device), offsets)
        return self._blocks[key]

    def crop(self, length: int) -> None:
        """Keep the first ``length`` cache slots (an absolute length, never more than held)."""
        if not 0 <= length <= self.length:
            raise ValueError(f"crop: length {length} outside 0..{self.length}")
        for layer in self._layers:
            layer.length = length

    def keep(self, indices: Sequence[int], base: int) -> None:
        """Compact: copy slots ``indices`` (increasing, >= base) to ``base, ...``, crop after them."""
        index = torch.tensor(list(indices), dtype=torch.long, device=self.device)
        if index.numel() and (int(index[0]) < base or int(index[-1]) >= self.length):
            raise ValueError(f"keep: slots {list(indices)} outside {base}..{self.length - 1}")
        if not all(int(i) == base + k for k, i in enumerate(indices)):
            with torch.inference_mode():  # the slabs are inference tensors: edit them in that mode
                for layer in self._layers:
                    layer.compact(index, base)
        self.crop(base + len(indices))

    def rollback(self, edit: CacheEdit) -> None:
        """Apply a :class:`picker.engine.rollback.CacheEdit`: a crop for chains, a compaction for trees."""
        if edit.is_crop:
            self.crop(edit.length)
        else:
            self.keep(edit.keep, edit.base)

    def cache_tensors(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer ``(keys, values)`` views of the slots in use (for tests and inspection)."""
        n = self.length
        return [(layer.keys[:, :, :n], layer.values[:, :, :n]) for layer in self._layers]

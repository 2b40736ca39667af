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

Two ways to drive it. The decode loop runs :meth:`TorchBackend.run` on a
:class:`~picker.engine.rollback.BatchForward` -- B sequences, each at its own start, positions and
tree, padded to one width T, in ONE forward over a batched slab cache (``rows`` of them;
``picker.engine.slab``) with a 4-D additive mask -- and :meth:`TorchBackend.apply` on the ledger's
:class:`~picker.engine.rollback.BatchEdit`. There the ledger owns every length and position and
the backend keeps none. Callers without a ledger (a draft model's own cache, the sweep) use
``forward`` / ``crop`` / ``keep`` on row 0, which track ``length`` for them: the number of cache
slots in use; ``crop(length)`` keeps the first ``length`` slots (an absolute length -- note that
``DynamicCache.crop`` in transformers 5.x takes a *negative count* instead; we do not use it).
A draft model serving several sequences at once plans its own forwards over rows it borrows
(:meth:`TorchBackend.lend_row`), each at the start its drafter tracks.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForCausalLM, PreTrainedModel
from transformers.cache_utils import Cache

from picker.engine.rollback import BatchEdit, BatchForward, CacheEdit, Forward, plan_forward
from picker.engine.slab import SlabLayer
from picker.engine.tree import TokenTree
from picker.errors import UserError

__all__ = ["ForwardOutput", "TorchBackend", "resolve_device", "resolve_dtype"]
_NO_DRAFTS = TokenTree((), ())

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
HiddenKey = str | int  # "last" (final hidden state, after the final norm) or a decoder-layer index


def resolve_dtype(name: str | torch.dtype) -> torch.dtype:
    """``"float32" | "float16" | "bfloat16"`` (or a torch dtype) -> torch dtype."""
    if isinstance(name, torch.dtype):
        return name
    if name not in _DTYPES:
        raise ValueError(f"unknown dtype {name!r}; choose one of {', '.join(_DTYPES)}")
    return _DTYPES[name]


def resolve_device(spec: str | torch.device) -> torch.device:
    """``"cpu" | "cuda" | "cuda:N"`` as a device the models can load onto here, or one UserError."""
    try:
        device = torch.device(spec)
    except (RuntimeError, ValueError):
        raise UserError(f"unknown device {spec!r}; use cpu, cuda or cuda:N", field="--device") from None
    if device.type == "cpu":
        return device
    if device.type != "cuda":
        raise UserError(f"device type {device.type!r} is not supported; use cpu, cuda or cuda:N", field="--device")
    if not torch.cuda.is_available():
        raise UserError("no CUDA device here (torch.cuda.is_available() is False); use --device cpu",
                        field="--device")
    if device.index is not None and device.index >= torch.cuda.device_count():
        raise UserError(f"{spec}: this machine has {torch.cuda.device_count()} CUDA device(s)", field="--device")
    return device


@dataclass(frozen=True)
class ForwardOutput:
    """Logits for the requested rows, and hidden states for every fed row when asked for.

    ``logits``: ``(B, R, V)`` for fed rows ``first ..`` (R = T - first, T the padded width).
    ``hidden``: ``{"last": (B, T, H), layer_index: (B, T, H), ...}`` for all T fed rows, or None.
    """

    logits: torch.Tensor
    hidden: dict[HiddenKey, torch.Tensor] | None = None
    first: int = 0

    def q_rows(self, i: int, plan: Forward) -> torch.Tensor:
        """Sequence i's q at the root and after each of its draft nodes, ``(M + 1, V)``."""
        return self.logits[i, plan.q_rows.start - self.first : plan.q_rows.stop - self.first]


class TorchBackend:
    """A Hugging Face causal LM with a batched, rollback-able KV cache and tree-masked forwards.

    ``rows``: how many sequences its cache holds at once (the loop's concurrency).
    ``hidden_layers`` lists decoder-layer indices whose outputs a forward returns (with
    ``hidden=True``) beside ``"last"``: the output of decoder layer ``i`` (0-based) is
    transformers' ``hidden_states[i + 1]``, the residual stream before any norm -- except for the
    last layer, whose entry transformers 5.x replaces by the final-norm output (``"last"``).
    ``forward_seconds`` / ``forward_calls`` count time spent inside model forwards, so callers
    can tell model time from their own overhead.
    """

    def __init__(
        self, model: PreTrainedModel, *, hidden_layers: Sequence[int] = (), capacity: int = 256, rows: int = 1
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
        self.rows = rows
        self._layers = [SlabLayer(capacity, rows) for _ in range(self.num_layers)]
        self.cache = Cache(layers=list(self._layers))
        self._blocks: dict[tuple[int, tuple[int, ...], int], np.ndarray] = {}
        self._neg = torch.finfo(self.dtype).min  # additive "masked" value: works for sdpa and eager
        self.length = 0  # row 0's slots in use, for callers without a ledger (forward/crop/keep)
        self._lent_free: list[int] = []  # rows given back through return_row, lent again first
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
        rows: int = 1,
    ) -> TorchBackend:
        """Load a local Hugging Face folder (``config.json`` + safetensors) onto ``device``."""
        where = resolve_device(device)  # before the weights load: a bad device costs nothing
        model = AutoModelForCausalLM.from_pretrained(
            str(path), dtype=resolve_dtype(dtype), attn_implementation=attn_implementation,
            local_files_only=True,
        )
        return cls(model.to(where), hidden_layers=hidden_layers, rows=rows)

    def with_rows(self, rows: int) -> TorchBackend:
        """A backend over the same model (weights shared) whose cache holds ``rows`` sequences."""
        if rows == self.rows:
            return self
        return TorchBackend(self.model, hidden_layers=self.hidden_layers, rows=rows)

    def lend_row(self) -> int:
        """A cache row for one more sequence of a caller without a ledger (a draft model serving
        several sequences: row 0 is its first one's). A returned row, else a new one; the rows
        in use keep their entries. Never mix with a :class:`BatchLedger` driving the same rows."""
        if self._lent_free:
            return self._lent_free.pop()
        with torch.inference_mode():  # the slabs are inference tensors
            for layer in self._layers:
                layer.add_row()
        self.rows += 1
        return self.rows - 1

    def return_row(self, row: int) -> None:
        """``row`` (from :meth:`lend_row`) is no longer used: lend it again."""
        self._lent_free.append(row)

    def reset(self) -> None:
        """Forget row 0's tokens (the slabs are kept for the next sequence)."""
        self.length = 0

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
        """Row 0, without a ledger: append ``tokens`` (causal) then ``tree``'s nodes at ``length``.

        Row ``len(tokens) - 1`` of the fed rows holds q at the root (after the last pending
        token); row ``len(tokens) + i`` holds q after draft node i. Logits are computed for rows
        ``logits_from ..`` only (a long prefill needs just its last row).
        """
        plan = plan_forward(self.length, tokens, _NO_DRAFTS if tree is None else tree)
        fed = len(plan.tokens)
        if len(tokens) < 1 or not 0 <= logits_from < fed:
            raise ValueError(f"forward: need >= 1 pending token and 0 <= logits_from < {fed}")
        out = self.run(BatchForward((0,), (plan,)), hidden=hidden, layers=layers, logits_from=logits_from)
        self.length = plan.start + fed
        return out

    def run(
        self,
        batch: BatchForward,
        *,
        hidden: bool = False,
        layers: Sequence[int] | None = None,
        logits_from: int | None = None,
    ) -> ForwardOutput:
        """ONE forward over every planned row: fed tokens at their ledger positions and slots.

        Rows are padded on the right to the widest; logits come for fed rows from ``logits_from``
        (default: the first q row any sequence needs). With ``hidden``, hidden states for every
        fed row: ``"last"`` and the decoder layers ``layers`` (default: ``hidden_layers``).
        """
        if torch.is_inference_mode_enabled():  # the decode loop enters it once per generation
            return self._run(batch, hidden, layers, logits_from)
        with torch.inference_mode():
            return self._run(batch, hidden, layers, logits_from)

    def _run(
        self, batch: BatchForward, hidden: bool, layers: Sequence[int] | None, logits_from: int | None
    ) -> ForwardOutput:
        plans, width = batch.plans, batch.width
        first = min(f.q_rows.start for f in plans) if logits_from is None else logits_from
        # numpy -> torch is several times cheaper than torch.tensor(list) for a handful of ids.
        ids = np.zeros((len(plans), width), dtype=np.int64)
        pos = np.empty((len(plans), width), dtype=np.int64)
        for i, f in enumerate(plans):
            n = len(f.tokens)
            ids[i, :n], pos[i, :n] = f.tokens, f.positions
            pos[i, n:] = f.positions[-1] + 1  # padding: any position; its rows are masked out
        fed_rows = None if batch.rows == tuple(range(self.rows)) else torch.tensor(batch.rows, device=self.device)
        starts = [f.start for f in plans]
        slots = None  # per-row starts: the (B, T) slot of every fed token, built once for all layers
        if len(set(starts)) > 1:
            slots = torch.from_numpy(np.add.outer(np.array(starts), np.arange(width))).to(self.device)
        for layer in self._layers:
            layer.plan(fed_rows, starts, width, slots)
        # Causal chains at one start and one width (plain decoding of a batch in step, any chain at
        # batch 1) need no explicit mask: transformers builds the causal one itself, more cheaply.
        causal = len(set(starts)) == 1 and all(f.drafts.is_chain and len(f.tokens) == width for f in plans)
        mask = None if causal else self._mask(plans, width)
        t0 = time.perf_counter()
        out = self.model(
            input_ids=torch.from_numpy(ids).to(self.device), attention_mask=mask,
            position_ids=torch.from_numpy(pos).to(self.device), cache=self.cache, use_cache=True,
            logits_to_keep=width - first, output_hidden_states=hidden,
        )
        if self.device.type == "cuda":  # kernels run asynchronously: time the forward, not its launch
            torch.cuda.synchronize(self.device)
        self.forward_seconds += time.perf_counter() - t0
        self.forward_calls += 1
        states = self._hidden(out.hidden_states, layers) if hidden else None
        return ForwardOutput(out.logits, states, first)

    def _hidden(
        self, states: tuple[torch.Tensor, ...], layers: Sequence[int] | None
    ) -> dict[HiddenKey, torch.Tensor]:
        picked: dict[HiddenKey, torch.Tensor] = {"last": states[-1]}
        for i in self.hidden_layers if layers is None else layers:
            if not 0 <= i < self.num_layers:
                raise ValueError(f"hidden layer {i} outside 0..{self.num_layers - 1}")
            picked[i] = states[i + 1]
        return picked

    def _mask(self, plans: Sequence[Forward], width: int) -> torch.Tensor:
        """``(B, 1, T, S)`` additive mask: row b sees its committed slots ``< start_b``, then its own
        fed tokens as its block says (causal pending tokens, tree drafts); nothing of other rows'."""
        start = np.array([f.start for f in plans])
        kv = int(start.max()) + width
        starts = torch.from_numpy(start).to(self.device)[:, None, None]
        rel = torch.arange(kv, device=self.device)[None, None, :] - starts  # (B, 1, S): fed index
        if all(f.drafts.is_chain for f in plans):  # causal rows: fed token i sees fed tokens <= i
            # (a padding row then also sees earlier padding of its own row: harmless, never read)
            allowed = rel <= torch.arange(width, device=self.device)[None, :, None]
        else:
            block = torch.from_numpy(np.stack([self._block(f, width) for f in plans])).to(self.device)
            own = torch.gather(block, 2, rel.clamp(0, width - 1).expand(-1, width, -1))
            allowed = (rel < 0) | ((rel < width) & own)
        mask = torch.zeros((len(plans), 1, width, kv), dtype=self.dtype, device=self.device)
        return mask.masked_fill_(~allowed[:, None], self._neg)

    def _block(self, plan: Forward, width: int) -> np.ndarray:
        """Bool ``(T, T)``: which of a row's fed tokens each fed token sees, cached per shape.

        Pending tokens are causal; draft nodes see every pending token and their own ancestors;
        padding rows see only themselves (a row with nothing visible would give NaN). Trees of one
        shape recur every step (static trees), so their block is built once.
        """
        p, parents = plan.n_pending, plan.drafts.parents
        key = (p, parents, width)
        hit = self._blocks.get(key)
        if hit is not None:
            return hit
        n = p + len(parents)
        allowed = np.eye(width, dtype=bool)
        allowed[:n, :n] = np.tri(n, dtype=bool)  # pending rows: causal
        allowed[p:n, p:n] = plan.drafts.ancestor_mask()
        if len(self._blocks) > 256:  # dynamic trees change shape every step: keep the dict small
            self._blocks.clear()
        self._blocks[key] = allowed
        return allowed

    def apply(self, edit: BatchEdit) -> None:
        """Roll every row back as the ledger says: chains need nothing (their stale slots are masked
        and overwritten), a tree's accepted path is compacted to consecutive slots."""
        for row, e in zip(edit.rows, edit.edits):
            if not e.is_crop:
                self._compact(row, e.keep, e.base)

    def _compact(self, row: int, indices: Sequence[int], base: int) -> None:
        index = torch.tensor(list(indices), dtype=torch.long, device=self.device)
        with torch.inference_mode():  # the slabs are inference tensors: edit them in that mode
            for layer in self._layers:
                layer.compact(row, index, base)

    def crop(self, length: int) -> None:
        """Row 0: keep the first ``length`` cache slots (an absolute length, never more than held)."""
        if not 0 <= length <= self.length:
            raise ValueError(f"crop: length {length} outside 0..{self.length}")
        self.length = length

    def keep(self, indices: Sequence[int], base: int) -> None:
        """Row 0: copy slots ``indices`` (increasing, >= base) to ``base, ...``, crop after them."""
        idx = [int(i) for i in indices]
        if idx and (idx[0] < base or idx[-1] >= self.length):
            raise ValueError(f"keep: slots {idx} outside {base}..{self.length - 1}")
        if idx != list(range(base, base + len(idx))):
            self._compact(0, idx, base)
        self.crop(base + len(idx))

    def rollback(self, edit: CacheEdit) -> None:
        """Row 0: apply a :class:`picker.engine.rollback.CacheEdit` (a crop, or a compaction for trees)."""
        if edit.is_crop:
            self.crop(edit.length)
        else:
            self.keep(edit.keep, edit.base)

    def cache_tensors(self, row: int = 0, length: int | None = None) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer ``(keys, values)`` of ``row``'s first ``length`` slots (default: row 0's ``length``)."""
        n = self.length if length is None else length
        return [(layer.keys[row : row + 1, :, :n], layer.values[row : row + 1, :, :n]) for layer in self._layers]

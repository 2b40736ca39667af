"""KV-cache bookkeeping for speculative decoding: what the target's cache holds after each step.

Convention. The last emitted token of a sequence is *pending*: emitted, but not yet fed to the
target. A verify forward feeds the pending token(s) followed by the drafts (a chain, or a tree in
node order with tree attention). After verification the cache keeps exactly the pending tokens and
the accepted drafts; the correction or bonus token is emitted and becomes the new pending token,
so it enters the cache with the next forward.

    >>> from picker.engine.verify import VerifyResult
    >>> ledger = KVLedger(range(10))                 # a 10-token prompt, all pending
    >>> fwd = ledger.forward([41, 42, 43, 44, 45])   # feed the prompt plus 5 drafts
    >>> fwd.q_rows                                   # logits rows holding q_1 .. q_6
    slice(9, 15, None)
    >>> ledger.commit(VerifyResult(2, (41, 42, 7), (0, 1)))   # d_3 rejected, correction 7
    CacheEdit(length=12, base=10, keep=(10, 11))
    >>> ledger.cache_len, ledger.pending
    (12, (7,))

Under load, a :class:`BatchLedger` keeps one :class:`KVLedger` per row of the backend's batched
cache: sequences join (``admit``) and leave (``release``) at any step, and one
:class:`BatchForward` plans every live row's forward at its own start, positions and tree.

    >>> batch = BatchLedger(rows=2)
    >>> batch.admit([1, 2, 3]), batch.admit([4, 5])
    (0, 1)
    >>> [f.start for f in batch.forward({0: TokenTree((), ()), 1: TokenTree((), ())}).plans]
    [0, 0]

Tree drafts: the accepted path's nodes need not be contiguous in the cache. :class:`CacheEdit` then
lists the cache slots to keep, and the backend compacts them to ``base, base + 1, ...`` before
cropping to ``length``. Each node was computed at position ``base + depth - 1``, and the k-th
node of an accepted path has depth k + 1, so after compaction slot == position, as RoPE expects.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from picker.engine.tree import TokenTree
from picker.engine.verify import VerifyResult

__all__ = ["BatchEdit", "BatchForward", "BatchLedger", "CacheEdit", "Forward", "KVLedger", "plan_forward"]


@dataclass(frozen=True)
class Forward:
    """One sequence's share of a target forward: what to feed, at which positions, where q lands.

    The backend consumes it as is: it writes the fed tokens' keys and values to slots
    ``start .. start + len(tokens) - 1`` and lets each one see the committed slots ``< start``
    plus the fed tokens ``visible`` says (causal among the pending tokens, tree attention among
    the drafts).
    """

    tokens: tuple[int, ...]  # the pending tokens, then the draft nodes in node order
    positions: tuple[int, ...]  # position id of every fed token
    start: int  # cache slot of the first fed token (the committed length)
    drafts: TokenTree  # the drafts fed after the pending tokens (a chain is a path)
    q_rows: slice  # fed rows with q at the root, then after each draft node

    @property
    def n_pending(self) -> int:
        return len(self.tokens) - len(self.drafts)


def plan_forward(start: int, pending: Sequence[int], drafts: TokenTree) -> Forward:
    """Feed ``pending`` causally at slot ``start`` onwards, then ``drafts`` with tree positions."""
    n_pending = len(pending)
    base = start + n_pending  # slot and position of the first draft node
    positions = (*range(start, base), *(base + int(o) for o in drafts.position_offsets()))
    # Row n_pending - 1 is the output after the last pending token: q at the root.
    return Forward(tokens=(*pending, *drafts.tokens), positions=positions, start=start, drafts=drafts,
                   q_rows=slice(n_pending - 1, n_pending + len(drafts)))


@dataclass(frozen=True)
class CacheEdit:
    """How to roll the cache back after verification.

    Copy slots ``keep`` (all >= ``base``, increasing) to ``base, base + 1, ...``, then crop to
    ``length``. When ``keep`` is already ``base .. length - 1`` (chains), cropping alone does it.
    """

    length: int
    base: int
    keep: tuple[int, ...]

    @property
    def is_crop(self) -> bool:
        """True when no entry has to move: ``crop(length)`` is the whole edit."""
        return self.keep == tuple(range(self.base, self.length))


class KVLedger:
    """Tracks the committed cache length, the pending tokens and a forward in flight."""

    def __init__(self, prompt: Iterable[int]) -> None:
        self._cached: list[int] = []
        self._pending: list[int] = [int(t) for t in prompt]
        if not self._pending:
            raise ValueError("KVLedger: the prompt must have at least one token")
        self._in_flight: Forward | None = None

    @property
    def cache_len(self) -> int:
        """Entries of the cache that hold committed tokens (what survives the last crop)."""
        return len(self._cached)

    @property
    def pending(self) -> tuple[int, ...]:
        """Emitted tokens that the next forward must feed first."""
        return tuple(self._pending)

    @property
    def sequence(self) -> tuple[int, ...]:
        """Every token emitted so far (prompt included): the cached ones, then the pending ones."""
        return (*self._cached, *self._pending)

    def forward(self, drafts: Sequence[int] | TokenTree = ()) -> Forward:
        """Record a target forward of the pending tokens followed by ``drafts``; return its plan."""
        if self._in_flight is not None:
            raise RuntimeError("KVLedger.forward: the previous forward was not committed")
        tree = drafts if isinstance(drafts, TokenTree) else TokenTree.from_chain(drafts)
        fwd = plan_forward(self.cache_len, self._pending, tree)
        self._in_flight = fwd
        return fwd

    def commit(self, result: VerifyResult) -> CacheEdit:
        """Keep the pending tokens and the accepted path; the extra token becomes pending."""
        fwd = self._in_flight
        if fwd is None:
            raise RuntimeError("KVLedger.commit: no forward in flight")
        tree = fwd.drafts
        nodes = result.accepted_nodes
        if not tree.is_root_path(nodes):
            raise ValueError(f"KVLedger.commit: {list(nodes)} is not a path from the root")
        if tuple(tree.tokens[i] for i in nodes) != result.tokens[:-1]:
            raise ValueError("KVLedger.commit: accepted tokens differ from the drafted ones")
        base = fwd.start + len(self._pending)
        self._cached.extend(self._pending)
        self._cached.extend(result.tokens[:-1])
        self._pending = [result.extra_token]
        self._in_flight = None
        return CacheEdit(length=base + len(nodes), base=base, keep=tuple(base + i for i in nodes))


@dataclass(frozen=True)
class BatchForward:
    """One target forward over several sequences: ``plans[i]`` goes to cache row ``rows[i]``."""

    rows: tuple[int, ...]
    plans: tuple[Forward, ...]

    @property
    def width(self) -> int:
        """Fed tokens per row once padded to the longest row (T of the forward's (B, T) input)."""
        return max(len(f.tokens) for f in self.plans)


@dataclass(frozen=True)
class BatchEdit:
    """Per-row rollbacks after one batched verification (``edits[i]`` for cache row ``rows[i]``)."""

    rows: tuple[int, ...]
    edits: tuple[CacheEdit, ...]


class BatchLedger:
    """One :class:`KVLedger` per cache row; rows are lent to sequences and given back."""

    def __init__(self, rows: int) -> None:
        if rows < 1:
            raise ValueError("BatchLedger: need at least one row")
        self._rows: list[KVLedger | None] = [None] * rows

    @property
    def free(self) -> int:
        """Rows no sequence holds."""
        return self._rows.count(None)

    @property
    def live(self) -> tuple[int, ...]:
        """Rows held by a sequence, in row order."""
        return tuple(r for r, led in enumerate(self._rows) if led is not None)

    def admit(self, prompt: Iterable[int]) -> int:
        """Give the lowest free row to a new sequence (its prompt all pending); return the row."""
        row = self._rows.index(None)  # ValueError when full: the caller checks ``free``
        self._rows[row] = KVLedger(prompt)
        return row

    def release(self, row: int) -> None:
        """The sequence in ``row`` is done: the row (and its stale cache slots) can be lent again."""
        self._rows[row] = None

    def __getitem__(self, row: int) -> KVLedger:
        led = self._rows[row]
        if led is None:
            raise KeyError(f"BatchLedger: row {row} is free")
        return led

    def forward(self, drafts: Mapping[int, TokenTree]) -> BatchForward:
        """Plan one forward: every row in ``drafts`` feeds its pending tokens, then its tree."""
        rows = tuple(sorted(drafts))
        return BatchForward(rows, tuple(self[r].forward(drafts[r]) for r in rows))

    def commit(self, results: Mapping[int, VerifyResult]) -> BatchEdit:
        """Commit every row's verification; the per-row cache edits for the backend."""
        rows = tuple(sorted(results))
        return BatchEdit(rows, tuple(self[r].commit(results[r]) for r in rows))

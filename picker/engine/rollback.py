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

Tree drafts: the accepted path's nodes need not be contiguous in the cache. :class:`CacheEdit` then
lists the cache slots to keep, and the backend compacts them to ``base, base + 1, ...`` before
cropping to ``length``. Each node was computed at position ``base + depth - 1``, and the k-th
node of an accepted path has depth k + 1, so after compaction slot == position, as RoPE expects.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from picker.engine.tree import TokenTree
from picker.engine.verify import VerifyResult

__all__ = ["CacheEdit", "Forward", "KVLedger"]


@dataclass(frozen=True)
class Forward:
    """One target forward: the tokens to feed, their position ids, and where q_1 lands."""

    tokens: tuple[int, ...]  # the pending tokens, then the draft nodes in node order
    positions: tuple[int, ...]  # position id of every fed token
    start: int  # cache slot of the first fed token (the committed length)
    drafts: TokenTree  # the drafts fed after the pending tokens (a chain is a path)
    q_rows: slice  # logits rows with q at the root, then after each draft node


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
    def cached_tokens(self) -> tuple[int, ...]:
        """The committed tokens, slot by slot."""
        return tuple(self._cached)

    @property
    def sequence(self) -> tuple[int, ...]:
        """Every token emitted so far (prompt included): the cached ones, then the pending ones."""
        return (*self._cached, *self._pending)

    @property
    def physical_len(self) -> int:
        """Entries the model's cache holds right now, drafts of a forward in flight included."""
        if self._in_flight is None:
            return self.cache_len
        return self._in_flight.start + len(self._in_flight.tokens)

    def forward(self, drafts: Sequence[int] | TokenTree = ()) -> Forward:
        """Record a target forward of the pending tokens followed by ``drafts``; return its plan."""
        if self._in_flight is not None:
            raise RuntimeError("KVLedger.forward: the previous forward was not committed")
        tree = drafts if isinstance(drafts, TokenTree) else TokenTree.from_chain(drafts)
        start, n_pending = self.cache_len, len(self._pending)
        base = start + n_pending  # slot and position of the first draft node
        positions = (*range(start, base), *(base + int(o) for o in tree.position_offsets()))
        fwd = Forward(
            tokens=(*self._pending, *tree.tokens),
            positions=positions,
            start=start,
            drafts=tree,
            # Row n_pending - 1 is the output after the last pending token: q at the root.
            q_rows=slice(n_pending - 1, n_pending + len(tree)),
        )
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

"""When a sequence stops: max new tokens, an EOS token, or a stop string (decoded from its tail).

    >>> stopper = Stopper(4, eos_token_id=1, stop=(), tokenizer=None)
    >>> out: list[int] = []
    >>> stopper.emit(out, [7, 8]), stopper.emit(out, [1, 9])
    (([7, 8], None), ([1], 'eos'))

The output ends with the token that completes the first stop string (the string itself is kept in
the decoded text).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

__all__ = ["Decoder", "StopReason", "Stopper"]

StopReason = Literal["max_tokens", "eos", "stop"]


class Decoder(Protocol):
    """Anything with ``decode(ids) -> str`` (a ``tokenizers.Tokenizer`` or a transformers one)."""

    def decode(self, ids: list[int]) -> str: ...


class Stopper:
    """Appends emitted tokens to the output and says when and why to stop."""

    def __init__(
        self,
        max_new_tokens: int,
        eos_token_id: int | Sequence[int] | None,
        stop: Sequence[str],
        tokenizer: Decoder | None,
    ) -> None:
        if max_new_tokens < 1:
            raise ValueError("max_new_tokens must be >= 1")
        if stop and tokenizer is None:
            raise ValueError("stop strings need a tokenizer")
        self.max_new = max_new_tokens
        eos = () if eos_token_id is None else eos_token_id
        self.eos = frozenset([eos] if isinstance(eos, int) else eos)
        self.stop = tuple(s for s in stop if s)
        self.tokenizer = tokenizer
        # A stop string of s characters spans at most 4*s byte-level tokens (UTF-8), +1 for a
        # token that straddles its start: decoding that tail suffices, not the whole output.
        self.tail = 4 * max((len(s) for s in self.stop), default=0) + 1

    def emit(self, out: list[int], new: Sequence[int]) -> tuple[list[int], StopReason | None]:
        """Append what fits; return the appended tokens and the stop reason, if any."""
        room = self.max_new - len(out)
        take = list(new[:room])
        reason: StopReason | None = "max_tokens" if len(new) >= room else None
        for i, tok in enumerate(take):
            if tok in self.eos:
                take, reason = take[: i + 1], "eos"
                break
        start = len(out)
        out.extend(take)
        if self.stop:
            cut = self._stop_cut(out, start)
            if cut is not None:
                del out[cut:]
                take, reason = out[start:], "stop"
        return take, reason

    def _stop_cut(self, out: list[int], start: int) -> int | None:
        """Length of the shortest output that ends a stop string begun after ``start - tail``."""
        assert self.tokenizer is not None
        lo = max(0, start - self.tail)
        if not any(s in self.tokenizer.decode(out[lo:]) for s in self.stop):
            return None
        for end in range(max(start, lo + 1), len(out) + 1):
            if any(s in self.tokenizer.decode(out[lo:end]) for s in self.stop):
                return end
        return None  # pragma: no cover - the full tail matched above

"""Test doubles and exact references for the conformance suite.

* :class:`CheckingBackend` -- the real backend, plus a check after every rollback that its KV cache
  equals a fresh prefill of the tokens it keeps.
* :class:`ReplayBackend` -- the real backend answering each fed row from a memo keyed by that row's
  whole context (a model is a pure function of it), so it returns exactly what a fresh forward
  would; a forward with an unseen row runs for real. It lets the distribution test draw thousands
  of samples at one fixed context cheaply.
* :func:`exact_joint` / :func:`chi_square` -- the target's exact distribution of the first
  generated tokens, binned so every bin expects at least 5 samples, and a goodness-of-fit test.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from scipy import stats

from picker.engine.backend import ForwardOutput, TorchBackend
from picker.engine.drafting import SamplingParams
from picker.engine.sampling import warp
from picker.engine.tree import TokenTree

Key = tuple[int, ...]


class CheckingBackend(TorchBackend):
    """After every rollback: cache == fresh prefill of the kept tokens (counts rejections seen)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__(model)
        self.reference = TorchBackend(model)
        self.slots: list[int] = []
        self.rollbacks_with_rejection = 0
        self.mismatches: list[str] = []

    def reset(self) -> None:
        super().reset()
        self.slots = []

    def forward(self, tokens: Sequence[int], tree: TokenTree | None = None, **kw: Any) -> ForwardOutput:
        out = super().forward(tokens, tree, **kw)
        self.slots.extend([*tokens, *(() if tree is None else tree.tokens)])
        return out

    def crop(self, length: int) -> None:
        super().crop(length)
        self._dropped = len(self.slots) - length
        del self.slots[length:]

    def keep(self, indices: Sequence[int], base: int) -> None:
        kept = [self.slots[i] for i in indices]
        super().keep(indices, base)  # ends in self.crop(...), which trims self.slots
        self.slots[base:] = kept

    def rollback(self, edit: Any) -> None:
        before = len(self.slots)
        super().rollback(edit)
        if len(self.slots) < before:
            self.rollbacks_with_rejection += 1
            self._compare()

    def _compare(self) -> None:
        self.reference.prefill(self.slots)
        for layer, ((k, v), (rk, rv)) in enumerate(zip(self.cache_tensors(), self.reference.cache_tensors())):
            if k.shape != rk.shape or not (torch.allclose(k, rk, atol=1e-4) and torch.allclose(v, rv, atol=1e-4)):
                self.mismatches.append(f"layer {layer} after keeping {len(self.slots)} slots")


class ReplayBackend(TorchBackend):
    """Forwards answered row by row from a memo keyed by each row's whole context; exact.

    Under causal and tree attention, the output at a fed row is a function of that row's context
    alone: the cached tokens, the pending tokens up to it, and (for a draft node) its root path.
    So rows seen before in any earlier forward -- the same prompt, a draft chain sharing a prefix
    with an earlier one -- are answered without the model; a forward with any new row runs for
    real (after bringing the real cache to the same state) and records all its rows.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__(model)
        self.slots: list[int] = []  # what the loop believes the cache holds
        self.real: list[int] = []   # what the real cache holds
        self._causal = 0            # real[:_causal] was fed causally (safe to reuse)
        self.memo: dict[tuple[Any, ...], tuple[torch.Tensor, dict[Any, torch.Tensor] | None]] = {}
        self.misses = 0
        self._real_mode = False     # inside a real forward: positions come from the real cache

    @property
    def length(self) -> int:
        # The loop sees the slots it believes in; a real forward (the base class reads ``length``
        # for its positions) must see the real cache, which differs while it is being re-synced.
        return self._layers[0].length if self._real_mode else len(self.slots)

    def reset(self) -> None:
        self.slots = []

    def forward(self, tokens: Sequence[int], tree: TokenTree | None = None, **kw: Any) -> ForwardOutput:
        hidden, layers = kw.get("hidden", False), kw.get("layers")
        opts = (hidden, None if layers is None else tuple(layers))
        base, fed = tuple(self.slots), tuple(tokens)
        contexts = [base + fed[: j + 1] for j in range(len(fed))]
        if tree is not None:
            contexts += [base + fed + tuple(tree.tokens[k] for k in tree.path(i)) for i in range(len(tree))]
        rows = [self.memo.get((c, opts)) for c in contexts]
        if any(r is None for r in rows):
            self.misses += 1
            self._run_for_real(tokens, tree, contexts, opts, kw)
            rows = [self.memo[(c, opts)] for c in contexts]
        self.slots.extend([*tokens, *(() if tree is None else tree.tokens)])
        first = kw.get("logits_from", 0)
        logits = torch.stack([r[0] for r in rows[first:]])[None]
        if not hidden:
            return ForwardOutput(logits)
        keys = rows[0][1].keys()  # type: ignore[union-attr]
        return ForwardOutput(logits, {k: torch.stack([r[1][k] for r in rows])[None] for k in keys})  # type: ignore[index]

    def _run_for_real(self, tokens: Sequence[int], tree: TokenTree | None, contexts: list[tuple[int, ...]],
                      opts: tuple[Any, ...], kw: dict[str, Any]) -> None:
        self._real_mode = True
        try:
            self._sync_real_cache()
            out = super().forward(tokens, tree, logits_from=0, hidden=kw.get("hidden", False),
                                  layers=kw.get("layers"))
        finally:
            self._real_mode = False
        for i, c in enumerate(contexts):
            h = None if out.hidden is None else {k: v[0, i] for k, v in out.hidden.items()}
            self.memo[(c, opts)] = (out.logits[0, i], h)
        nodes = () if tree is None else tree.tokens
        lead = 0  # leading nodes that form a chain were computed exactly as causal tokens
        while lead < len(nodes) and tree is not None and tree.parents[lead] == lead - 1:
            lead += 1
        self.real = [*self.slots, *tokens, *nodes]
        self._causal = len(self.slots) + len(tokens) + lead

    def crop(self, length: int) -> None:
        del self.slots[length:]

    def keep(self, indices: Sequence[int], base: int) -> None:
        self.slots[base:] = [self.slots[i] for i in indices]

    def _sync_real_cache(self) -> None:
        """Make the real cache hold exactly ``slots``: keep the common causal prefix, feed the rest.

        Only entries computed causally are reusable (a tree's nodes after its first branch saw a
        different context), so the real cache is cut back to the first difference or to them.
        """
        same = 0
        limit = min(len(self.real), len(self.slots), self._causal)
        while same < limit and self.real[same] == self.slots[same]:
            same += 1
        for layer in self._layers:
            layer.length = same
        if same < len(self.slots):
            super().forward(self.slots[same:])


def next_probs(target: TorchBackend, ids: Sequence[int], sampling: SamplingParams) -> np.ndarray:
    """The target's warped next-token distribution after ``ids``, from a fresh prefill."""
    logits = target.prefill(list(ids)).logits[0, -1].float().numpy()
    return warp(logits, sampling.temperature, sampling.top_k, sampling.top_p)


def exact_joint(target: TorchBackend, prompt: Sequence[int], depth: int, samples: int,
                sampling: SamplingParams, min_expected: float = 10.0) -> dict[Key, float]:
    """Probabilities of the first ``depth`` generated tokens, as bins expecting >= ``min_expected``.

    Bins are full prefixes where the expected count allows, else a prefix's remainder
    ``(*prefix, -1)``; what is left goes to the global remainder ``(-1,)``. Ten expected per bin
    (not the textbook five) keeps the chi-square approximation honest in its far tail, where
    the test's threshold sits.
    """
    bins: dict[Key, float] = {}

    def expand(prefix: Key, mass: float) -> None:
        q = next_probs(target, [*prompt, *prefix], sampling)
        listed = 0.0
        for tok in np.flatnonzero(q * mass * samples >= min_expected):
            p = mass * float(q[tok])
            if len(prefix) + 1 == depth:
                bins[(*prefix, int(tok))] = p
            else:
                expand((*prefix, int(tok)), p)
            listed += p
        rest = mass - listed
        if rest * samples >= min_expected and prefix:
            bins[(*prefix, -1)] = rest

    expand((), 1.0)
    bins[(-1,)] = max(0.0, 1.0 - sum(bins.values()))
    return bins


def bin_of(tokens: Sequence[int], bins: dict[Key, float], expanded: set[Key] | None = None) -> Key:
    """The bin a sample falls in, mirroring :func:`exact_joint`'s accounting exactly.

    Walk the sample's prefixes: a full listed prefix is its own bin; at the first token that was
    not expanded, the sample belongs to its parent's remainder ``(*parent, -1)`` when that is a
    bin, else to the global remainder ``(-1,)`` -- where ``exact_joint`` put that mass. (Falling
    back to a shorter ancestor's remainder would count mass that ``exact_joint`` gave to ``(-1,)``.)
    ``expanded`` (from :func:`expanded_prefixes`) saves recomputing it per sample.
    """
    inner = expanded_prefixes(bins) if expanded is None else expanded
    for k in range(len(tokens)):
        prefix = tuple(tokens[: k + 1])
        if prefix in bins:
            return prefix
        if prefix not in inner:
            rest = (*tokens[:k], -1)
            return rest if k and rest in bins else (-1,)
    return (-1,)


def expanded_prefixes(bins: dict[Key, float]) -> set[Key]:
    """Prefixes ``exact_joint`` expanded (listed with their children): proper prefixes of bin keys."""
    return {key[:n] for key in bins for n in range(1, len(key))}


def chi_square(samples: list[Sequence[int]], bins: dict[Key, float]) -> tuple[float, int]:
    """(p-value, degrees of freedom) of the samples against the exact bin probabilities."""
    inner = expanded_prefixes(bins)
    counts = Counter(bin_of(s, bins, inner) for s in samples)
    keys = sorted(bins)
    observed = np.array([counts.get(k, 0) for k in keys], dtype=float)
    expected = np.array([bins[k] for k in keys]) * len(samples)
    expected *= observed.sum() / expected.sum()  # float round-off only
    result = stats.chisquare(observed, expected)
    return float(result.pvalue), len(keys) - 1


def greedy_tie(target: TorchBackend, ids: Sequence[int], tol: float = 1e-4) -> bool:
    """True when the target's top two logits after ``ids`` are within ``tol``: fp32 kernels for
    a 1-token and an n-token forward differ in the last bits, so such a tie may break either way."""
    logits = target.prefill(list(ids)).logits[0, -1].float()
    top = torch.topk(logits, 2).values
    return bool(top[0] - top[1] < tol)

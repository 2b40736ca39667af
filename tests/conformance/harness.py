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
from picker.engine.rollback import BatchEdit, BatchForward, Forward, plan_forward
from picker.engine.sampling import inverse_cdf, warp
from picker.engine.tree import TokenTree
from picker.engine.verify import VerifyResult

Key = tuple[int, ...]


class CheckingBackend(TorchBackend):
    """After every rollback that dropped entries: each row's cache == a fresh prefill of the tokens
    the ledger keeps there (counts rejections seen). The ledger's plans say what every slot holds."""

    def __init__(self, model: torch.nn.Module, rows: int = 1) -> None:
        super().__init__(model, rows=rows)
        self.reference = TorchBackend(model)
        self.slots: dict[int, list[int]] = {}  # per row: the token in each slot
        self._finals: list[list[int]] = []
        self.rollbacks_with_rejection = 0
        self.mismatches: list[str] = []

    def run(self, batch: BatchForward, **kw: Any) -> ForwardOutput:
        out = super().run(batch, **kw)
        for row, plan in zip(batch.rows, batch.plans):
            if plan.start == 0 and self.slots.get(row):  # a new sequence took the row
                self._finals.append(self.slots[row])
            self.slots[row] = [*self.slots.get(row, [])[: plan.start], *plan.tokens]
        return out

    def finals(self) -> list[list[int]]:
        """What each row held when its sequence ended (for rows since reused) or holds now."""
        return [*self._finals, *self.slots.values()]

    def apply(self, edit: BatchEdit) -> None:
        super().apply(edit)
        for row, e in zip(edit.rows, edit.edits):
            before = self.slots[row]
            self.slots[row] = [*before[: e.base], *(before[i] for i in e.keep)]
            if len(self.slots[row]) < len(before):
                self.rollbacks_with_rejection += 1
                self._compare(row)

    def _compare(self, row: int) -> None:
        kept = self.slots[row]
        self.reference.prefill(kept)
        for layer, ((k, v), (rk, rv)) in enumerate(zip(self.cache_tensors(row, len(kept)),
                                                       self.reference.cache_tensors())):
            if k.shape != rk.shape or not (torch.allclose(k, rk, atol=1e-4) and torch.allclose(v, rv, atol=1e-4)):
                self.mismatches.append(f"row {row} layer {layer} after keeping {len(kept)} slots")


class ReplayBackend(TorchBackend):
    """Forwards answered row by row from a memo keyed by each row's whole context; exact.

    Under causal and tree attention, the output at a fed row is a function of that row's context
    alone: the committed tokens, the pending tokens up to it, and (for a draft node) its root path.
    So rows seen before in any earlier forward -- the same prompt, a draft chain sharing a prefix
    with an earlier one -- are answered without the model; a sequence with any new row runs for
    real, alone, on a one-row backend (after bringing its cache to the same state) and records all
    its rows. Batched runs are answered the same way, sequence by sequence: the double tests the
    loop's batching logic (ledger, per-row verification, stopping, admission), not batched kernels.
    """

    def __init__(self, model: torch.nn.Module, rows: int = 1) -> None:
        super().__init__(model, rows=rows)
        self.real = _RealCache(model)
        self.slots: dict[int, list[int]] = {}  # per row: what the loop believes the cache holds
        self.memo: dict[tuple[Any, ...], tuple[torch.Tensor, dict[Any, torch.Tensor] | None]] = {}
        self.misses = 0

    def reset(self) -> None:
        self.slots = {}

    def forward(self, tokens: Sequence[int], tree: TokenTree | None = None, **kw: Any) -> ForwardOutput:
        """Row 0 without a ledger (appends after what it holds), as ``TorchBackend.forward``."""
        plan = plan_forward(len(self.slots.get(0, [])), tokens, TokenTree((), ()) if tree is None else tree)
        out = self.run(BatchForward((0,), (plan,)), hidden=kw.get("hidden", False), layers=kw.get("layers"))
        first = kw.get("logits_from", 0)
        return ForwardOutput(out.logits[:, first:], None if out.hidden is None else out.hidden)

    def run(self, batch: BatchForward, *, hidden: bool = False, layers: Sequence[int] | None = None,
            logits_from: int | None = None) -> ForwardOutput:
        opts = (hidden, None if layers is None else tuple(layers))
        per_row = [self._rows(row, plan, opts) for row, plan in zip(batch.rows, batch.plans)]
        width = batch.width
        logits = torch.zeros((len(per_row), width, self.vocab_size), dtype=per_row[0][0][0].dtype)
        for i, rows in enumerate(per_row):
            logits[i, : len(rows)] = torch.stack([r[0] for r in rows])
        if not hidden:
            return ForwardOutput(logits)
        keys = per_row[0][0][1].keys()  # type: ignore[union-attr]
        states = {k: torch.zeros((len(per_row), width, *per_row[0][0][1][k].shape)) for k in keys}  # type: ignore[index]
        for i, rows in enumerate(per_row):
            for k in keys:
                states[k][i, : len(rows)] = torch.stack([r[1][k] for r in rows])  # type: ignore[index]
        return ForwardOutput(logits, states)

    def _rows(self, row: int, plan: Forward, opts: tuple[Any, ...]) -> list[Any]:
        base = tuple(self.slots.get(row, [])[: plan.start])
        pending = plan.tokens[: plan.n_pending]
        tree = plan.drafts
        contexts = [base + pending[: j + 1] for j in range(len(pending))]
        contexts += [base + pending + tuple(tree.tokens[k] for k in tree.path(i)) for i in range(len(tree))]
        if any((c, opts) not in self.memo for c in contexts):
            self.misses += 1
            out = self.real.run(list(base), pending, tree, opts)
            for i, c in enumerate(contexts):
                h = None if out.hidden is None else {k: v[0, i] for k, v in out.hidden.items()}
                self.memo[(c, opts)] = (out.logits[0, i], h)
        self.slots[row] = [*base, *plan.tokens]
        return [self.memo[(c, opts)] for c in contexts]

    def apply(self, edit: BatchEdit) -> None:
        for row, e in zip(edit.rows, edit.edits):
            held = self.slots[row]
            self.slots[row] = [*held[: e.base], *(held[i] for i in e.keep)]

    def crop(self, length: int) -> None:
        del self.slots.setdefault(0, [])[length:]

    def keep(self, indices: Sequence[int], base: int) -> None:
        held = self.slots[0]
        self.slots[0] = [*held[:base], *(held[i] for i in indices)]


class _RealCache:
    """A one-row backend that computes a sequence's rows for real, reusing its causal cache prefix."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.backend = TorchBackend(model)
        self.held: list[int] = []  # what the real cache holds
        self.causal = 0            # held[:causal] was fed causally (safe to reuse)

    def run(self, base: list[int], pending: Sequence[int], tree: TokenTree, opts: tuple[Any, ...]) -> ForwardOutput:
        """Make the real cache hold exactly ``base`` (keep the common causal prefix, feed the rest),
        then feed ``pending`` and ``tree`` at their true positions; logits of every fed row.

        Only entries computed causally are reusable (a tree's nodes after its first branch saw a
        different context), so the real cache is cut back to the first difference or to them.
        """
        be, same = self.backend, 0
        limit = min(len(self.held), len(base), self.causal)
        while same < limit and self.held[same] == base[same]:
            same += 1
        be.crop(min(same, be.length))
        if same < len(base):
            be.forward(base[same:])
        out = be.forward(list(pending), tree, logits_from=0, hidden=opts[0], layers=opts[1])
        lead = 0  # leading nodes that form a chain were computed exactly as causal tokens
        while lead < len(tree) and tree.parents[lead] == lead - 1:
            lead += 1
        self.held = [*base, *pending, *tree.tokens]
        self.causal = len(base) + len(pending) + lead
        return out


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


def divergences(target: TorchBackend, run: Any, prompts: list[list[int]], reference: list[list[int]]
                ) -> tuple[list[str], int]:
    """(divergences not explained by a near-tie, divergences on a near-tie)."""
    bad, ties = [], 0
    for n, (ids, gen, base) in enumerate(zip(prompts, run.generations, reference)):
        if gen.tokens == base:
            continue
        i = next((k for k, (a, b) in enumerate(zip(gen.tokens, base)) if a != b), min(len(gen.tokens), len(base)))
        if i < min(len(gen.tokens), len(base)) and greedy_tie(target, [*ids, *base[:i]]):
            ties += 1
        else:
            bad.append(f"prompt {n}: token {i}: {gen.tokens[i:i + 1]} != {base[i:i + 1]}")
    return bad, ties


# -- planted bugs: verifiers that skip the residual (the distribution tests must catch them) ------

def chain_skipping_residual(draft: Sequence[int], p: Any, q: Any, rng: np.random.Generator) -> VerifyResult:
    """Accepts like Leviathan et al., but draws the correction from q_i instead of the residual."""
    n, q = len(draft), np.asarray(q)
    u = rng.random(n + 1)
    for i, d in enumerate(draft):
        p_d = 1.0 if p is None else float(np.asarray(p)[i, d])
        if u[i] * p_d >= q[i, d]:
            return VerifyResult(i, (*draft[:i], inverse_cdf(q[i], u[n])), tuple(range(i)))
    return VerifyResult(n, (*draft, inverse_cdf(q[n], u[n])), tuple(range(n)))


def tree_skipping_residual(tree: TokenTree, p: Any, q: Any, rng: np.random.Generator,
                           siblings: str = "iid") -> VerifyResult:
    """Tries siblings against the unchanged q, and draws the extra token from it."""
    q = np.asarray(q)
    node, path = -1, []
    while True:
        chosen = next((c for c in tree.children(node)
                       if rng.random() * (1.0 if p is None else float(np.asarray(p)[c, tree.tokens[c]]))
                       < q[node + 1, tree.tokens[c]]), None)
        if chosen is None:
            break
        node = chosen
        path.append(node)
    extra = inverse_cdf(q[node + 1], rng.random())
    return VerifyResult(len(path), (*(tree.tokens[c] for c in path), extra), tuple(path))

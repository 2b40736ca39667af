"""The EAGLE-3 drafter: a draft KV cache over the target's features, and an EAGLE-2 dynamic tree.

State: the draft layer's keys/values for every committed position u that had a target feature
(entry u reads the fused low/mid/high states at u and the token ``x_{u+1}``), and the layer's
output at the last one, the *root*, whose logits guess the token after the pending one. Before
drafting, the target features of the positions accepted since (``ctx.hidden`` or the last
``observe``) are appended in one causal forward; tree entries never enter the cache, so rolling
back a rejected draft costs nothing.

Growing the tree (Li et al. 2024, EAGLE-2): the root's top-k tokens form depth 1, each scored by
its log draft probability. At every further depth the k frontier nodes with the highest
cumulative score (log of the product of draft probabilities on the path) are expanded in one
forward of k rows (each attends to the cache plus its own ancestors) and each gets k children.
All generated nodes are then re-ranked by score and the best M = num_draft_tokens - 1 kept; a
child never outscores its parent, so the kept set is a tree. The shape depends on the drafted
tokens, so the draft goes out with ``p=None``, the verifier's exact regime for such trees.

At temperature > 0 (unless ``sample_drafts=False``) it drafts a chain instead, each token drawn
from the draft's warped distribution and sent with ``p``: accepting with ``min(1, q/p)`` keeps
much more of a flat target's mass than ``q(d)`` for a top-k guess does.

    >>> import numpy as np, torch
    >>> from picker.engine.drafting import DraftContext, SamplingParams
    >>> from strategies.eagle3.model import Eagle3Config, Eagle3Head
    >>> from strategies.eagle3.train import FrozenTarget
    >>> _ = torch.manual_seed(0)                      # an untrained head: seeded, so the tree is fixed
    >>> cfg = Eagle3Config(hidden_size=8, intermediate_size=16, num_heads=2, num_kv_heads=1,
    ...                    vocab_size=20, feature_layers=(0, 0, 0), topk=2, depth=3,
    ...                    num_draft_tokens=5)
    >>> frozen = FrozenTarget(torch.nn.Embedding(20, 8), torch.nn.RMSNorm(8), torch.randn(20, 8))
    >>> drafter = Eagle3Drafter(Eagle3Head(cfg), frozen)
    >>> hidden = {0: torch.ones(3, 8), "last": torch.ones(3, 8)}
    >>> ctx = DraftContext(tokens=[0, 4, 7, 9], prompt_len=4, sampling=SamplingParams(),
    ...                    rng=np.random.default_rng(0), max_draft=8, hidden=hidden)
    >>> draft = drafter.propose(ctx)
    >>> len(draft.tree), draft.tree.parents[:2], draft.p is None
    (4, (-1, -1), True)
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from picker.engine.drafting import EMPTY_DRAFT, Draft, DraftContext, MissingArtifact, SamplingParams, StepOutcome
from picker.engine.sampling import inverse_cdf, warp
from picker.engine.tree import TokenTree
from strategies.eagle3.model import CONFIG_NAME, KV, Eagle3Head, causal_mask
from strategies.eagle3.train import FrozenTarget


class Eagle3Drafter:
    """EAGLE-3 head + frozen target parts + the draft cache; proposes dynamic trees."""

    def __init__(self, head: Eagle3Head, target: FrozenTarget, topk: int | None = None,
                 depth: int | None = None, num_draft_tokens: int | None = None,
                 sample_drafts: bool = True) -> None:
        cfg = head.config
        self.head = head.eval()
        self.target = target
        self.sample_drafts = sample_drafts
        self.topk = topk or cfg.topk
        self.depth = depth or cfg.depth
        self.num_draft_tokens = num_draft_tokens or cfg.num_draft_tokens
        # The loop asks the backend for these DraftContext.hidden keys (besides "last").
        self.hidden_layers: tuple[int, ...] = tuple(sorted(set(cfg.feature_layers)))
        self.reset(())

    def reset(self, prompt_ids: Sequence[int]) -> None:
        """Forget the previous sequence: empty draft cache, no root."""
        self.past: KV | None = None
        self.next_pos = 0            # first target position without a cache entry
        self.root: torch.Tensor | None = None  # (1, 1, H) layer output at position next_pos - 1
        self._ranked: list[torch.Tensor] = []  # a top-1 chain's logits per depth (profiling)

    def fork(self) -> Eagle3Drafter:
        """A drafter for another concurrent sequence: the same head, its own draft cache."""
        clone = copy.copy(self)
        clone.reset(())
        return clone

    def last_scores(self) -> np.ndarray | None:
        """Profiling hook (``picker.engine.siblings.SiblingProbe``): for a top-1 chain, the logits
        that ranked each node's token; None for trees and sampled chains."""
        return np.stack([r.float().numpy() for r in self._ranked]) if self._ranked else None

    def observe(self, outcome: StepOutcome) -> None:
        """Append the accepted positions' target features as soon as the loop reports them."""
        if outcome.hidden is not None:
            self._extend(outcome.hidden, outcome.tokens)

    @torch.inference_mode()
    def _extend(self, hidden: dict[Any, Any], tokens: Sequence[int]) -> None:
        """Add cache entries for the positions in ``hidden`` not yet cached (idempotent).

        The rows of ``hidden`` are the last positions with target features, ending at
        ``len(tokens) - 2`` (the pending token ``tokens[-1]`` has none yet); entry u pairs the
        feature at u with the token ``tokens[u + 1]``.
        """
        last = len(tokens) - 2
        if last < self.next_pos - 1:
            self.reset(())  # a different, shorter sequence: start over
        rows = len(hidden["last"])
        first = last - rows + 1
        start = max(self.next_pos, first)
        if start > last:
            return
        layers = self.head.config.feature_layers
        missing = [i for i in layers if i not in hidden]
        if missing:
            raise KeyError(f"eagle3 reads target layers {list(layers)}, hidden has no {missing}: "
                           "ask the backend for the drafter's hidden_layers")
        fused = torch.cat([torch.as_tensor(hidden[i][start - first:]) for i in layers], dim=-1)
        fused = fused.to(self.target.lm_head.dtype)[None]
        ids = torch.as_tensor(list(tokens[start + 1: last + 2]), dtype=torch.long)[None]
        past_len = 0 if self.past is None else self.past[0].shape[2]
        g, (k, v) = self.head.step(
            self.head.fuse(fused), self.target.embed(ids), torch.arange(start, last + 1),
            causal_mask(last + 1 - start, past_len), self.past,
        )
        self.past = (k, v) if self.past is None else (torch.cat((self.past[0], k), 2),
                                                      torch.cat((self.past[1], v), 2))
        self.next_pos, self.root = last + 1, g[:, -1:]

    def propose(self, ctx: DraftContext) -> Draft:
        if ctx.hidden is not None:
            self._extend(ctx.hidden, ctx.tokens)
        budget = min(self.num_draft_tokens - 1, ctx.max_draft)
        # The root must sit at the position that produced the pending token, or we would guess blind.
        if self.root is None or self.next_pos != len(ctx.tokens) - 1 or budget <= 0:
            return EMPTY_DRAFT
        sampling = ctx.sampling
        self._ranked = []
        if self.sample_drafts and not sampling.greedy:
            return self._sampled_chain(min(self.depth, budget), sampling, ctx.rng)
        # Scores estimate acceptance: calibrated argmax confidence at T = 0, p_T(d) at T > 0.
        t = self.head.config.greedy_temperature if sampling.greedy else sampling.temperature
        return self._grow(budget, 1.0 / t)

    @torch.inference_mode()
    def _sampled_chain(self, n: int, sampling: SamplingParams, rng: np.random.Generator) -> Draft:
        """``d_i ~ p_i`` (warped exactly as the loop warps q) for i = 1..n, sent with p."""
        assert self.past is not None and self.root is not None
        chain, rows = _Growth(), []
        g, node = self.root, -1
        for depth in range(1, n + 1):
            logits = self.target.logits(g)[0, -1].double().numpy()
            rows.append(warp(logits, sampling.temperature, sampling.top_k, sampling.top_p))
            token = inverse_cdf(rows[-1], rng.random())
            node = chain.add_children(node, [token], [0.0], depth)[0]
            if depth < n:  # d_n is verified, never extended
                pos = torch.full((1,), self.next_pos - 1 + depth)
                g, kv = self.head.step(g, self.target.embed(torch.tensor([[token]])), pos,
                                       chain.mask([node], self.past[0].shape[2]),
                                       chain.past(self.past))
                chain.add_entries([node], g, kv)
        return Draft(tree=TokenTree.from_chain(chain.tokens), p=np.stack(rows))

    @torch.inference_mode()
    def _grow(self, budget: int, inv_t: float) -> Draft:
        """Expand the best ``topk`` nodes per depth, then keep the ``budget`` best-scoring nodes.

        A top-1 chain also keeps each depth's logits, which ranked its token (``last_scores``)."""
        assert self.past is not None and self.root is not None
        k, base = self.topk, self.next_pos - 1  # base: position of the root entry
        tree = _Growth()
        rows: list[torch.Tensor] | None = [] if self.topk == 1 else None
        tokens, logps = self._top(self.root, inv_t, rows)
        frontier = tree.add_children(-1, tokens[0], logps[0], depth=1)
        for depth in range(2, self.depth + 1):
            expand = sorted(frontier, key=lambda n: -tree.scores[n])[:k]
            feature = torch.cat([tree.output_of(tree.parents[n], self.root) for n in expand], dim=1)
            ids = torch.as_tensor([tree.tokens[n] for n in expand])[None]
            # The expanded node at depth d - 1 sits at position base + d - 1 (as in training).
            pos = torch.full((len(expand),), base + depth - 1)
            g, kv = self.head.step(feature, self.target.embed(ids), pos,
                                   tree.mask(expand, self.past[0].shape[2]), tree.past(self.past))
            tree.add_entries(expand, g, kv)
            tokens, logps = self._top(g, inv_t, rows)
            frontier = []
            for i, n in enumerate(expand):
                frontier += tree.add_children(n, tokens[i], logps[i], depth)
        best = tree.best(budget)
        # A chain keeps its first len(best) depths (scores fall along it), one logits row each.
        self._ranked = rows[: len(best)] if rows else []
        return Draft(tree=best, p=None)

    def _top(self, g: torch.Tensor, inv_t: float,
             rows: list[torch.Tensor] | None = None) -> tuple[list[list[int]], list[list[float]]]:
        """Per row of ``g`` (1, R, H): the ``topk`` tokens and their log draft probabilities
        (``rows``: also keep the full logits of the first row, for the sibling probe)."""
        logits = self.target.logits(g)[0]
        if rows is not None:
            rows.append(logits[0])
        top = torch.log_softmax(logits * inv_t, dim=-1).topk(self.topk, dim=-1)
        return top.indices.tolist(), top.values.tolist()


class _Growth:
    """The nodes of a growing draft tree, and the draft-cache entries of the expanded ones."""

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.scores: list[float] = []  # log of the product of draft probabilities on the path
        self.parents: list[int] = []
        self.depths: list[int] = []
        self.entry_of: dict[int, int] = {}    # expanded node -> its row among the tree entries
        self.ancestors: list[list[int]] = []  # per entry: entry rows on its path, itself last
        self.outputs: list[torch.Tensor] = []  # per entry: the layer output g, (1, 1, H)
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []

    def add_children(self, parent: int, tokens: list[int], logps: list[float],
                     depth: int) -> list[int]:
        """Append ``parent``'s children (-1: the root's) with their cumulative scores; their ids."""
        base = self.scores[parent] if parent >= 0 else 0.0
        first = len(self.tokens)
        for tok, lp in zip(tokens, logps):
            self.tokens.append(tok)
            self.scores.append(base + lp)
            self.parents.append(parent)
            self.depths.append(depth)
        return list(range(first, len(self.tokens)))

    def output_of(self, node: int, root: torch.Tensor) -> torch.Tensor:
        """The layer output of ``node``'s entry (the root's for -1): its children's feature."""
        return root if node < 0 else self.outputs[self.entry_of[node]]

    def mask(self, expand: list[int], cached: int) -> torch.Tensor:
        """Rows for the nodes being expanded: the whole cache, their ancestors' entries, themselves."""
        rows = len(self.ancestors)
        mask = torch.zeros(len(expand), cached + rows + len(expand), dtype=torch.bool)
        mask[:, :cached] = True
        for i, n in enumerate(expand):
            parent = self.parents[n]
            if parent >= 0:
                mask[i, [cached + r for r in self.ancestors[self.entry_of[parent]]]] = True
            mask[i, cached + rows + i] = True
        return mask

    def past(self, committed: KV) -> KV:
        """The committed cache followed by the tree's entries so far."""
        if not self.keys:
            return committed
        return (torch.cat((committed[0], *self.keys), 2), torch.cat((committed[1], *self.values), 2))

    def add_entries(self, expand: list[int], g: torch.Tensor, kv: KV) -> None:
        """Record the expanded nodes' entries: rows, ancestor paths, outputs, keys and values."""
        rows = len(self.ancestors)
        for i, n in enumerate(expand):
            self.entry_of[n] = rows + i
            parent = self.parents[n]
            path = self.ancestors[self.entry_of[parent]] if parent >= 0 else []
            self.ancestors.append([*path, rows + i])
            self.outputs.append(g[:, i: i + 1])
        self.keys.append(kv[0])
        self.values.append(kv[1])

    def best(self, budget: int) -> TokenTree:
        """The ``budget`` best nodes by score as a TokenTree, ordered by depth then score.

        A child never outscores its parent (log-probabilities are <= 0) and ties go to the
        shallower node, so the kept set is closed under ancestors.
        """
        order = sorted(range(len(self.tokens)), key=lambda n: (-self.scores[n], self.depths[n], n))
        kept: set[int] = set()
        for n in order:
            if len(kept) == budget:
                break
            if self.parents[n] < 0 or self.parents[n] in kept:
                kept.add(n)
        nodes = sorted(kept, key=lambda n: (self.depths[n], -self.scores[n], n))
        index = {n: i for i, n in enumerate(nodes)}
        return TokenTree(tuple(self.tokens[n] for n in nodes),
                         tuple(-1 if self.parents[n] < 0 else index[self.parents[n]] for n in nodes))


def _target_model(target_backend: Any) -> Any:
    """The Hugging Face causal LM itself, or the one a backend wraps as ``.model``."""
    for candidate in (target_backend, getattr(target_backend, "model", None)):
        getter = getattr(candidate, "get_output_embeddings", None)
        if getter is not None and getter() is not None:
            return candidate
    raise TypeError("eagle3: target_backend must be a Hugging Face causal LM or wrap one as .model")


def make_drafter(
    *,
    target_backend: Any,
    artifact: str | Path | None = None,
    topk: int | None = None,
    depth: int | None = None,
    num_draft_tokens: int | None = None,
    sample_drafts: bool = True,
) -> Eagle3Drafter:
    """Load an EAGLE-3 head from ``artifact`` onto ``target_backend``'s model (``.model`` or itself).

    ``topk``, ``depth`` and ``num_draft_tokens`` override the head's stored drafting defaults.
    ``sample_drafts``: at temperature > 0 draw a chain of ``depth`` tokens from the draft (with
    p); when False, grow the dynamic top-k tree (``p=None``) at every temperature.
    """
    if artifact is None or not Path(artifact, CONFIG_NAME).is_file():
        raise MissingArtifact(f"eagle3 needs a trained head folder, got {artifact}", field="--heads")
    model = _target_model(target_backend)
    head = Eagle3Head.load(artifact)
    frozen = FrozenTarget.of(model)
    if tuple(frozen.lm_head.shape) != (head.config.vocab_size, head.config.hidden_size):
        raise MissingArtifact(
            f"eagle3 head at {artifact} expects vocab x hidden {head.config.vocab_size} x "
            f"{head.config.hidden_size}, target has {tuple(frozen.lm_head.shape)}", field="--heads"
        )
    return Eagle3Drafter(head, frozen, topk, depth, num_draft_tokens, sample_drafts)

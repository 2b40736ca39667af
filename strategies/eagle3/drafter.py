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

Under load every sequence's drafter (a fork: the same head, its own cache) drafts in one pass
(:meth:`Eagle3Drafter.propose_batch`): each depth is one head forward over all sequences, every row
over its own cache padded to the longest (the padding masked), its own tree entries and positions.

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
import torch.nn.functional as F

from picker.engine.draft_layer import causal_lm
from picker.engine.drafting import EMPTY_DRAFT, Draft, DraftContext, MissingArtifact, StepOutcome
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
        return np.stack([r.float().cpu().numpy() for r in self._ranked]) if self._ranked else None

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
        dev = self.target.lm_head.device
        ids = torch.as_tensor(list(tokens[start + 1: last + 2]), dtype=torch.long, device=dev)[None]
        past_len = 0 if self.past is None else self.past[0].shape[2]
        g, (k, v) = self.head.step(
            self.head.fuse(fused.to(dev)), self.target.embed(ids), torch.arange(start, last + 1, device=dev),
            causal_mask(last + 1 - start, past_len).to(dev), self.past,
        )
        self.past = (k, v) if self.past is None else (torch.cat((self.past[0], k), 2),
                                                      torch.cat((self.past[1], v), 2))
        self.next_pos, self.root = last + 1, g[:, -1:]

    def propose(self, ctx: DraftContext) -> Draft:
        return self.propose_batch([(self, ctx)])[0]

    def propose_batch(self, items: Sequence[tuple[Eagle3Drafter, DraftContext]]) -> list[Draft]:
        """Drafts for several sequences (this drafter and its forks): every draft depth is ONE head
        forward over all of them, each row over its own cache (padded to the longest) and tree."""
        drafts, trees, chains = [EMPTY_DRAFT] * len(items), [], []
        for i, (drafter, ctx) in enumerate(items):
            if ctx.hidden is not None:
                drafter._extend(ctx.hidden, ctx.tokens)
            budget = min(drafter.num_draft_tokens - 1, ctx.max_draft)
            # The root must sit at the position that produced the pending token, or we would guess blind.
            if drafter.root is None or drafter.next_pos != len(ctx.tokens) - 1 or budget <= 0:
                continue
            drafter._ranked = []
            if self.sample_drafts and not ctx.sampling.greedy:
                chains.append((i, drafter, ctx, min(self.depth, budget)))
            else:  # scores estimate acceptance: calibrated argmax confidence at T = 0, p_T(d) at T > 0
                t = self.head.config.greedy_temperature if ctx.sampling.greedy else ctx.sampling.temperature
                trees.append((i, drafter, budget, 1.0 / t))
        if chains:
            for (i, *_), d in zip(chains, self._sampled_chains([c[1:] for c in chains])):
                drafts[i] = d
        if trees:
            for (i, *_), d in zip(trees, self._grow([t[1:] for t in trees])):
                drafts[i] = d
        return drafts

    @torch.inference_mode()
    def _sampled_chains(self, rows: Sequence[tuple[Eagle3Drafter, DraftContext, int]]) -> list[Draft]:
        """Per row ``d_i ~ p_i`` (warped exactly as the loop warps q) for i = 1..n, sent with p; one
        head forward per depth for the rows still drafting, draws in row order."""
        chains = [_Growth() for _ in rows]
        probs: list[list[np.ndarray]] = [[] for _ in rows]
        g = torch.cat([d.root for d, _, _ in rows])  # (B, 1, H)
        nodes = [-1] * len(rows)
        live = list(range(len(rows)))
        for depth in range(1, max(n for _, _, n in rows) + 1):
            logits = self.target.logits(g)[:, -1].double().cpu().numpy()  # (B_live, V), to the host
            for j, r in enumerate(live):
                s = rows[r][1].sampling
                probs[r].append(warp(logits[j], s.temperature, s.top_k, s.top_p))
                token = inverse_cdf(probs[r][-1], rows[r][1].rng.random())
                nodes[r] = chains[r].add_children(nodes[r], [token], [0.0], depth)[0]
            going = [r for r in live if depth < rows[r][2]]  # d_n is verified, never extended
            if not going:
                break
            keep = [live.index(r) for r in going]
            g = self._step([rows[r][0] for r in going], [chains[r] for r in going],
                           [[nodes[r]] for r in going], g[keep], depth + 1)  # feeds the depth-d nodes
            live = going
        return [Draft(tree=TokenTree.from_chain(c.tokens), p=np.stack(p)) for c, p in zip(chains, probs)]

    @torch.inference_mode()
    def _grow(self, rows: Sequence[tuple[Eagle3Drafter, int, float]]) -> list[Draft]:
        """Per row: expand the best ``topk`` nodes per depth, then keep the ``budget`` best-scoring
        nodes; one head forward per depth for every row (each expands exactly ``topk`` nodes).

        A top-1 chain also keeps each depth's logits, which ranked its token (``last_scores``)."""
        k = self.topk
        trees = [_Growth() for _ in rows]
        ranked: list[list[torch.Tensor]] | None = [[] for _ in rows] if k == 1 else None
        roots = [d.root for d, _, _ in rows]
        inv_t = torch.tensor([t for _, _, t in rows])
        tops = self._top(torch.cat(roots), inv_t, ranked)  # type: ignore[arg-type]
        frontiers = [tree.add_children(-1, tok[0], lp[0], depth=1) for tree, (tok, lp) in zip(trees, tops)]
        for depth in range(2, self.depth + 1):
            expand = [sorted(f, key=lambda n, t=tree: -t.scores[n])[:k] for f, tree in zip(frontiers, trees)]
            feature = torch.cat([torch.cat([tree.output_of(tree.parents[n], root) for n in ex], dim=1)
                                 for tree, ex, root in zip(trees, expand, roots)])
            g = self._step([d for d, _, _ in rows], trees, expand, feature, depth)
            tops = self._top(g, inv_t, ranked)
            frontiers = []
            for tree, ex, (tok, lp) in zip(trees, expand, tops):
                frontier: list[int] = []
                for i, n in enumerate(ex):
                    frontier += tree.add_children(n, tok[i], lp[i], depth)
                frontiers.append(frontier)
        drafts = []
        for r, ((drafter, budget, _), tree) in enumerate(zip(rows, trees)):
            best = tree.best(budget)
            # A chain keeps its first len(best) depths (scores fall along it), one logits row each.
            drafter._ranked = ranked[r][: len(best)] if ranked else []
            drafts.append(Draft(tree=best, p=None))
        return drafts

    def _step(self, drafters: Sequence[Eagle3Drafter], trees: Sequence[_Growth], expand: Sequence[list[int]],
              feature: torch.Tensor, depth: int) -> torch.Tensor:
        """ONE head forward expanding ``expand[b]`` (the same count per row) of every row's tree at
        ``depth``: row b attends to its committed cache (padded to the longest, the padding masked),
        its tree's entries on each node's path, and itself. Records the new entries; returns g."""
        cached = [d.past[0].shape[2] for d in drafters]  # type: ignore[index]
        width = max(cached)
        past_k, past_v, masks = [], [], []
        for d, tree, ex, n in zip(drafters, trees, expand, cached):
            committed = d.past if n == width else tuple(  # type: ignore[union-attr]
                F.pad(t, (0, 0, 0, width - n)) for t in d.past)  # type: ignore[union-attr]
            keys, values = tree.past(committed)  # type: ignore[arg-type]
            past_k.append(keys)
            past_v.append(values)
            own = tree.mask(ex, n)  # (R, n + entries + R): shift everything after the cache by the padding
            mask = torch.zeros(len(ex), width + own.shape[1] - n, dtype=torch.bool)
            mask[:, :n], mask[:, width:] = own[:, :n], own[:, n:]
            masks.append(mask)
        dev = feature.device  # ids, positions and masks are planned on the host, then moved beside it
        ids = torch.as_tensor([[tree.tokens[n] for n in ex] for tree, ex in zip(trees, expand)], device=dev)
        # The expanded node at depth d - 1 sits at position base + d - 1 (as in training); base: the root's.
        pos = torch.as_tensor([[d.next_pos - 1 + depth - 1] * len(ex) for d, ex in zip(drafters, expand)],
                              device=dev)
        g, (k, v) = self.head.step(feature, self.target.embed(ids), pos, torch.stack(masks)[:, None].to(dev),
                                   (torch.cat(past_k), torch.cat(past_v)))
        for b, (tree, ex) in enumerate(zip(trees, expand)):
            tree.add_entries(ex, g[b: b + 1], (k[b: b + 1], v[b: b + 1]))
        return g

    def _top(self, g: torch.Tensor, inv_t: torch.Tensor,
             ranked: list[list[torch.Tensor]] | None = None) -> list[tuple[list[list[int]], list[list[float]]]]:
        """Per row b of ``g`` (B, R, H), per node: the ``topk`` tokens and their log draft
        probabilities (``ranked``: also keep the full logits of each row's first node, for the sibling probe)."""
        logits = self.target.logits(g)
        if ranked is not None:
            for b, rows in enumerate(ranked):
                rows.append(logits[b, 0])
        top = torch.log_softmax(logits * inv_t.to(logits)[:, None, None], dim=-1).topk(self.topk, dim=-1)
        return list(zip(top.indices.tolist(), top.values.tolist()))


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
    model = causal_lm(target_backend, "eagle3")
    frozen = FrozenTarget.of(model)
    head = Eagle3Head.load(artifact).to(frozen.lm_head.device, frozen.lm_head.dtype)  # beside the target, in its dtype
    if tuple(frozen.lm_head.shape) != (head.config.vocab_size, head.config.hidden_size):
        raise MissingArtifact(
            f"eagle3 head at {artifact} expects vocab x hidden {head.config.vocab_size} x "
            f"{head.config.hidden_size}, target has {tuple(frozen.lm_head.shape)}", field="--heads"
        )
    return Eagle3Drafter(head, frozen, topk, depth, num_draft_tokens, sample_drafts)

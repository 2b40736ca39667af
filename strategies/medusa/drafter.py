"""The Medusa drafter: the heads' top-k candidates laid out on the stored tree, verified exactly.

Per step it reads one vector, the target's final hidden state at the position that produced the
pending token (``ctx.hidden["last"][-1]``), runs every head at once, takes each head's top-ranked
tokens and fills the tree ``config.choices`` (cut to ``ctx.max_draft`` nodes; the stored order
makes every prefix a valid tree); under load every sequence's heads run in one batched pass
(:meth:`MedusaDrafter.propose_batch`). The candidates are chosen, not sampled, so the draft carries
``p=None`` and the verifier's deterministic-draft rule keeps sampling exact.

At temperature > 0 (unless ``sample_drafts=False``) the same shape is instead filled with tokens
drawn from the heads' warped distributions and sent with ``p``: the verifier then accepts with
``min(1, q/p)``, which keeps far more of a flat target's mass than ``q(d)`` for a top-k guess.

    >>> import numpy as np, torch
    >>> from picker.engine.drafting import DraftContext, SamplingParams
    >>> from strategies.medusa.heads import MedusaConfig, MedusaHeads
    >>> heads = MedusaHeads(MedusaConfig(hidden_size=8, vocab_size=11, num_heads=2,
    ...                                  choices=((0,), (1,), (0, 0))))
    >>> drafter = MedusaDrafter(heads, lm_head=torch.randn(11, 8))
    >>> ctx = DraftContext(tokens=[0, 5], prompt_len=2, sampling=SamplingParams(),
    ...                    rng=np.random.default_rng(0), max_draft=8,
    ...                    hidden={"last": np.ones((2, 8), dtype=np.float32)})
    >>> draft = drafter.propose(ctx)
    >>> draft.tree.parents, draft.p is None
    ((-1, -1, 0), True)
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from picker.engine.draft_layer import causal_lm
from picker.engine.drafting import EMPTY_DRAFT, Draft, DraftContext, MissingArtifact, SamplingParams
from picker.engine.sampling import warp
from picker.engine.tree import TokenTree
from strategies.medusa.heads import CONFIG_NAME, MedusaHeads


class MedusaDrafter:
    """Proposes a static-shaped token tree from Medusa heads; keeps no state between steps."""

    # Only the final layer (``ctx.hidden["last"]``) is read; no intermediate layers are needed.
    hidden_layers: tuple[int, ...] = ()

    def __init__(
        self,
        heads: MedusaHeads,
        lm_head: torch.Tensor,
        choices: Sequence[Sequence[int]] | None = None,
        sample_drafts: bool = True,
    ) -> None:
        self.heads = heads.eval()
        self.lm_head = lm_head.detach()
        self.choices = tuple(tuple(c) for c in (choices or heads.config.choices))
        self.sample_drafts = sample_drafts
        # Per cut size n: (choices[:n], heads needed, top-k width needed, the tree's shape).
        self._plans = [self._plan(n) for n in range(len(self.choices) + 1)]
        self._ranked: torch.Tensor | None = None  # per node of the last top-k draft: its head's logits

    def fork(self) -> MedusaDrafter:
        """Another concurrent sequence's drafter: the same heads (it keeps no per-sequence state)."""
        clone = copy.copy(self)
        clone._ranked = None
        return clone

    def last_scores(self) -> np.ndarray | None:
        """Profiling hook (``picker.engine.siblings.SiblingProbe``): per node of the last top-k draft,
        the logits of the head that ranked it; None after a sampled draft."""
        return None if self._ranked is None else self._ranked.float().cpu().numpy()

    def _plan(self, n: int) -> tuple[tuple[tuple[int, ...], ...], int, int, TokenTree]:
        used = self.choices[:n]
        depth = max((len(c) for c in used), default=0)
        width = max((c[-1] for c in used), default=-1) + 1
        shape = TokenTree.from_choices(used, [list(range(width))] * depth)
        return used, depth, width, shape

    def propose(self, ctx: DraftContext) -> Draft:
        return self.propose_batch([(self, ctx)])[0]

    @torch.inference_mode()
    def propose_batch(self, items: Sequence[tuple[MedusaDrafter, DraftContext]]) -> list[Draft]:
        """Drafts for several sequences (this drafter and its forks): every head runs once over all
        of their hidden states, then each sequence fills its tree (draws in item order)."""
        reads = {}
        for i, (drafter, ctx) in enumerate(items):
            drafter._ranked = None
            hidden = None if ctx.hidden is None else ctx.hidden.get("last")
            if hidden is not None and len(hidden) > 0 and ctx.max_draft > 0:  # else nothing to read (or no room)
                reads[i] = torch.as_tensor(hidden[-1], dtype=self.lm_head.dtype)
        drafts = [EMPTY_DRAFT] * len(items)
        if not reads:
            return drafts
        plans = {i: self._plans[min(items[i][1].max_draft, len(self.choices))] for i in reads}
        depth = max(plan[1] for plan in plans.values())
        logits = self.heads.logits(torch.stack(list(reads.values())), self.lm_head, heads=depth)  # (B, depth, V)
        for b, i in enumerate(reads):
            drafter, ctx = items[i]
            drafts[i] = drafter._fill(plans[i], logits[b, : plans[i][1]], ctx)
        return drafts

    def _fill(self, plan: tuple[tuple[tuple[int, ...], ...], int, int, TokenTree], logits: torch.Tensor,
              ctx: DraftContext) -> Draft:
        """One sequence's tree from its heads' logits ``(depth, V)``: drawn, or each head's top-k."""
        used, _, width, shape = plan
        if self.sample_drafts and not ctx.sampling.greedy:
            return sampled_tree(shape, logits.double().cpu().numpy(), ctx.sampling, ctx.rng)
        candidates = logits.topk(width, dim=-1).indices.tolist()        # ranks per head
        # Kept for the profiler's ranking (a view, no copy): node c (a path of length d) was ranked by head d.
        self._ranked = logits[[len(c) - 1 for c in used]]
        return Draft(tree=TokenTree.from_choices(used, candidates), p=None)


def sampled_tree(shape: TokenTree, logits: np.ndarray, sampling: SamplingParams,
                 rng: np.random.Generator) -> Draft:
    """Fill a fixed tree shape with tokens *drawn* from the heads' warped distributions.

    Node c at depth d gets ``p[c] = warp(head_{d-1} logits)``, warped exactly as the loop warps q.
    The children of one parent are drawn one after another without replacement (Gumbel-top-k,
    which has the same law), in sibling order: the verifier's ``"without_replacement"`` regime,
    exact for a shape fixed before drawing. A parent with fewer tokens of non-zero probability
    than children keeps its first ones; the rest (and their subtrees) are left out, which
    depends on p alone, never on the drawn tokens.
    """
    probs = warp(logits, sampling.temperature, sampling.top_k, sampling.top_p)  # (depth, V)
    depths = shape.depths
    tokens = [-1] * len(shape)
    for parent in range(-1, len(shape)):
        kids = [c for c in shape.children(parent) if parent < 0 or tokens[parent] >= 0]
        if not kids:
            continue
        row = probs[depths[kids[0]] - 1]
        support = np.flatnonzero(row > 0)
        keys = np.log(row[support]) + rng.gumbel(size=support.size)
        drawn = support[np.argsort(-keys, kind="stable")[: len(kids)]]
        for child, tok in zip(kids, drawn):
            tokens[child] = int(tok)
    keep = [i for i, t in enumerate(tokens) if t >= 0]
    index = {old: new for new, old in enumerate(keep)}
    tree = TokenTree(tuple(tokens[i] for i in keep),
                     tuple(-1 if shape.parents[i] < 0 else index[shape.parents[i]] for i in keep))
    p = probs[[depths[i] - 1 for i in keep]]
    return Draft(tree=tree, p=p, siblings="without_replacement")


def make_drafter(
    *,
    target_backend: Any,
    artifact: str | Path | None = None,
    choices: Sequence[Sequence[int]] | None = None,
    sample_drafts: bool = True,
) -> MedusaDrafter:
    """Load heads from ``artifact`` (a folder written by ``MedusaHeads.save``) onto the target.

    ``choices`` overrides the stored tree. ``sample_drafts``: at temperature > 0 draw the tree's
    tokens from the heads (with p); when False, top-k tokens with ``p=None`` at every temperature.
    The heads must match the target's width and vocabulary.
    """
    if artifact is None or not Path(artifact, CONFIG_NAME).is_file():
        raise MissingArtifact(f"medusa needs a trained heads folder, got {artifact}", field="--heads")
    model = causal_lm(target_backend, "medusa")
    lm_head = model.get_output_embeddings().weight.detach()
    heads = MedusaHeads.load(artifact).to(lm_head.device)  # beside the target (cpu or cuda)
    if tuple(lm_head.shape) != (heads.config.vocab_size, heads.config.hidden_size):
        raise MissingArtifact(
            f"medusa heads at {artifact} expect vocab x hidden "
            f"{heads.config.vocab_size} x {heads.config.hidden_size}, target has "
            f"{lm_head.shape[0]} x {lm_head.shape[1]}", field="--heads"
        )
    return MedusaDrafter(heads, lm_head.to(heads.weight.dtype), choices, sample_drafts)

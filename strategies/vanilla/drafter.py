"""The `vanilla` drafter: a separate small causal LM with its own KV cache proposes a chain.

Leviathan et al. (2023): draw ``d_i ~ p_i`` from the draft model's (warped) distribution, N times,
and hand the rows ``p_1 .. p_N`` to the verifier. The draft's cache is rolled back like the
target's: before drafting, it is cropped to the longest prefix it shares with the committed
sequence, and whatever it has not consumed yet (the pending token, plus the last accepted draft
after a full acceptance) is fed in one forward. Under load the sequences' drafters share the draft
model and its cache (a row each) and draft together: one draft forward per depth for all of them.

    >>> import numpy as np, torch
    >>> from transformers import LlamaConfig, LlamaForCausalLM
    >>> from picker.engine.backend import TorchBackend
    >>> from picker.engine.drafting import DraftContext, SamplingParams
    >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
    <...>
    >>> cfg = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
    ...                   num_attention_heads=2, num_key_value_heads=1)
    >>> drafter = DraftModelDrafter(TorchBackend(LlamaForCausalLM(cfg)), num_draft_tokens=3)
    >>> ctx = DraftContext([1, 2, 3], 3, SamplingParams(temperature=1.0), np.random.default_rng(0), 8)
    >>> d = drafter.propose(ctx)
    >>> len(d), d.p.shape, drafter.cached            # d_3 is drafted but never fed
    (3, (3, 32), 5)

At temperature 0 the drafts are the draft model's argmax and ``p`` is None (the greedy verifier
never reads it), which saves warping a row per draft token.
"""

from __future__ import annotations

import copy
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from picker.engine.backend import TorchBackend
from picker.engine.drafting import EMPTY_DRAFT, Draft, DraftContext, MissingArtifact
from picker.engine.rollback import BatchForward, plan_forward
from picker.engine.sampling import inverse_cdf, warp
from picker.engine.tree import TokenTree

if TYPE_CHECKING:
    import torch


class DraftModelDrafter:
    """Chains of ``num_draft_tokens`` from a draft model that shares the target's tokenizer.

    Under load one drafter serves each sequence (:meth:`fork`), every one on its own row of the
    same draft cache, and :meth:`propose_batch` drafts for all of them at once: one catch-up
    forward, then one draft forward per depth over every sequence still drafting.
    """

    def __init__(self, draft: TorchBackend, num_draft_tokens: int = 4) -> None:
        if num_draft_tokens < 1:
            raise ValueError("num_draft_tokens must be >= 1")
        self.draft = draft
        self.num_draft_tokens = num_draft_tokens
        self.row = 0  # this sequence's row of the draft's cache
        self._fed: list[int] = []  # the tokens in the draft's cache row, slot by slot
        self._synced = 0  # a prefix length known to agree with the committed sequence

    @property
    def cached(self) -> int:
        """Slots of this drafter's cache row that hold tokens."""
        return len(self._fed)

    def reset(self, prompt_ids: Sequence[int]) -> None:
        self._fed, self._synced = [], 0

    def fork(self) -> DraftModelDrafter:
        """A drafter for another concurrent sequence: the same draft weights and cache, a row of its own
        (given back when the fork is dropped)."""
        clone = copy.copy(self)
        clone.row = self.draft.lend_row()
        clone._fed, clone._synced = [], 0
        weakref.finalize(clone, self.draft.return_row, clone.row)
        return clone

    def draft_length(self, ctx: DraftContext) -> int:
        """Draft tokens to propose this step: N (subclasses schedule it), within the loop's cap."""
        return min(self.num_draft_tokens, ctx.max_draft)

    def stop_after(self, logits: torch.Tensor, token: int, ctx: DraftContext) -> bool:
        """Whether to end the chain after drafting ``token`` from ``logits`` (never, here: fixed N).

        Subclasses implement dynamic draft lengths (e.g. a confidence threshold) here.
        """
        return False

    def propose(self, ctx: DraftContext) -> Draft:
        return self.propose_batch([(self, ctx)])[0]

    def propose_batch(self, items: Sequence[tuple[DraftModelDrafter, DraftContext]]) -> list[Draft]:
        """Drafts for several sequences (this drafter and its forks, each with its context), in order.

        Draws are made depth by depth, sequence by sequence, from each context's rng.
        """
        if any(d.draft is not self.draft for d, _ in items):
            raise ValueError("propose_batch: every drafter must be this one or one of its forks (one draft cache)")
        want = [d.draft_length(c) for d, c in items]
        live = [i for i, n in enumerate(want) if n >= 1]
        logits = self._catch_up([items[i] for i in live])
        chains: dict[int, list[int]] = {i: [] for i in live}
        rows: dict[int, list[np.ndarray]] = {i: [] for i in live}
        while live:
            going = []
            for i in live:
                drafter, ctx = items[i]
                s = ctx.sampling
                if s.greedy:
                    d = int(logits[i].argmax())
                else:  # warped exactly as the loop warps q: the verifier needs the same p
                    p_i = warp(logits[i].float().cpu().numpy(), s.temperature, s.top_k, s.top_p)
                    d = inverse_cdf(p_i, ctx.rng.random())
                    rows[i].append(p_i)
                chains[i].append(d)
                if len(chains[i]) < want[i] and not drafter.stop_after(logits[i], d, ctx):
                    going.append(i)  # d_N itself is never fed: it is verified, not extended
            if going:
                logits.update(self._feed({i: (items[i][0], [chains[i][-1]]) for i in going}))
            live = going
        return [Draft(TokenTree.from_chain(chains[i]), np.stack(rows[i]) if rows[i] else None)
                if i in chains else EMPTY_DRAFT for i in range(len(items))]

    def _catch_up(self, items: Sequence[tuple[DraftModelDrafter, DraftContext]]) -> dict[int, torch.Tensor]:
        """Bring every drafter's cache row in line with its committed sequence; per item the draft's
        logits after the sequence's last token. Short catch-ups share one forward; a long one (a
        prompt) goes alone, so the others' logits are not computed over its width."""
        todo: dict[int, tuple[DraftModelDrafter, list[int]]] = {}
        for i, (drafter, ctx) in enumerate(items):
            todo[i] = (drafter, drafter._roll_back(ctx.tokens))
        short = {i: t for i, t in todo.items() if len(t[1]) <= _SHORT}
        out = self._feed(short) if short else {}
        for i, t in todo.items():
            if i not in short:
                out.update(self._feed({i: t}))
        return out

    def _roll_back(self, tokens: Sequence[int]) -> list[int]:
        """Keep the longest prefix of this row that was committed; the tokens still to feed."""
        limit = min(len(self._fed), len(tokens) - 1)  # the pending token is never in the cache
        keep = min(self._synced, limit)  # (proposing twice at one context re-feeds the pending token)
        while keep < limit and self._fed[keep] == tokens[keep]:
            keep += 1
        del self._fed[keep:]  # stale slots past the kept prefix are overwritten by the next feed
        self._synced = len(tokens)
        return list(tokens[keep:])

    def _feed(self, feeds: dict[int, tuple[DraftModelDrafter, list[int]]]) -> dict[int, torch.Tensor]:
        """ONE draft forward: each drafter's tokens appended to its row; per key the logits after its last."""
        keys = list(feeds)
        plans = tuple(plan_forward(len(feeds[k][0]._fed), feeds[k][1], _NO_DRAFTS) for k in keys)
        out = self.draft.run(BatchForward(tuple(feeds[k][0].row for k in keys), plans))
        for k in keys:
            feeds[k][0]._fed.extend(feeds[k][1])
        return {k: out.logits[j, len(plans[j].tokens) - 1 - out.first] for j, k in enumerate(keys)}


_SHORT = 4  # catch-ups longer than this (a prompt) get a forward of their own
_NO_DRAFTS = TokenTree((), ())


def make_drafter(
    *,
    target_backend: TorchBackend,
    artifact: str | Path | None = None,
    num_draft_tokens: int = 4,
    draft_backend: TorchBackend | None = None,
) -> DraftModelDrafter:
    """Load the draft model from ``artifact`` (a local HF folder) next to the target.

    ``draft_backend`` reuses an already loaded draft (a caller timing many runs loads it once).
    """
    if draft_backend is None:
        if artifact is None or not Path(artifact, "config.json").is_file():
            raise MissingArtifact(f"vanilla needs a draft model folder, got {artifact}", field="--draft")
        draft_backend = TorchBackend.from_pretrained(
            artifact, device=str(target_backend.device), dtype=target_backend.dtype
        )
    if draft_backend.vocab_size != target_backend.vocab_size:
        raise MissingArtifact(
            f"draft vocabulary {draft_backend.vocab_size} != target {target_backend.vocab_size}: "
            "the draft must share the target's tokenizer", field="--draft"
        )
    return DraftModelDrafter(draft_backend, num_draft_tokens=num_draft_tokens)

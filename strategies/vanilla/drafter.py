"""The `vanilla` drafter: a separate small causal LM with its own KV cache proposes a chain.

Leviathan et al. (2023): draw ``d_i ~ p_i`` from the draft model's (warped) distribution, N times,
and hand the rows ``p_1 .. p_N`` to the verifier. The draft's cache is rolled back like the
target's: before drafting, it is cropped to the longest prefix it shares with the committed
sequence, and whatever it has not consumed yet (the pending token, plus the last accepted draft
after a full acceptance) is fed in one forward.

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
    >>> len(d), d.p.shape, drafter.draft.length      # d_3 is drafted but never fed
    (3, (3, 32), 5)

At temperature 0 the drafts are the draft model's argmax and ``p`` is None (the greedy verifier
never reads it), which saves warping a row per draft token.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from picker.engine.backend import TorchBackend
from picker.engine.drafting import EMPTY_DRAFT, Draft, DraftContext, MissingArtifact
from picker.engine.sampling import inverse_cdf, warp
from picker.engine.tree import TokenTree

if TYPE_CHECKING:
    import torch


class DraftModelDrafter:
    """Chains of ``num_draft_tokens`` from a draft model that shares the target's tokenizer."""

    def __init__(self, draft: TorchBackend, num_draft_tokens: int = 4) -> None:
        if num_draft_tokens < 1:
            raise ValueError("num_draft_tokens must be >= 1")
        self.draft = draft
        self.num_draft_tokens = num_draft_tokens
        self._fed: list[int] = []  # the tokens in the draft's cache, slot by slot
        self._synced = 0  # a prefix length known to agree with the committed sequence

    def reset(self, prompt_ids: Sequence[int]) -> None:
        self.draft.reset()
        self._fed, self._synced = [], 0

    def fork(self) -> DraftModelDrafter:
        """A drafter for another concurrent sequence: the same draft weights, its own draft cache."""
        clone = copy.copy(self)
        clone.draft = TorchBackend(self.draft.model, hidden_layers=self.draft.hidden_layers)
        clone._fed, clone._synced = [], 0
        return clone

    def propose(self, ctx: DraftContext) -> Draft:
        n = min(self.num_draft_tokens, ctx.max_draft)
        if n < 1:
            return EMPTY_DRAFT
        logits = self._catch_up(ctx.tokens)
        s = ctx.sampling
        chain: list[int] = []
        rows: list[np.ndarray] = []
        for i in range(n):
            if s.greedy:
                d = int(logits.argmax())
            else:  # warped exactly as the loop warps q: the verifier needs the same p
                p_i = warp(logits.float().numpy(), s.temperature, s.top_k, s.top_p)
                d = inverse_cdf(p_i, ctx.rng.random())
                rows.append(p_i)
            chain.append(d)
            if i + 1 == n or self.stop_after(logits, d, ctx):
                break  # d_N itself is never fed: it is verified, not extended
            logits = self.draft.forward([d]).logits[0, -1]
            self._fed.append(d)
        return Draft(TokenTree.from_chain(chain), np.stack(rows) if rows else None)

    def stop_after(self, logits: torch.Tensor, token: int, ctx: DraftContext) -> bool:
        """Whether to end the chain after drafting ``token`` from ``logits`` (never, here: fixed N).

        Subclasses implement dynamic draft lengths (e.g. a confidence threshold) here.
        """
        return False

    def _catch_up(self, tokens: Sequence[int]) -> torch.Tensor:
        """Bring the draft's cache in line with ``tokens``; the draft's logits after the last one."""
        # 1. Roll back: keep the longest prefix of the draft's cache that was committed.
        limit = min(len(self._fed), len(tokens) - 1)  # the pending token is never in the cache
        keep = min(self._synced, limit)  # (proposing twice at one context re-feeds the pending token)
        while keep < limit and self._fed[keep] == tokens[keep]:
            keep += 1
        self.draft.crop(keep)
        del self._fed[keep:]
        # 2. Feed everything not yet seen (at least the pending token).
        new = list(tokens[keep:])
        logits = self.draft.forward(new, logits_from=len(new) - 1).logits[0, -1]
        self._fed.extend(new)
        self._synced = len(tokens)
        return logits


def make_drafter(
    *,
    target_backend: TorchBackend,
    artifact: str | Path | None = None,
    num_draft_tokens: int = 4,
    draft_backend: TorchBackend | None = None,
) -> DraftModelDrafter:
    """Load the draft model from ``artifact`` (a local HF folder) next to the target.

    ``draft_backend`` reuses an already loaded draft (benchmarks load it once for many runs).
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

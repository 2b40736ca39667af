"""The `mtp` drafter: a chain from DeepSeek-V3-shaped MTP modules over the target's hidden states.

State, per module k (1..D): its keys and values at every committed position u whose input token
``t_{u+k}`` is known (u <= L - 1 - k for L committed tokens, the pending one included) and its
output there, which module k + 1 reads. Module 1's entry at the root (the position that produced
the pending token) already guesses the first draft; depth k > 1 runs module min(k, D) once, on the
previous depth's output and the token just drafted, over that module's committed keys -- a chain,
drafted recurrently. Nothing drafted enters a cache, so a rejection costs no rollback.

At temperature 0 the chain is each depth's argmax, sent with ``p=None``; above it each token is
drawn from the module's warped distribution and sent with that ``p`` (``min(1, q/p)`` acceptance).

    >>> import numpy as np, torch
    >>> from picker.engine.draft_layer import FrozenTarget
    >>> from picker.engine.drafting import DraftContext, SamplingParams
    >>> from strategies.mtp.model import MtpConfig, MtpHeads
    >>> _ = torch.manual_seed(0)
    >>> cfg = MtpConfig(hidden_size=8, intermediate_size=16, num_heads=2, num_kv_heads=1, vocab_size=20,
    ...                 num_modules=2, depth=3)
    >>> frozen = FrozenTarget(torch.nn.Embedding(20, 8), torch.nn.RMSNorm(8), torch.randn(20, 8))
    >>> drafter = MtpDrafter(MtpHeads(cfg), frozen)
    >>> ctx = DraftContext([3, 4, 7, 9], 4, SamplingParams(), np.random.default_rng(0), 8,
    ...                    {"last": torch.ones(3, 8)})
    >>> d = drafter.propose(ctx)
    >>> len(d), d.is_chain, d.p is None
    (3, True, True)
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from picker.engine.draft_layer import FrozenTarget, causal_lm
from picker.engine.drafting import EMPTY_DRAFT, Draft, DraftContext, MissingArtifact, StepOutcome
from picker.engine.sampling import inverse_cdf, warp
from picker.engine.tree import TokenTree
from strategies.mtp.model import CONFIG_NAME, MtpHeads, module_mask


class MtpDrafter:
    """MTP modules + frozen target parts + per-module caches over committed positions."""

    def __init__(self, heads: MtpHeads, target: FrozenTarget, num_draft_tokens: int | None = None,
                 sample_drafts: bool = True) -> None:
        self.heads = heads.eval()
        self.target = target
        self.depth = num_draft_tokens or heads.config.depth
        self.sample_drafts = sample_drafts
        self.hidden_layers: tuple[int, ...] = ()  # reads only the final state ("last")
        self.reset(())

    def reset(self, prompt_ids: Sequence[int]) -> None:
        """Forget the previous sequence."""
        d = self.heads.config.num_modules
        self.h0: torch.Tensor | None = None               # (n, H): the target's state at positions 0..n-1
        self.keys: list[tuple[torch.Tensor, torch.Tensor] | None] = [None] * d
        self.outs: list[torch.Tensor | None] = [None] * d  # (n_k, H): module k's output per position

    def fork(self) -> MtpDrafter:
        """A drafter for another concurrent sequence: the same modules, caches of its own."""
        clone = copy.copy(self)
        clone.reset(())
        return clone

    def observe(self, outcome: StepOutcome) -> None:
        if outcome.hidden is not None:
            self._extend(outcome.hidden, outcome.tokens)

    def _covered(self, k: int) -> int:
        out = self.outs[k - 1]
        return 0 if out is None else out.shape[0]

    @torch.inference_mode()
    def _extend(self, hidden: dict[Any, Any], tokens: Sequence[int]) -> None:
        """Take the target states up to the pending token's producer, then grow every module's cache
        to the positions whose input token is committed (idempotent)."""
        last = len(tokens) - 2                   # the root: its state produced the pending token
        n0 = 0 if self.h0 is None else self.h0.shape[0]
        if last < n0 - 1:
            self.reset(())                       # a different, shorter sequence: start over
            n0 = 0
        dev = self.target.lm_head.device  # the target's device (cpu or cuda): every tensor made here goes there
        rows = torch.as_tensor(hidden["last"]).to(dev, self.target.lm_head.dtype)
        first = last - rows.shape[0] + 1
        if first > n0:
            raise ValueError(f"mtp: target states from position {first} on, but {n0} is the first missing")
        new = rows[n0 - first:]
        self.h0 = new if self.h0 is None else torch.cat((self.h0, new))
        inputs = self.h0
        for k in range(1, self.heads.config.num_modules + 1):
            have, want = self._covered(k), min(len(tokens) - k, inputs.shape[0])
            if want > have:
                ids = torch.as_tensor(list(tokens[have + k: want + k]), dtype=torch.long, device=dev)[None]
                past = self.keys[k - 1]
                g, (key, value) = self.heads.modules_[k - 1](
                    inputs[None, have:want], self.target.embed(ids), torch.arange(have, want, device=dev),
                    module_mask(want - have, k, past=have, first=have).to(dev), past)
                self.keys[k - 1] = (key, value) if past is None else (torch.cat((past[0], key), 2),
                                                                      torch.cat((past[1], value), 2))
                out = self.outs[k - 1]
                self.outs[k - 1] = g[0] if out is None else torch.cat((out, g[0]))
            inputs = self.outs[k - 1]  # type: ignore[assignment]

    @torch.inference_mode()
    def propose(self, ctx: DraftContext) -> Draft:
        if ctx.hidden is not None:
            self._extend(ctx.hidden, ctx.tokens)
        n = min(self.depth, ctx.max_draft)
        root = len(ctx.tokens) - 2
        if n < 1 or self._covered(1) != root + 1:
            return EMPTY_DRAFT  # module 1 has no entry at the root: nothing to draft from
        sample = self.sample_drafts and not ctx.sampling.greedy
        cfg = self.heads.config
        h = self.outs[0][root:]  # type: ignore[index]  # (1, H): module 1 at the root
        tokens: list[int] = []
        probs: list[np.ndarray] = []
        for k in range(1, n + 1):
            if k > 1:
                m = cfg.module_for(k)
                past = self.keys[m]
                dev = h.device
                ids = torch.as_tensor([[tokens[-1]]], device=dev)
                mask = torch.ones(1, past[0].shape[2] + 1, dtype=torch.bool, device=dev)  # type: ignore[index]
                g, _ = self.heads.modules_[m](h[None], self.target.embed(ids), torch.tensor([root], device=dev),
                                              mask, past)
                h = g[0]
            logits = self.target.logits(h)[-1].double().cpu().numpy()  # to the host
            if sample:
                s = ctx.sampling
                probs.append(warp(logits, s.temperature, s.top_k, s.top_p))
                tokens.append(int(inverse_cdf(probs[-1], ctx.rng.random())))
            else:
                tokens.append(int(np.argmax(logits)))
        return Draft(TokenTree.from_chain(tokens), p=np.stack(probs) if sample else None)


def make_drafter(*, target_backend: Any, artifact: str | Path | None = None, num_draft_tokens: int | None = None,
                 sample_drafts: bool = True) -> MtpDrafter:
    """Load MTP modules from ``artifact`` onto ``target_backend``'s model; ``num_draft_tokens`` is the chain."""
    if artifact is None or not Path(artifact, CONFIG_NAME).is_file():
        raise MissingArtifact(f"mtp needs a trained modules folder, got {artifact}", field="--heads")
    frozen = FrozenTarget.of(causal_lm(target_backend, "mtp"))
    heads = MtpHeads.load(artifact).to(frozen.lm_head.device, frozen.lm_head.dtype)  # beside the target, in its dtype
    if tuple(frozen.lm_head.shape) != (heads.config.vocab_size, heads.config.hidden_size):
        raise MissingArtifact(f"mtp modules at {artifact} expect vocab x hidden {heads.config.vocab_size} x "
                              f"{heads.config.hidden_size}, target has {tuple(frozen.lm_head.shape)}", field="--heads")
    return MtpDrafter(heads, frozen, num_draft_tokens, sample_drafts)

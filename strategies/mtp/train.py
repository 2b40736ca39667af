"""Train MTP modules on the frozen target's own generations (self-distillation), as DeepSeek-V3 chains them.

Rows come from :class:`picker.engine.training.DistillData`: text the target generated and its final
hidden states. Depth k runs module min(k, D) over positions i = 0..T-1-k with inputs ``h^{k-1}_i``
(the target's state for k = 1, the previous depth's output after) and ``t_{i+k}``, and is scored
against the target's own distribution for ``t_{i+k+1}`` (soft cross-entropy, KL up to a constant).
Depths beyond D reuse module D the way drafting does (its committed keys, queries of their own), so
the modules also learn the recurrent chain longer drafts run.

    >>> import torch
    >>> from picker.engine.draft_layer import FrozenTarget
    >>> from strategies.mtp.model import MtpConfig, MtpHeads
    >>> _ = torch.manual_seed(0)
    >>> heads = MtpHeads(MtpConfig(hidden_size=8, intermediate_size=16, num_heads=2, num_kv_heads=1,
    ...                            vocab_size=20, num_modules=2))
    >>> frozen = FrozenTarget(torch.nn.Embedding(20, 8), torch.nn.RMSNorm(8), torch.randn(20, 8))
    >>> [t.shape for t in mtp_forward(heads, frozen, torch.randint(0, 20, (2, 6)), torch.randn(2, 6, 8), 3)]
    [torch.Size([2, 5, 20]), torch.Size([2, 4, 20]), torch.Size([2, 3, 20])]
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from picker.engine.draft_layer import KV, FrozenTarget
from picker.engine.training import DistillData, DistillSet, train_steps
from strategies.mtp.model import MtpConfig, MtpHeads, module_mask

StepCallback = Callable[[int, float], None]


def mtp_forward(heads: MtpHeads, target: FrozenTarget, tokens: torch.Tensor, last: torch.Tensor,
                depths: int) -> list[torch.Tensor]:
    """Logits per depth k = 1..depths, ``(B, T - k, V)``: position i guesses ``t_{i+k+1}``."""
    cfg = heads.config
    length = tokens.shape[1]
    h = last
    keys: dict[int, KV] = {}  # module -> its keys over every position it covers (what drafting caches)
    out = []
    for k in range(1, depths + 1):
        n = length - k
        if n <= 0:
            break
        m = cfg.module_for(k)
        embedded = target.embed(tokens[:, k: k + n]).detach()
        if k <= cfg.num_modules:
            g, keys[m] = heads.modules_[m](h[:, :n], embedded, torch.arange(n), module_mask(n, k), None)
        else:  # module D again: its committed keys, and rows that are queries only
            past = keys[m]
            mask = module_mask(n, cfg.num_modules, past=past[0].shape[2], rows_are_keys=False)
            g, _ = heads.modules_[m](h[:, :n], embedded, torch.arange(n), mask, past)
        out.append(target.logits(g))
        h = g
    return out


def mtp_loss(heads: MtpHeads, target: FrozenTarget, rows: DistillSet, idx: torch.Tensor, depths: int) -> torch.Tensor:
    """Mean soft cross-entropy over depths for rows ``idx``."""
    tokens, last = rows.tokens[idx], rows.hidden["last"][idx]
    total = last.new_zeros(())
    logits = mtp_forward(heads, target, tokens, last, depths)
    for k, lg in enumerate(logits, start=1):
        with torch.no_grad():  # the target's distribution for t_{i+k+1}, read at position i + k
            q = torch.softmax(last[:, k: k + lg.shape[1]] @ target.lm_head.T, dim=-1)
        total = total - (q * torch.log_softmax(lg, dim=-1)).sum(-1).mean()
    return total / max(1, len(logits))


@torch.no_grad()
def depth_accuracy(heads: MtpHeads, target: FrozenTarget, rows: DistillSet, depths: int,
                   batch: int = 16) -> list[float]:
    """Top-1 agreement with the target's argmax at each depth, given a correct chain before it
    (per-depth greedy acceptance on the rows' text)."""
    hits, counts = [0.0] * depths, [0] * depths
    for i in range(0, rows.tokens.shape[0], batch):
        tokens, last = rows.tokens[i: i + batch], rows.hidden["last"][i: i + batch]
        best = (last @ target.lm_head.T).argmax(-1)
        for k, lg in enumerate(mtp_forward(heads, target, tokens, last, depths), start=1):
            want = best[:, k: k + lg.shape[1]]
            hits[k - 1] += (lg.argmax(-1) == want).sum().item()
            counts[k - 1] += want.numel()
    return [h / max(1, c) for h, c in zip(hits, counts)]


def new_heads(target_model: Any, num_modules: int, seed: int) -> MtpHeads:
    """Seeded, untrained modules whose blocks are shaped like the target's decoder layers."""
    cfg = target_model.config
    config = MtpConfig(
        hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
        num_heads=cfg.num_attention_heads, num_kv_heads=cfg.num_key_value_heads, vocab_size=cfg.vocab_size,
        num_modules=num_modules, rms_norm_eps=cfg.rms_norm_eps,
        rope_theta=float(getattr(cfg, "rope_parameters", {}).get("rope_theta", 10000.0)),
    )
    torch.manual_seed(seed)
    return MtpHeads(config)


def train_heads(
    target: Any, data: DistillData, out_dir: Path | None, *, steps: int, seed: int,
    on_step: StepCallback | None = None, num_modules: int = 2, depths: int = 4, batch: int = 4, lr: float = 2e-3,
) -> dict[str, Any]:
    """Train ``num_modules`` modules over ``depths`` chained depths; save them to ``out_dir`` (if given).

    The zoo trains two modules -- one block per depth, then the second reused -- so both the
    DeepSeek-V3 chain and the recurrent reuse past D run in every test. Returns a report with the
    loss curve's ends and held-out top-1 accuracy per depth, before and after training.
    """
    started = time.perf_counter()
    frozen = FrozenTarget.of(target)
    heads = new_heads(target, num_modules, seed)
    untrained = depth_accuracy(heads, frozen, data.heldout, depths)
    losses = train_steps(heads, lambda idx: mtp_loss(heads, frozen, data.train, idx, depths), steps=steps,
                         rows=data.train.tokens.shape[0], batch=batch, lr=lr, seed=seed, on_step=on_step)
    report: dict[str, Any] = {
        "depth_accuracy": depth_accuracy(heads, frozen, data.heldout, depths),
        "untrained_depth_accuracy": untrained, "num_modules": num_modules, "depths": depths,
        "loss_first": losses[0] if losses else None, "loss_last": losses[-1] if losses else None,
        "steps": steps, "seconds": round(time.perf_counter() - started, 2),
    }
    if out_dir is not None:
        heads.config = MtpConfig(**{**heads.config.__dict__, "meta": report})
        heads.save(out_dir)
    return report

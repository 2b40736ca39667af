"""Train Medusa heads by self-distillation on text the frozen target generated itself.

The data (:class:`picker.engine.training.DistillData`) holds token rows and the target's final hidden
states over them. Head k at position t is trained toward the target's own distribution for
``x_{t+2+k}``, i.e. ``softmax(lm_head(h_{t+1+k}))``: soft labels carry the whole distribution, so
the heads learn the target's ranking, which is what both greedy verification (argmax match) and
sampling (accept with ``q(d)``) reward. After training, each head's top-rank accuracy on held-out
rows decides the tree (:func:`strategies.medusa.heads.greedy_choices`), stored with the heads.

    >>> import torch
    >>> from types import SimpleNamespace
    >>> from picker.engine.training import DistillData, DistillSet
    >>> g = torch.Generator().manual_seed(0)
    >>> lm = torch.nn.Linear(8, 13, bias=False)
    >>> target = SimpleNamespace(get_output_embeddings=lambda: lm)
    >>> rows = DistillSet(torch.randint(0, 13, (4, 12), generator=g), {"last": torch.randn(4, 12, 8)})
    >>> data = DistillData(train=rows, heldout=rows)
    >>> import tempfile, pathlib
    >>> out = pathlib.Path(tempfile.mkdtemp())
    >>> report = train_heads(target, data, out, steps=3, seed=0, num_heads=2, batch=2)
    >>> sorted(report)[:3], (out / "config.json").exists()
    (['accuracy', 'budget', 'expected_accept_length'], True)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from picker.engine.training import DistillData, DistillSet, optimizer_step
from strategies.medusa.heads import MedusaConfig, MedusaHeads, greedy_choices

StepCallback = Callable[[int, float], None]

# Ranks whose accuracy is measured per head: enough for any tree of the sizes we verify on CPU.
MAX_RANK = 6


def distill_loss(
    heads: MedusaHeads, hidden: torch.Tensor, lm_head: torch.Tensor, weights: torch.Tensor
) -> torch.Tensor:
    """Soft cross-entropy of every head against the target's distribution ``k + 1`` positions on.

    ``hidden``: ``(B, T, H)`` final hidden states. Cross-entropy to a fixed ``q`` differs from
    KL(q ‖ p) by q's entropy only, so the gradients are those of the KL.
    """
    num_heads = heads.config.num_heads
    steps = hidden.shape[1]
    with torch.no_grad():
        q = torch.softmax(hidden @ lm_head.T, dim=-1)  # q[:, t] is the target's dist. for x_{t+1}
    log_p = torch.log_softmax(heads.logits(hidden[:, : steps - 1], lm_head), dim=-1)
    total = hidden.new_zeros(())
    for k in range(num_heads):
        n = steps - 1 - k  # positions t whose label position t + 1 + k is still inside the row
        if n <= 0:
            continue
        ce = -(q[:, k + 1: k + 1 + n] * log_p[:, :n, k]).sum(-1).mean()
        total = total + weights[k] * ce
    return total / weights.sum()


@torch.no_grad()
def rank_accuracy(
    heads: MedusaHeads, rows: DistillSet, lm_head: torch.Tensor, ranks: int = MAX_RANK
) -> list[list[float]]:
    """``acc[k][r]``: how often head k's rank-r token is the target's argmax at its position."""
    hidden = rows.hidden["last"]
    steps = hidden.shape[1]
    best = (hidden @ lm_head.T).argmax(-1)  # (N, T): the target's greedy token after each position
    acc: list[list[float]] = []
    for k in range(heads.config.num_heads):
        n = steps - 1 - k
        logits = heads.logits(hidden[:, :n], lm_head, heads=k + 1)[..., k, :]
        top = logits.topk(ranks, dim=-1).indices                       # (N, n, ranks)
        hit = top == best[:, k + 1: k + 1 + n, None]
        acc.append(hit.float().mean(dim=(0, 1)).tolist())
    return acc


def expected_accept_length(
    choices: tuple[tuple[int, ...], ...], accuracy: list[list[float]]
) -> float:
    """1 + Σ over nodes of the product of accuracies on its path (tokens per step, bonus included)."""
    total = 1.0
    for path in choices:
        prob = 1.0
        for depth, rank in enumerate(path):
            prob *= accuracy[depth][rank]
        total += prob
    return total


def _fit(heads: MedusaHeads, hidden: torch.Tensor, lm_head: torch.Tensor, steps: int,
         batch: int, lr: float, seed: int, on_step: StepCallback | None) -> list[float]:
    """AdamW on random row batches, learning rate decaying linearly to zero; the loss per step.

    Steps go through :func:`picker.engine.training.optimizer_step` (gradient norm clipped to 1).
    """
    # Later heads guess further ahead and are less often right: weigh them down (Medusa does too).
    weights = torch.tensor([0.8**k for k in range(heads.config.num_heads)])
    opt = torch.optim.AdamW(heads.parameters(), lr=lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(seed)
    losses: list[float] = []
    heads.train()
    for step in range(steps):
        idx = torch.randint(0, hidden.shape[0], (batch,), generator=gen)
        for group in opt.param_groups:  # short runs end with small steps
            group["lr"] = lr * (1.0 - step / max(1, steps))
        losses.append(optimizer_step(opt, distill_loss(heads, hidden[idx], lm_head, weights),
                                     heads.parameters()))
        if on_step is not None:
            on_step(step, losses[-1])
    heads.eval()
    return losses


def train_heads(
    target: Any,
    data: DistillData,
    out_dir: Path,
    *,
    steps: int,
    seed: int,
    on_step: StepCallback | None = None,
    num_heads: int = 4,
    budget: int = 10,
    batch: int = 4,
    lr: float = 1e-2,
) -> dict[str, Any]:
    """Train Medusa heads on ``data``, choose their tree, save to ``out_dir``; return a report.

    ``target`` is the frozen Hugging Face model (only its output embedding is read). ``budget``
    is the number of tree nodes; the chosen tree and the measured accuracies go in ``config.json``.
    """
    started = time.perf_counter()
    lm_head = target.get_output_embeddings().weight.detach()
    hidden = data.train.hidden["last"]
    torch.manual_seed(seed)
    # The tree is chosen after training, from measured accuracy; a one-node tree until then.
    config = MedusaConfig(hidden_size=hidden.shape[-1], vocab_size=lm_head.shape[0],
                          num_heads=num_heads, choices=((0,),))
    heads = MedusaHeads(config)
    untrained = rank_accuracy(heads, data.heldout, lm_head)
    losses = _fit(heads, hidden, lm_head, steps, batch, lr, seed, on_step)
    accuracy = rank_accuracy(heads, data.heldout, lm_head)
    choices = greedy_choices(accuracy, budget)
    report: dict[str, Any] = {
        "accuracy": accuracy,
        "untrained_accuracy": untrained,
        "budget": budget,
        "expected_accept_length": expected_accept_length(choices, accuracy),
        "untrained_expected_accept_length": expected_accept_length(
            greedy_choices(untrained, budget), untrained),
        "loss_first": losses[0] if losses else None,
        "loss_last": losses[-1] if losses else None,
        "steps": steps,
        "seconds": round(time.perf_counter() - started, 2),
    }
    final = MedusaConfig(hidden_size=config.hidden_size, vocab_size=config.vocab_size,
                         num_heads=num_heads, choices=choices, meta=report)
    heads.config = final
    heads.save(out_dir)
    return report

"""Train the EAGLE-3 head with training-time test, distilling the frozen target's own predictions.

Rows come from :class:`picker.engine.training.DistillData` (target-generated text plus the target's
hidden states). Step 0 runs the draft layer on the target's fused features; step k > 0 replaces
the feature at position t by the draft's own step-(k-1) output at t - 1, exactly what drafting
depth k + 1 feeds it at inference. Attention follows the tree it imitates: a step-k query at t
sees the step-0 entries up to ``s = t - k`` (the last position with a real target feature) and, for
j = 1..k, the step-j entry at ``s + j`` (its own path). Every step is scored against the target's
distribution for ``x_{t+2}`` (soft cross-entropy, i.e. KL up to a constant).

    >>> ttt_mask(3, 1).int()          # step 1 over 3 positions: step-0 prefix, then own diagonal
    tensor([[0, 0, 0, 1, 0, 0],
            [1, 0, 0, 0, 1, 0],
            [1, 1, 0, 0, 0, 1]], dtype=torch.int32)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from picker.engine.draft_layer import KV, FrozenTarget
from picker.engine.training import DistillData, DistillSet, train_steps
from strategies.eagle3.model import Eagle3Config, Eagle3Head, default_feature_layers

__all__ = ["FrozenTarget", "depth_accuracy", "fit_greedy_temperature", "new_head", "train_heads", "ttt_forward",
           "ttt_loss", "ttt_mask"]

StepCallback = Callable[[int, float], None]


def ttt_mask(length: int, step: int) -> torch.Tensor:
    """``(T, (step + 1) T)`` bool mask of a step-``step`` query over the step-0..step key blocks."""
    t = torch.arange(length)[:, None]
    u = torch.arange(length)[None, :]
    blocks = [u <= t - step]                                 # step 0: real features up to s
    blocks += [u == t - (step - j) for j in range(1, step + 1)]  # step j: the path entry at s + j
    return torch.cat(blocks, dim=1)


def ttt_forward(
    head: Eagle3Head, target: FrozenTarget, tokens: torch.Tensor,
    hidden: dict[Any, torch.Tensor], steps: int,
) -> list[torch.Tensor]:
    """Unroll ``steps`` draft steps over rows; returns per-step logits ``(B, T - 1, V)``.

    Position t (0 .. T-2) reads token ``x_{t+1}``; the step-k logits there guess ``x_{t+2}``.
    """
    stacked = torch.cat([hidden[layer] for layer in head.config.feature_layers], dim=-1)
    length = tokens.shape[1] - 1
    feature = head.fuse(stacked[:, :length])
    embedded = target.embed(tokens[:, 1:]).detach()
    positions = torch.arange(length)
    past: KV | None = None
    out: list[torch.Tensor] = []
    for k in range(steps):
        g, (key, value) = head.step(feature, embedded, positions, ttt_mask(length, k), past)
        out.append(target.logits(g))
        past = (key, value) if past is None else (torch.cat((past[0], key), 2),
                                                   torch.cat((past[1], value), 2))
        # Next step's feature at t is this step's output at t - 1 (position 0 has none: zeros).
        feature = torch.cat((torch.zeros_like(g[:, :1]), g[:, :-1]), dim=1)
    return out


def ttt_loss(head: Eagle3Head, target: FrozenTarget, rows: DistillSet, idx: torch.Tensor,
             steps: int, weights: Sequence[float]) -> torch.Tensor:
    """Weighted soft cross-entropy over the unrolled steps for rows ``idx``."""
    tokens = rows.tokens[idx]
    hidden = {key: value[idx] for key, value in rows.hidden.items()}
    with torch.no_grad():
        q = torch.softmax(hidden["last"][:, 1:] @ target.lm_head.T, dim=-1)  # dist. of x_{t+2}
    total = q.new_zeros(())
    for k, logits in enumerate(ttt_forward(head, target, tokens, hidden, steps)):
        # Positions t < k have no real prefix at step k: they are padding, not training signal.
        ce = -(q[:, k:] * torch.log_softmax(logits[:, k:], dim=-1)).sum(-1).mean()
        total = total + weights[k] * ce
    return total / sum(weights[:steps])


@torch.no_grad()
def depth_accuracy(head: Eagle3Head, target: FrozenTarget, rows: DistillSet, steps: int,
                   batch: int = 16) -> list[float]:
    """Top-1 agreement with the target's argmax at each draft depth, given a correct path so far.

    With greedy verification this is α per depth (the chance depth k + 1 is accepted when depths
    1..k were), measured on the rows' text.
    """
    hits = [0.0] * steps
    counts = [0] * steps
    for i in range(0, rows.tokens.shape[0], batch):
        tokens = rows.tokens[i: i + batch]
        hidden = {key: value[i: i + batch] for key, value in rows.hidden.items()}
        best = (hidden["last"][:, 1:] @ target.lm_head.T).argmax(-1)
        for k, logits in enumerate(ttt_forward(head, target, tokens, hidden, steps)):
            hits[k] += (logits[:, k:].argmax(-1) == best[:, k:]).sum().item()
            counts[k] += best[:, k:].numel()
    return [h / max(1, c) for h, c in zip(hits, counts)]


@torch.no_grad()
def fit_greedy_temperature(head: Eagle3Head, target: FrozenTarget, rows: DistillSet,
                           steps: int = 2, sample: int = 1024) -> float:
    """The temperature t at which the mean top-1 draft probability equals the top-1 accuracy.

    Mean max-probability falls monotonically as t grows, so bisection on log t finds it.
    Positions are pooled over the first ``steps`` draft depths (a seeded sample of them).
    """
    logits, hits = [], []
    for i in range(0, rows.tokens.shape[0], 16):
        hidden = {key: value[i: i + 16] for key, value in rows.hidden.items()}
        best = (hidden["last"][:, 1:] @ target.lm_head.T).argmax(-1)
        for k, out in enumerate(ttt_forward(head, target, rows.tokens[i: i + 16], hidden, steps)):
            logits.append(out[:, k:].flatten(0, 1))
            hits.append((out[:, k:].argmax(-1) == best[:, k:]).flatten())
    flat, hit = torch.cat(logits), torch.cat(hits).float()
    pick = torch.randperm(flat.shape[0], generator=torch.Generator().manual_seed(0))[:sample]
    flat, accuracy = flat[pick], float(hit[pick].mean())
    lo, hi = -5.0, 3.0  # log t; 20 halvings leave it within 1e-5 (relative) of the root
    for _ in range(20):
        mid = (lo + hi) / 2
        confidence = float(torch.softmax(flat / torch.exp(torch.tensor(mid)), -1).max(-1).values.mean())
        lo, hi = (mid, hi) if confidence > accuracy else (lo, mid)
    return round(float(torch.exp(torch.tensor((lo + hi) / 2))), 4)


def new_head(target_model: Any, seed: int) -> Eagle3Head:
    """A seeded, untrained head shaped like one of the target's decoder layers."""
    cfg = target_model.config
    config = Eagle3Config(
        hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
        num_heads=cfg.num_attention_heads, num_kv_heads=cfg.num_key_value_heads,
        vocab_size=cfg.vocab_size, rms_norm_eps=cfg.rms_norm_eps,
        rope_theta=float(getattr(cfg, "rope_parameters", {}).get("rope_theta", 10000.0)),
        feature_layers=default_feature_layers(cfg.num_hidden_layers),
    )
    torch.manual_seed(seed)
    return Eagle3Head(config)


def train_heads(
    target: Any,
    data: DistillData,
    out_dir: Path | None,
    *,
    steps: int,
    seed: int,
    on_step: StepCallback | None = None,
    ttt_steps: int = 4,
    batch: int = 4,
    lr: float = 2e-3,
) -> dict[str, Any]:
    """Train an EAGLE-3 head with ``ttt_steps`` unrolled steps; save it to ``out_dir`` (if given).

    Returns a report with the loss curve's ends and held-out top-1 accuracy per draft depth,
    before and after training.
    """
    started = time.perf_counter()
    frozen = FrozenTarget.of(target)
    head = new_head(target, seed)
    depths = max(ttt_steps, 4)  # always report 4 depths, so runs with and without TTT compare
    untrained = depth_accuracy(head, frozen, data.heldout, depths)
    weights = [1.0] * ttt_steps  # every depth matters: a miss at depth 1 ends the path anyway
    losses = train_steps(head, lambda idx: ttt_loss(head, frozen, data.train, idx, ttt_steps, weights), steps=steps,
                         rows=data.train.tokens.shape[0], batch=batch, lr=lr, seed=seed, on_step=on_step)
    greedy_t = fit_greedy_temperature(head, frozen, data.heldout)
    report: dict[str, Any] = {
        "depth_accuracy": depth_accuracy(head, frozen, data.heldout, depths),
        "greedy_temperature": greedy_t,
        "untrained_depth_accuracy": untrained,
        "ttt_steps": ttt_steps,
        "loss_first": losses[0] if losses else None,
        "loss_last": losses[-1] if losses else None,
        "steps": steps,
        "seconds": round(time.perf_counter() - started, 2),
    }
    if out_dir is not None:
        head.config = Eagle3Config(**{**head.config.__dict__, "greedy_temperature": greedy_t,
                                      "meta": report})
        head.save(out_dir)
    return report

"""What the zoo report measures beyond loss: forward costs and how well the draft tracks the target.

Costs are taken the way a shared CPU asks for (docs/facts.md): one thread, batch 1, a KV cache filled to
a realistic context, the compared calls interleaved pair by pair, medians quoted. Agreement is
teacher-forced on held-out text: at each position, does the draft's argmax equal the target's
(greedy acceptance), and what is ``Σ_x min(p(x), q(x))`` (the acceptance rate α at temperature 1).

    >>> import torch
    >>> from picker.zoo.train import ModelSpec, new_model
    >>> m = new_model(ModelSpec(32, 1, 2, 1, 64), vocab_size=300, max_positions=128, seed=0)
    >>> costs = forward_costs(m, m, context=16, reps=3)
    >>> costs["six_vs_one"] > 0 and costs["draft_vs_target"] > 0
    True
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.nn.functional as F
from transformers import PreTrainedModel

from picker.zoo.train import deterministic


@torch.no_grad()
def _timed_forwards(
    model: PreTrainedModel, context: int, sizes: tuple[int, ...], reps: int
) -> dict[int, float]:
    """Median seconds of a forward over ``n`` new tokens after ``context`` cached ones, per ``n``."""
    gen = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    cache = model(input_ids=torch.randint(3, vocab, (1, context), generator=gen), use_cache=True).cache
    inputs = {n: torch.randint(3, vocab, (1, n), generator=gen) for n in sizes}
    times: dict[int, list[float]] = {n: [] for n in sizes}
    for _ in range(reps):
        for n in sizes:  # interleaved, so a burst of load hits every size alike
            start = time.perf_counter()
            model(input_ids=inputs[n], cache=cache, use_cache=True)
            times[n].append(time.perf_counter() - start)
            cache.crop(-n)  # negative: remove n tokens (transformers 5 convention)
    return {n: statistics.median(t) for n, t in times.items()}


def forward_costs(
    target: PreTrainedModel, draft: PreTrainedModel, context: int = 256, reps: int = 30
) -> dict[str, float]:
    """Target 1- and 6-token forwards and draft 1-token forward, one thread; ratios derived here.

    ``six_vs_one`` is the premise of speculation (verifying 5 drafts costs about one step);
    ``draft_vs_target`` is the cost ratio ``c`` in ``S = E[L] / (N·c + 1)``.
    """
    with deterministic(threads=1):
        target.eval()
        draft.eval()
        _timed_forwards(target, context, (1,), 3)  # warm-up: first calls allocate
        _timed_forwards(draft, context, (1,), 3)
        t = _timed_forwards(target, context, (1, 6), reps)
        d = _timed_forwards(draft, context, (1,), reps)
        t1_again = _timed_forwards(target, context, (1,), reps)[1]
    t1 = statistics.median([t[1], t1_again])
    return {
        "context": float(context),
        "target_1_ms": round(t1 * 1e3, 3),
        "target_6_ms": round(t[6] * 1e3, 3),
        "draft_1_ms": round(d[1] * 1e3, 3),
        "six_vs_one": round(t[6] / t1, 3),
        "draft_vs_target": round(d[1] / t1, 3),
    }


@torch.no_grad()
def compare(
    target: PreTrainedModel, draft: PreTrainedModel, rows: torch.Tensor, batch: int = 16
) -> dict[str, float]:
    """One teacher-forced pass over packed rows: both models' loss, greedy agreement, α at T=1.

    Losses are mean next-token cross-entropy in nats; agreement is the share of positions where
    the draft's argmax equals the target's; ``alpha_t1`` is the mean of ``Σ_x min(p(x), q(x))``.
    """
    target.eval()
    draft.eval()
    sums = {"target_loss": 0.0, "draft_loss": 0.0, "greedy_agreement": 0.0, "alpha_t1": 0.0}
    count = 0
    for i in range(0, rows.shape[0], batch):
        inputs, labels = rows[i: i + batch, :-1], rows[i: i + batch, 1:].flatten()
        q_log = torch.log_softmax(target(input_ids=inputs).logits.flatten(0, 1), dim=-1)
        p_log = torch.log_softmax(draft(input_ids=inputs).logits.flatten(0, 1), dim=-1)
        sums["target_loss"] += F.nll_loss(q_log, labels, reduction="sum").item()
        sums["draft_loss"] += F.nll_loss(p_log, labels, reduction="sum").item()
        sums["greedy_agreement"] += (q_log.argmax(-1) == p_log.argmax(-1)).sum().item()
        sums["alpha_t1"] += torch.minimum(p_log.exp(), q_log.exp()).sum().item()
        count += labels.numel()
    return {k: round(v / max(1, count), 4) for k, v in sums.items()}

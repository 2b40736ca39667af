"""The shared training plumbing (``picker.engine.training``): one clipped optimizer step, seeded data."""

from __future__ import annotations

import torch

from picker.engine.training import MAX_GRAD_NORM, cut_prompts, optimizer_step


def _step(scale: float, max_norm: float = MAX_GRAD_NORM) -> tuple[torch.Tensor, torch.Tensor, float]:
    """(weight before, weight after, loss) of one SGD step (lr 1) on ``scale * sum(w)``."""
    w = torch.nn.Parameter(torch.zeros(4))
    opt = torch.optim.SGD([w], lr=1.0)
    before = w.detach().clone()
    loss = optimizer_step(opt, scale * w.sum() + 2.0, [w], max_norm=max_norm)
    return before, w.detach().clone(), loss


def test_large_gradients_are_clipped_to_the_max_norm() -> None:
    before, after, loss = _step(scale=10.0)        # gradient (10, 10, 10, 10): norm 20
    assert loss == 2.0
    assert torch.allclose((after - before).norm(), torch.tensor(MAX_GRAD_NORM), atol=1e-5)
    assert torch.allclose(after, torch.full((4,), -0.5), atol=1e-5)


def test_small_gradients_step_unchanged() -> None:
    before, after, _ = _step(scale=0.1)            # norm 0.2 < 1: a plain SGD step, bit for bit
    assert torch.equal(after, before - 0.1)


def test_gradients_do_not_accumulate_across_steps() -> None:
    w = torch.nn.Parameter(torch.zeros(2))
    opt = torch.optim.SGD([w], lr=1.0)
    for _ in range(3):
        optimizer_step(opt, 0.1 * w.sum(), [w])
    assert torch.allclose(w.detach(), torch.full((2,), -0.3))  # 3 x 0.1, not 0.1 + 0.2 + 0.3


def test_cut_prompts_is_seeded_and_skips_short_documents() -> None:
    docs = [[1, 2], list(range(10, 30)), list(range(40, 60))]
    a, b = cut_prompts(docs, 5, 4, seed=3), cut_prompts(docs, 5, 4, seed=3)
    assert torch.equal(a, b) and a.shape == (5, 4)
    assert all(row[0] >= 10 for row in a.tolist())  # never the 2-token document

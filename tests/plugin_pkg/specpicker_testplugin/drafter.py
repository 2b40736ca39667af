"""The `repeat-last` drafter: no state, no model; a chain of the pending token repeated.

    >>> import numpy as np
    >>> from picker.engine.drafting import DraftContext, SamplingParams
    >>> ctx = DraftContext([4, 9], 2, SamplingParams(), np.random.default_rng(0), 8)
    >>> RepeatLastDrafter(3).propose(ctx).tree.tokens
    (9, 9, 9)
"""

from __future__ import annotations

from typing import Any

from picker.engine.drafting import Draft, DraftContext
from picker.engine.tree import TokenTree


class RepeatLastDrafter:
    """Loops in greedy text (an undertrained model repeating itself) are exactly this."""

    def __init__(self, num_draft_tokens: int = 3) -> None:
        self.num_draft_tokens = num_draft_tokens

    def propose(self, ctx: DraftContext) -> Draft:
        k = min(self.num_draft_tokens, ctx.max_draft)
        return Draft(tree=TokenTree.from_chain([ctx.tokens[-1]] * k), p=None)


def make_drafter(*, target_backend: Any = None, artifact: Any = None, num_draft_tokens: int = 3) -> RepeatLastDrafter:
    """No model, no artifact: ``num_draft_tokens`` is its one knob."""
    return RepeatLastDrafter(num_draft_tokens)

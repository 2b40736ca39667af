"""The drafter contract: strategies propose, the loop verifies.

A strategy plugin's ``make_drafter(*, target_backend, artifact=None, **options)`` returns an object
with ``propose(ctx) -> Draft`` and, optionally, ``observe(step)`` (the loop calls it after every
verification; the default is a no-op) and ``reset(prompt_ids)`` (called once per generation before
the first proposal). ``target_backend`` is the target's :class:`picker.engine.backend.TorchBackend`;
``artifact`` is the local path of what the plugin declares in ``Capabilities.artifact`` (the draft
model folder for ``draft_model``, the heads folder for ``medusa_heads`` / ``eagle3_head``), or None
when it declares nothing; a missing one raises :class:`MissingArtifact`. ``options`` are the
strategy's own knobs (draft length, tree shape, window sizes), each with a default.

    >>> import numpy as np
    >>> from picker.engine.tree import TokenTree
    >>> d = Draft(tree=TokenTree.from_chain([5, 7]), p=None)   # a deterministic chain
    >>> d.is_chain, len(d)
    (True, 2)

What the loop gives a drafter (:class:`DraftContext`) and gets back (:class:`Draft`), and what it
reports after verifying (:class:`StepOutcome`), is all there is: a drafter never touches the
target's KV cache and never accepts tokens. A drafter that needs intermediate target layers
(EAGLE-3) lists them in an optional ``hidden_layers`` attribute (read by :func:`hidden_layers_of`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from picker.engine.tree import TokenTree
from picker.engine.verify import SiblingRegime
from picker.errors import UserError


class MissingArtifact(UserError):
    """A strategy's declared artifact (draft model, trained heads) is not available."""


@dataclass(frozen=True)
class SamplingParams:
    """Applied identically to the target's q and the draft's p (``picker.engine.sampling.warp_pair``)."""

    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


@dataclass(frozen=True)
class DraftContext:
    """What a drafter may read when proposing.

    ``tokens`` is the whole committed sequence (prompt + emitted tokens, including the pending token
    that the target has not consumed yet). It is the loop's live list: read it during the call,
    never mutate it, copy what you keep. ``hidden`` holds target hidden states for strategies
    that declare ``needs_hidden_states`` (None otherwise): ``hidden["last"]``
    is the final-layer hidden state (after the final norm, what the LM head reads) at every
    position that entered the target's cache in the last step and was kept -- the pending tokens
    fed plus the accepted draft nodes -- as a torch tensor of shape ``(n, H)``. Row i belongs to
    token ``tokens[-1 - n + i]``; the last row produced the pending token ``tokens[-1]``. After
    prefill n is the prompt length. ``hidden[layer_index]`` is the same for the decoder layers the
    drafter lists in ``hidden_layers`` (EAGLE-3 fuses low/mid/high layers). The tensors come from
    ``torch.inference_mode``: clone them before using them in autograd. ``max_draft`` caps how
    many draft nodes the loop will verify this step. ``want_scores``: the loop is profiling a
    greedy chain and would like ``Draft.scores`` (optional; drafters that rank tokens send them).
    """

    tokens: Sequence[int]
    prompt_len: int
    sampling: SamplingParams
    rng: np.random.Generator
    max_draft: int
    hidden: dict[Any, Any] | None = None
    want_scores: bool = False


@dataclass(frozen=True)
class Draft:
    """A proposal: a token tree (a chain is a tree whose node i has parent i-1).

    ``p`` holds, per node, the draft distribution the node's token was drawn from (already warped
    with the step's sampling params), shape ``(M, V)``; ``None`` means deterministic proposals
    (n-gram, lookahead, top-k children), which the verifier treats as one-hot. ``siblings`` says how
    sibling nodes were drawn (see ``picker.engine.verify``). ``scores``: optionally, per node, the scores
    over the vocabulary the drafter ranked that node's token by (shape ``(M, V)``, any monotone
    transform of its probabilities), sent when ``DraftContext.want_scores``; the verifier never
    reads them, the profiler's sibling probe does (``picker.engine.siblings``).
    """

    tree: TokenTree
    p: np.ndarray | None = None
    siblings: SiblingRegime = "iid"
    scores: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.tree)

    @property
    def is_chain(self) -> bool:
        return all(parent == i - 1 for i, parent in enumerate(self.tree.parents))


@dataclass(frozen=True)
class StepOutcome:
    """What verification decided, handed to ``Drafter.observe``.

    ``accepted_nodes`` index the draft's tree; ``emitted`` are the accepted draft tokens plus the
    correction/bonus token (the new pending token). ``hidden`` carries the target's hidden states
    for the accepted positions when the drafter needs them (same layout as DraftContext.hidden).
    """

    draft: Draft
    accepted_nodes: tuple[int, ...]
    emitted: tuple[int, ...]
    tokens: Sequence[int]  # the committed sequence after this step (live: copy what you keep)
    hidden: dict[Any, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # Raw (unwarped) target logits at the root and after every draft node, shape (M + 1, V):
    # lookahead reads its Jacobi window's next guesses from the same forward that verified.
    q_logits: np.ndarray | None = None


@runtime_checkable
class Drafter(Protocol):
    """The one required method; ``observe`` and ``reset`` are optional hooks."""

    def propose(self, ctx: DraftContext) -> Draft: ...


def hidden_layers_of(drafter: object) -> tuple[int, ...]:
    """Optional attribute: the target decoder layers whose hidden states the drafter reads."""
    return tuple(int(i) for i in getattr(drafter, "hidden_layers", ()))


def call_observe(drafter: Drafter, outcome: StepOutcome) -> None:
    """Optional hook: drafters without ``observe`` are left alone."""
    hook = getattr(drafter, "observe", None)
    if hook is not None:
        hook(outcome)


def call_reset(drafter: Drafter, prompt_ids: Sequence[int]) -> None:
    """Optional hook: drafters without ``reset`` are left alone."""
    hook = getattr(drafter, "reset", None)
    if hook is not None:
        hook(prompt_ids)

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
target's KV cache and never accepts tokens.

The loop drives a :class:`Speculator`: a drafter bound to its plugin's declared
:class:`~picker.engine.plugins.Capabilities`, checked once when bound. A drafter whose plugin
declares ``needs_hidden_states`` must carry a ``hidden_layers`` attribute (the target decoder
layers it reads besides ``"last"``; EAGLE-3 fuses low/mid/high layers, Medusa lists none); a
``deterministic_draft`` drafter must send ``p=None``. For concurrency above one the speculator
serves one drafter per sequence: the optional hook ``fork()`` returns a fresh drafter for another
sequence (sharing read-only weights), else ``spawn`` builds one; the optional hook
``propose_batch`` lets one drafter propose for all of them in one pass (:meth:`Speculator.propose_all`).

    >>> from picker.engine.plugins import Capabilities
    >>> spec = Speculator(object(), Capabilities(deterministic_draft=True))
    >>> spec.hidden_layers, spec.wants_hidden
    ((), False)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from picker.engine.plugins import Capabilities
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
    many draft nodes the loop will verify this step.
    """

    tokens: Sequence[int]
    prompt_len: int
    sampling: SamplingParams
    rng: np.random.Generator
    max_draft: int
    hidden: dict[Any, Any] | None = None


@dataclass(frozen=True)
class Draft:
    """A proposal: a token tree (a chain is a tree whose node i has parent i-1).

    ``p`` holds, per node, the draft distribution the node's token was drawn from (already warped
    with the step's sampling params), shape ``(M, V)``; ``None`` means deterministic proposals
    (n-gram, lookahead, top-k children), which the verifier treats as one-hot. ``siblings`` says how
    sibling nodes were drawn (see ``picker.engine.verify``).
    """

    tree: TokenTree
    p: np.ndarray | None = None
    siblings: SiblingRegime = "iid"

    def __len__(self) -> int:
        return len(self.tree)

    @property
    def is_chain(self) -> bool:
        return self.tree.is_chain


EMPTY_DRAFT = Draft(tree=TokenTree((), ()), p=None)  # "nothing to propose": plain decoding this step


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
    # Raw (unwarped) target logits at the root and after every draft node, shape (M + 1, V):
    # lookahead reads its Jacobi window's next guesses from the same forward that verified.
    q_logits: np.ndarray | None = None


@runtime_checkable
class Drafter(Protocol):
    """The one required method; ``observe`` and ``reset`` are optional hooks."""

    def propose(self, ctx: DraftContext) -> Draft: ...


class Speculator:
    """A drafter bound to its declared capabilities: what the loop drives, one drafter per sequence.

    ``spawn`` builds a fresh drafter for one more concurrent sequence when the drafter has no
    ``fork()`` hook (plugins' factories do: ``lambda: build_drafter(plugin, ...)``).
    """

    def __init__(self, drafter: Drafter, capabilities: Capabilities,
                 spawn: Callable[[], Drafter] | None = None) -> None:
        self.capabilities = capabilities
        self.wants_hidden = capabilities.needs_hidden_states
        layers = getattr(drafter, "hidden_layers", None) if self.wants_hidden else ()
        if layers is None:  # a declared capability the drafter does not back: fail at binding
            raise TypeError(f"{type(drafter).__name__}: declares needs_hidden_states, has no hidden_layers")
        self.hidden_layers = tuple(int(i) for i in layers)
        self._drafters = [drafter]
        self._spawn = spawn

    def drafter(self, slot: int) -> Drafter:
        """The drafter of concurrent sequence ``slot`` (0 = the bound one), made on first use."""
        while len(self._drafters) <= slot:
            fork = getattr(self._drafters[0], "fork", None)
            if fork is None and self._spawn is None:
                raise ValueError(f"{type(self._drafters[0]).__name__} serves one sequence: it has no "
                                 "fork() and the Speculator was given no spawn")
            self._drafters.append(fork() if fork is not None else self._spawn())  # type: ignore[misc]
        return self._drafters[slot]

    def propose(self, slot: int, ctx: DraftContext) -> Draft:
        """The slot's drafter proposes; a deterministic drafter's draft must come without ``p``."""
        return self._checked(slot, self.drafter(slot).propose(ctx))

    def propose_all(self, ctxs: Mapping[int, DraftContext]) -> dict[int, Draft]:
        """Every slot's draft for one step. When the drafter has the optional hook
        ``propose_batch(items)`` -- ``items`` its own forks (or itself) with their contexts, the
        drafts returned in order -- it proposes for all slots at once (a draft model: one draft
        forward per depth for every sequence); otherwise slot by slot, in ``ctxs`` order."""
        batch = getattr(self._drafters[0], "propose_batch", None) if len(ctxs) > 1 else None
        if batch is None:
            return {slot: self.propose(slot, ctx) for slot, ctx in ctxs.items()}
        drafts = batch([(self.drafter(slot), ctx) for slot, ctx in ctxs.items()])
        return {slot: self._checked(slot, d) for slot, d in zip(ctxs, drafts, strict=True)}

    def _checked(self, slot: int, draft: Draft) -> Draft:
        if draft.p is not None and self.capabilities.deterministic_draft:
            raise ValueError(f"{type(self._drafters[slot]).__name__} declares deterministic_draft "
                             "but sent p: the verifier would trust a distribution it was told is one-hot")
        return draft

    def reset(self, slot: int, prompt_ids: Sequence[int]) -> None:
        """Optional hook: drafters without ``reset`` are left alone."""
        hook = getattr(self.drafter(slot), "reset", None)
        if hook is not None:
            hook(prompt_ids)

    def observe(self, slot: int, outcome: StepOutcome) -> None:
        """Optional hook: drafters without ``observe`` are left alone."""
        hook = getattr(self.drafter(slot), "observe", None)
        if hook is not None:
            hook(outcome)


def bind(drafter: Drafter | None, capabilities: Capabilities | None = None,
         spawn: Callable[[], Drafter] | None = None) -> Speculator | None:
    """``Speculator(drafter, capabilities)``, or None (plain decoding) when there is no drafter."""
    if drafter is None:
        return None
    return Speculator(drafter, Capabilities() if capabilities is None else capabilities, spawn)


def call_observe(drafter: Drafter, outcome: StepOutcome) -> None:
    """Optional hook: drafters without ``observe`` are left alone (for wrappers of a drafter)."""
    hook = getattr(drafter, "observe", None)
    if hook is not None:
        hook(outcome)


def call_reset(drafter: Drafter, prompt_ids: Sequence[int]) -> None:
    """Optional hook: drafters without ``reset`` are left alone (for wrappers of a drafter)."""
    hook = getattr(drafter, "reset", None)
    if hook is not None:
        hook(prompt_ids)

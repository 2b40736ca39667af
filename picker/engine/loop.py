"""THE decode loop: propose -> verify in one target forward -> accept -> roll back -> emit.

Every strategy runs through :func:`generate`; a strategy only proposes (``picker.engine.drafting``).
With ``drafter=None`` the same loop is plain autoregressive decoding (the baseline): an empty
draft every step, one target forward per token.

    >>> import numpy as np, torch
    >>> from transformers import LlamaConfig, LlamaForCausalLM
    >>> from picker.engine.backend import TorchBackend
    >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
    <...>
    >>> cfg = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
    ...                   num_attention_heads=2, num_key_value_heads=1)
    >>> target = TorchBackend(LlamaForCausalLM(cfg))
    >>> out = generate(target, [1, 2, 3], max_new_tokens=5)
    >>> len(out.tokens), out.stats.steps, out.stop_reason
    (5, 5, 'max_tokens')

Conventions (stated once, used by every number): a *step* is one target forward, the prefill
included; ``drafted`` counts draft nodes sent to verification, ``accepted`` the draft nodes
accepted; tokens per step (tau) = new tokens / steps, the bonus/correction token included
(SGLang's ``spec_accept_length`` convention); ``tokens_per_second`` = new tokens / wall seconds
of the whole call (prefill included). Stop strings: the output ends with the token that completes
the first stop string (the string itself is kept in ``text``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol

import numpy as np
import torch

from picker.engine.backend import TorchBackend
from picker.engine.drafting import (
    Draft,
    DraftContext,
    Drafter,
    SamplingParams,
    StepOutcome,
    call_observe,
    call_reset,
    hidden_layers_of,
)
from picker.engine.plugins import Capabilities
from picker.engine.rollback import KVLedger
from picker.engine.sampling import warp
from picker.engine.siblings import greedy_sibling_counts, sibling_counts
from picker.engine.tree import TokenTree
from picker.engine.verify import (
    VerifyResult,
    verify_greedy_chain,
    verify_greedy_tree,
    verify_sample_chain,
    verify_sample_tree,
)

__all__ = ["Generation", "GenerationStats", "StepRecord", "generate"]

EMPTY_DRAFT = Draft(tree=TokenTree((), ()), p=None)
StopReason = Literal["max_tokens", "eos", "stop"]


class Decoder(Protocol):
    """Anything with ``decode(ids) -> str`` (a ``tokenizers.Tokenizer`` or a transformers one)."""

    def decode(self, ids: list[int]) -> str: ...


@dataclass(frozen=True)
class StepRecord:
    """One target forward. ``first_rejection``: depth (0-based) of the first rejected draft
    level, None when nothing was rejected (all accepted, or nothing drafted). ``draft_seconds``:
    the drafter's time (``propose`` + ``observe``); ``verify_seconds``: the target forward,
    verification and rollback."""

    drafted: int
    accepted: int
    first_rejection: int | None
    emitted: int
    draft_seconds: float
    verify_seconds: float
    # With ``probe_siblings``: expected (reached, accepted) counts of sibling ranks 2.. at this
    # step's rejection (picker.engine.siblings), and the seconds spent computing them (not in ``seconds``).
    sibling_reached: tuple[float, ...] = ()
    sibling_accepted: tuple[float, ...] = ()
    probe_seconds: float = 0.0


@dataclass(frozen=True)
class GenerationStats:
    """Counters that add up, rates derived from them (see the module docstring)."""

    steps: int
    drafted: int
    accepted: int
    new_tokens: int
    seconds: float
    forward_seconds: float  # inside target model forwards only

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def tokens_per_step(self) -> float:
        return self.new_tokens / self.steps if self.steps else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "tokens_per_second": self.tokens_per_second,
                "tokens_per_step": self.tokens_per_step}


@dataclass(frozen=True)
class Generation:
    """The new tokens (prompt excluded), their text when a tokenizer was given, stats, records."""

    tokens: list[int]
    text: str | None
    stats: GenerationStats
    stop_reason: StopReason
    records: list[StepRecord] = field(repr=False, default_factory=list)


@torch.inference_mode()  # entered once per generation, not once per forward
def generate(
    target: TorchBackend,
    prompt: Sequence[int],
    drafter: Drafter | None = None,
    capabilities: Capabilities | None = None,
    *,
    sampling: SamplingParams = SamplingParams(),
    max_new_tokens: int = 64,
    max_draft: int = 64,
    rng: np.random.Generator | None = None,
    eos_token_id: int | Sequence[int] | None = None,
    stop: Sequence[str] = (),
    tokenizer: Decoder | None = None,
    probe_siblings: int = 0,
) -> Generation:
    """Decode up to ``max_new_tokens`` after ``prompt``; exact for any drafter (see picker.engine.verify).

    ``probe_siblings`` (profiling): at each rejection of a chain, also record what ranks 2..k of a
    tree would have accepted there (``picker.engine.siblings``): a sampled tree's when sampling (the draft
    sent ``p``), a greedy top-k tree's at T = 0 (the draft sent ``scores``). It reads the step's
    distributions after the step is timed, draws from its own generator, and changes no output.
    """
    caps = capabilities or Capabilities()
    rng = np.random.default_rng(0) if rng is None else rng
    want_hidden = drafter is not None and caps.needs_hidden_states
    layers = hidden_layers_of(drafter) if want_hidden else ()
    stopper = _Stopper(max_new_tokens, eos_token_id, stop, tokenizer)
    target.reset()
    ledger, seq, out = KVLedger(prompt), list(prompt), []
    records: list[StepRecord] = []
    hidden: dict[Any, Any] | None = None
    if drafter is not None:
        call_reset(drafter, seq)
    start, forward_s0 = time.perf_counter(), target.forward_seconds
    probe_rng, probe_s = np.random.default_rng(0), 0.0
    reason: StopReason | None = None
    while reason is None:
        # 1. Propose a chain or tree (nothing at prefill, when the prompt is still pending).
        t0 = time.perf_counter()
        draft = EMPTY_DRAFT
        if drafter is not None and ledger.cache_len > 0:
            draft = drafter.propose(DraftContext(seq, len(prompt), sampling, rng, max_draft, hidden,
                                                 want_scores=probe_siblings > 1 and sampling.greedy))
        t1 = time.perf_counter()
        # 2. One target forward: the pending token(s), then the draft with tree attention.
        plan = ledger.forward(draft.tree)
        n_pending = len(plan.tokens) - len(draft)
        fwd = target.forward(plan.tokens[:n_pending], draft.tree, logits_from=plan.q_rows.start,
                             hidden=want_hidden, layers=layers)
        q_logits = fwd.logits[0].float().numpy()  # rows: q at the root, then after each node
        # 3. Verify: accept a prefix (chain) or a path (tree), plus one correction/bonus token.
        p = None if caps.deterministic_draft else draft.p
        result = _verify(draft, q_logits, p, sampling, rng)
        # 4. Roll the target cache back to the pending tokens + the accepted path.
        target.rollback(ledger.commit(result))
        t2 = time.perf_counter()
        # 5. Emit; stop at max tokens, EOS or a stop string.
        emitted, reason = stopper.emit(out, result.tokens)
        seq.extend(emitted)
        # 6. Tell the drafter what was accepted (hidden states of the kept positions).
        if want_hidden and fwd.hidden is not None:
            rows = [*range(n_pending), *(n_pending + i for i in result.accepted_nodes)]
            hidden = {k: h[0, rows] for k, h in fwd.hidden.items()}
        t3 = time.perf_counter()
        if drafter is not None and reason is None:
            call_observe(drafter, StepOutcome(draft, result.accepted_nodes, result.tokens, seq,
                                              hidden, q_logits=q_logits))
        t4 = time.perf_counter()
        draft_s = t1 - t0 + t4 - t3  # drafting = propose + observe
        # 7. Profiling only: what a tree's later siblings would have accepted here (not decode time).
        sib = _probe_siblings(draft, result, q_logits, p, sampling, probe_siblings, probe_rng)
        probe = time.perf_counter() - t4
        probe_s += probe
        records.append(StepRecord(len(draft), result.num_accepted, _first_rejection(draft.tree, result),
                                  len(emitted), draft_s, t2 - t1, *sib, probe))
    seconds = time.perf_counter() - start - probe_s
    stats = GenerationStats(len(records), sum(r.drafted for r in records),
                            sum(r.accepted for r in records), len(out), seconds,
                            target.forward_seconds - forward_s0)
    text = tokenizer.decode(out) if tokenizer is not None else None
    return Generation(out, text, stats, reason, records)


def _verify(
    draft: Draft,
    q_logits: np.ndarray,
    p: np.ndarray | None,
    sampling: SamplingParams,
    rng: np.random.Generator,
) -> VerifyResult:
    """Greedy on raw logits; otherwise warp q exactly as the drafter warped p, then sample."""
    chain = draft.is_chain
    if sampling.greedy:
        if chain:
            return verify_greedy_chain(draft.tree.tokens, q_logits)
        return verify_greedy_tree(draft.tree, q_logits)
    q = warp(q_logits, sampling.temperature, sampling.top_k, sampling.top_p)
    if chain:
        return verify_sample_chain(draft.tree.tokens, p, q, rng)
    return verify_sample_tree(draft.tree, p, q, rng, draft.siblings)


def _probe_siblings(
    draft: Draft,
    result: VerifyResult,
    q_logits: np.ndarray,
    p: np.ndarray | None,
    sampling: SamplingParams,
    topk: int,
    rng: np.random.Generator,
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(reached, accepted) of sibling ranks 2..``topk`` at a chain's rejection (picker.engine.siblings), or
    empty: nothing rejected, a tree, no probe asked, or the draft sent no distribution to read."""
    k = result.num_accepted  # the rejected position: q_k and the draft's ranking are known
    counts = None
    if topk >= 2 and draft.is_chain and k < len(draft):
        if sampling.greedy and draft.scores is not None:
            counts = greedy_sibling_counts(draft.scores[k], int(np.argmax(q_logits[k])), draft.tree.tokens[k],
                                           topk=topk)
        elif not sampling.greedy and p is not None:
            q_k = warp(q_logits[k], sampling.temperature, sampling.top_k, sampling.top_p)
            counts = sibling_counts(q_k, p[k], draft.tree.tokens[k], topk=topk, rng=rng)
    if counts is None:
        return (), ()
    return tuple(map(float, counts[0])), tuple(map(float, counts[1]))


def _first_rejection(tree: TokenTree, result: VerifyResult) -> int | None:
    """Depth at which verification stopped while children remained untried-or-rejected."""
    last = result.accepted_nodes[-1] if result.accepted_nodes else -1
    return result.num_accepted if tree.children(last) else None


class _Stopper:
    """Appends emitted tokens to the output and says when and why to stop."""

    def __init__(
        self,
        max_new_tokens: int,
        eos_token_id: int | Sequence[int] | None,
        stop: Sequence[str],
        tokenizer: Decoder | None,
    ) -> None:
        if max_new_tokens < 1:
            raise ValueError("max_new_tokens must be >= 1")
        if stop and tokenizer is None:
            raise ValueError("stop strings need a tokenizer")
        self.max_new = max_new_tokens
        eos = () if eos_token_id is None else eos_token_id
        self.eos = frozenset([eos] if isinstance(eos, int) else eos)
        self.stop = tuple(s for s in stop if s)
        self.tokenizer = tokenizer
        # A stop string of s characters spans at most 4*s byte-level tokens (UTF-8), +1 for a
        # token that straddles its start: decoding that tail suffices, not the whole output.
        self.tail = 4 * max((len(s) for s in self.stop), default=0) + 1

    def emit(self, out: list[int], new: Sequence[int]) -> tuple[list[int], StopReason | None]:
        """Append what fits; return the appended tokens and the stop reason, if any."""
        room = self.max_new - len(out)
        take = list(new[:room])
        reason: StopReason | None = "max_tokens" if len(new) >= room else None
        for i, tok in enumerate(take):
            if tok in self.eos:
                take, reason = take[: i + 1], "eos"
                break
        start = len(out)
        out.extend(take)
        if self.stop:
            cut = self._stop_cut(out, start)
            if cut is not None:
                del out[cut:]
                take, reason = out[start:], "stop"
        return take, reason

    def _stop_cut(self, out: list[int], start: int) -> int | None:
        """Length of the shortest output that ends a stop string begun after ``start - tail``."""
        assert self.tokenizer is not None
        lo = max(0, start - self.tail)
        if not any(s in self.tokenizer.decode(out[lo:]) for s in self.stop):
            return None
        for end in range(max(start, lo + 1), len(out) + 1):
            if any(s in self.tokenizer.decode(out[lo:end]) for s in self.stop):
                return end
        return None  # pragma: no cover - the full tail matched above

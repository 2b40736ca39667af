"""THE decode loop: propose -> verify in one target forward -> accept -> roll back -> emit.

Every strategy runs through :func:`serve`; a strategy only proposes (``picker.engine.drafting``).
It serves B sequences at once: every step one draft phase for all live sequences, ONE target
forward over all their pending tokens and drafts (each at its own cache length, positions and
tree mask), per-sequence acceptance, rollback and stopping; a request queue keeps
``concurrency`` requests in flight (a finished one is replaced by the next prompt: continuous
batching, closed loop; a prompt that joins running rows is prefilled in a forward of its own).
:func:`generate` is one prompt at concurrency 1 -- the same path. With ``speculator=None`` the same
loop is plain autoregressive decoding (the baseline at every concurrency): an empty draft every
step, one target forward per token.

    >>> import numpy as np, torch
    >>> from transformers import LlamaConfig, LlamaForCausalLM
    >>> from picker.engine.backend import TorchBackend
    >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
    <...>
    >>> cfg = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
    ...                   num_attention_heads=2, num_key_value_heads=1)
    >>> target = TorchBackend(LlamaForCausalLM(cfg), rows=2)
    >>> out = generate(target, [1, 2, 3], max_new_tokens=5)
    >>> len(out.tokens), out.stats.steps, out.stop_reason
    (5, 5, 'max_tokens')
    >>> run = serve(target, [[1, 2, 3], [4, 5], [6]], concurrency=2, max_new_tokens=5)
    >>> [g.tokens for g in run.generations][0] == out.tokens, run.steps
    (True, 10)

Conventions (stated once, used by every number): a *step* is one target forward, the prefill
included; ``drafted`` counts draft nodes sent to verification, ``accepted`` the draft nodes
accepted; tokens per step (tau) = new tokens / steps, the bonus/correction token included
(SGLang's ``spec_accept_length`` convention); ``tokens_per_second`` = new tokens / wall seconds
(a generation's from its admission to its end, prefill included; a run's over all sequences).
A sequence's ``draft_seconds`` is the step's whole draft phase (every sequence's proposals: a
drafter with ``propose_batch`` drafts for all of them at once) plus its drafter's ``observe``, its
``verify_seconds`` the shared batched forward, verification and rollback of that step: both are
per-step times, equal at concurrency 1 to that sequence's own. Stop rules: ``picker.engine.stopping``.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import numpy as np
import torch

from picker.engine.backend import TorchBackend
from picker.engine.drafting import EMPTY_DRAFT, Draft, DraftContext, Drafter, SamplingParams, Speculator, StepOutcome
from picker.engine.rollback import BatchLedger
from picker.engine.sampling import warp
from picker.engine.stopping import Decoder, Stopper, StopReason
from picker.engine.tree import TokenTree
from picker.engine.verify import (
    VerifyResult,
    verify_greedy_chain,
    verify_greedy_tree,
    verify_sample_chain,
    verify_sample_tree,
)

__all__ = ["Generation", "GenerationStats", "Served", "StepObserver", "StepRecord", "generate", "serve"]


class StepObserver(Protocol):
    """A profiling hook (e.g. ``picker.engine.siblings.SiblingProbe``): sees every verified step
    of request ``request`` after it is timed; the time it takes is not decoding time."""

    def on_step(self, request: int, drafter: Drafter | None, draft: Draft, result: VerifyResult,
                q_logits: np.ndarray, sampling: SamplingParams) -> None: ...


@dataclass(frozen=True)
class StepRecord:
    """One target forward of one sequence. ``first_rejection``: depth (0-based) of the first
    rejected draft level, None when nothing was rejected (all accepted, or nothing drafted)."""

    drafted: int
    accepted: int
    first_rejection: int | None
    emitted: int
    draft_seconds: float
    verify_seconds: float
    # Run-clock seconds (since serve() began, observers excluded) at the end of this step, when its
    # ``emitted`` tokens left the loop together: per-token timing (TTFT, inter-token gaps) reads these.
    emitted_at: float = 0.0


@dataclass(frozen=True)
class GenerationStats:
    """Counters that add up, rates derived from them (see the module docstring)."""

    steps: int
    drafted: int
    accepted: int
    new_tokens: int
    seconds: float
    forward_seconds: float  # inside target model forwards only (shared ones included)

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
    joined: int = 0  # the run's step (batched forward) at which it was admitted
    left: int = 0  # the run's step after which it finished
    admitted_at: float = 0.0  # run-clock seconds at admission (StepRecord.emitted_at's clock)


@dataclass(frozen=True)
class Served:
    """A whole run: every prompt's generation (in prompt order) and the run's totals."""

    generations: list[Generation]
    steps: int  # batched target forwards
    seconds: float  # wall time of the run (observers excluded)
    forward_seconds: float
    concurrency: int
    draft_seconds: float = 0.0  # the run's draft phases (each step's once) and drafters' observe calls

    @property
    def new_tokens(self) -> int:
        return sum(len(g.tokens) for g in self.generations)

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.seconds if self.seconds > 0 else 0.0

    def totals(self) -> dict[str, Any]:
        return {"requests": len(self.generations), "concurrency": self.concurrency, "steps": self.steps,
                "new_tokens": self.new_tokens, "seconds": self.seconds, "forward_seconds": self.forward_seconds,
                "draft_seconds": self.draft_seconds,
                "tokens_per_second": self.tokens_per_second,
                "drafted": sum(g.stats.drafted for g in self.generations),
                "accepted": sum(g.stats.accepted for g in self.generations)}


def generate(target: TorchBackend, prompt: Sequence[int], speculator: Speculator | None = None,
             **options: Any) -> Generation:
    """One prompt at concurrency 1 through :func:`serve` (its options: sampling, max_new_tokens, ...)."""
    return serve(target, [prompt], speculator, **options).generations[0]


@torch.inference_mode()  # entered once per run, not once per forward
def serve(
    target: TorchBackend,
    prompts: Sequence[Sequence[int]],
    speculator: Speculator | None = None,
    *,
    concurrency: int = 1,
    sampling: SamplingParams = SamplingParams(),
    max_new_tokens: int | Sequence[int] = 64,
    max_draft: int = 64,
    rng: np.random.Generator | None = None,
    eos_token_id: int | Sequence[int] | None = None,
    stop: Sequence[str] = (),
    tokenizer: Decoder | None = None,
    observer: StepObserver | None = None,
    arrivals: Sequence[float] | None = None,
) -> Served:
    """Decode every prompt (up to ``max_new_tokens`` each), ``concurrency`` at a time; exact for any
    drafter (``picker.engine.verify``). Sequences share ``rng``, drawn in row order each step;
    ``max_new_tokens`` is one limit for all or one per prompt. ``arrivals`` (open loop): prompt i
    joins no earlier than ``arrivals[i]`` run-clock seconds; with nothing in flight the loop idles."""
    if target.rows < concurrency:
        raise ValueError(f"serve: the backend holds {target.rows} rows; use target.with_rows({concurrency})")
    rng = np.random.default_rng(0) if rng is None else rng
    clock = _Clock(target)
    queue, done = deque(enumerate(prompts)), {}
    ledger, live = BatchLedger(concurrency), {}
    want_hidden = speculator is not None and speculator.wants_hidden
    while queue or live:
        # 0. Admit: a freed row takes the next prompt (continuous batching).
        joined = []
        while queue and ledger.free and (arrivals is None or arrivals[queue[0][0]] <= clock.elapsed()):
            i, prompt = queue.popleft()
            row = ledger.admit(prompt)
            limit = max_new_tokens if isinstance(max_new_tokens, int) else max_new_tokens[i]
            live[row] = _Sequence(i, row, prompt, Stopper(limit, eos_token_id, stop, tokenizer), clock)
            joined.append(row)
            if speculator is not None:
                speculator.reset(row, prompt)
        # A prompt that joins running rows is prefilled in a step of its own, the others waiting, as
        # an engine without mixed prefill-decode batches schedules it (SGLang's enable_mixed_chunk is
        # off by default). In their step its whole prompt would pad every running row to its length.
        stepping = joined or list(live)
        if not stepping:  # open loop, nothing in flight: idle until the next prompt arrives
            time.sleep(max(0.0, arrivals[queue[0][0]] - clock.elapsed()) if arrivals else 0.0)
            continue
        # 1. Propose a chain or tree per sequence, all in one draft phase (none at a prefill: the prompt is pending).
        t0 = time.perf_counter()
        drafts = dict.fromkeys(stepping, EMPTY_DRAFT)
        if speculator is not None:
            drafts.update(speculator.propose_all({row: live[row].context(sampling, rng, max_draft)
                                                  for row in stepping if ledger[row].cache_len > 0}))
        t1 = time.perf_counter()
        clock.drafting += t1 - t0
        # 2. ONE target forward: every row's pending token(s), then its draft with tree attention.
        plan = ledger.forward({row: d.tree for row, d in drafts.items()})
        fwd = target.run(plan, hidden=want_hidden, layers=speculator.hidden_layers if want_hidden else None)
        logits = fwd.logits.float().cpu().numpy()  # to the host: per row, q at the root then after each node
        q = {row: logits[i, f.q_rows.start - fwd.first: f.q_rows.stop - fwd.first]
             for i, (row, f) in enumerate(zip(plan.rows, plan.plans))}
        # 3. Verify each: accept a prefix (chain) or a path (tree), plus one correction/bonus token.
        results = {row: _verify(drafts[row], q[row], sampling, rng) for row in plan.rows}
        # 4. Roll every row's cache back to its pending tokens + accepted path.
        target.apply(ledger.commit(results))
        verify_s = time.perf_counter() - t1
        # 5. Emit, stop, tell the drafter and the observer, per sequence; finished ones leave.
        for i, (row, f) in enumerate(zip(plan.rows, plan.plans)):
            hidden = _kept_hidden(fwd.hidden, i, f.n_pending, results[row]) if want_hidden else None
            s = live[row]
            if s.finish_step(drafts[row], results[row], q[row], hidden, t1 - t0, verify_s, speculator, sampling,
                             observer):
                done[s.index] = s.generation(tokenizer)
                ledger.release(row)
                del live[row]
        clock.steps += 1
    return Served([done[i] for i in range(len(prompts))], clock.steps, clock.elapsed(),
                  target.forward_seconds - clock.forward0, concurrency, clock.drafting)


class _Clock:
    """Run-wide time: wall since start minus what observers took (profiling is not decoding)."""

    def __init__(self, target: TorchBackend) -> None:
        self.target, self.start, self.forward0 = target, time.perf_counter(), target.forward_seconds
        self.observed, self.steps, self.drafting = 0.0, 0, 0.0

    def elapsed(self) -> float:
        return time.perf_counter() - self.start - self.observed


class _Sequence:
    """One request in flight: its tokens, output, stopper, hidden states and step records."""

    def __init__(self, index: int, row: int, prompt: Sequence[int], stopper: Stopper, clock: _Clock) -> None:
        self.index, self.row, self.prompt_len = index, row, len(prompt)
        self.seq, self.out = [int(t) for t in prompt], []
        self.stopper, self.clock = stopper, clock
        self.records: list[StepRecord] = []
        self.hidden: dict[Any, Any] | None = None
        self.reason: StopReason | None = None
        self.start, self.forward0, self.joined = clock.elapsed(), clock.target.forward_seconds, clock.steps

    def context(self, sampling: SamplingParams, rng: np.random.Generator, max_draft: int) -> DraftContext:
        return DraftContext(self.seq, self.prompt_len, sampling, rng, max_draft, self.hidden)

    def finish_step(self, draft: Draft, result: VerifyResult, q_logits: np.ndarray, hidden: dict[Any, Any] | None,
                    draft_s: float, verify_s: float, speculator: Speculator | None, sampling: SamplingParams,
                    observer: StepObserver | None) -> bool:
        """Emit, observe and record this step; True when the sequence is done."""
        emitted, self.reason = self.stopper.emit(self.out, result.tokens)
        self.seq.extend(emitted)
        self.hidden = hidden
        t0 = time.perf_counter()
        if speculator is not None and self.reason is None:
            speculator.observe(self.row, StepOutcome(draft, result.accepted_nodes, result.tokens, self.seq,
                                                     hidden, q_logits=q_logits))
        t1 = time.perf_counter()
        self.clock.drafting += t1 - t0  # a drafter's observe is drafting work (lookahead's window)
        if observer is not None:
            observer.on_step(self.index, None if speculator is None else speculator.drafter(self.row), draft,
                             result, q_logits, sampling)
            self.clock.observed += time.perf_counter() - t1
        self.records.append(StepRecord(len(draft), result.num_accepted, _first_rejection(draft.tree, result),
                                       len(emitted), draft_s + t1 - t0, verify_s, self.clock.elapsed()))
        return self.reason is not None

    def generation(self, tokenizer: Decoder | None) -> Generation:
        rec = self.records
        seconds = self.clock.elapsed() - self.start
        stats = GenerationStats(len(rec), sum(r.drafted for r in rec), sum(r.accepted for r in rec), len(self.out),
                                seconds, self.clock.target.forward_seconds - self.forward0)
        text = tokenizer.decode(self.out) if tokenizer is not None else None
        assert self.reason is not None
        return Generation(self.out, text, stats, self.reason, rec, self.joined, self.clock.steps, self.start)


def _kept_hidden(states: dict[Any, torch.Tensor] | None, i: int, n_pending: int,
                 result: VerifyResult) -> dict[Any, torch.Tensor] | None:
    """Row i's hidden states at the positions kept in the cache: its pending tokens + accepted path."""
    if states is None:
        return None
    rows = [*range(n_pending), *(n_pending + k for k in result.accepted_nodes)]
    return {k: h[i, rows] for k, h in states.items()}


def _verify(draft: Draft, q_logits: np.ndarray, sampling: SamplingParams, rng: np.random.Generator) -> VerifyResult:
    """Greedy on raw logits; otherwise warp q exactly as the drafter warped p, then sample."""
    if sampling.greedy:
        if not draft.tree.tokens:  # plain decoding: the argmax at the root (verify_greedy_chain's answer)
            return VerifyResult(0, (int(q_logits[0].argmax()),), ())
        if draft.is_chain:
            return verify_greedy_chain(draft.tree.tokens, q_logits)
        return verify_greedy_tree(draft.tree, q_logits)
    q = warp(q_logits, sampling.temperature, sampling.top_k, sampling.top_p)
    if draft.is_chain:
        return verify_sample_chain(draft.tree.tokens, draft.p, q, rng)
    return verify_sample_tree(draft.tree, draft.p, q, rng, draft.siblings)


def _first_rejection(tree: TokenTree, result: VerifyResult) -> int | None:
    """Depth at which verification stopped while children remained untried-or-rejected."""
    last = result.accepted_nodes[-1] if result.accepted_nodes else -1
    return result.num_accepted if tree.children(last) else None

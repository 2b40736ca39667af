"""A small serving loop over the reference engine, driven by the SDK Controller.

Requests arrive with a task type and a temperature; one worker decodes them one at a time with
``picker.engine.loop.generate`` (the reference engine runs batch 1) and the vanilla draft-model strategy.
Before every step the :class:`picker.sdk.drafter.ControlledDrafter` asks
``Controller.choose`` for the draft length, and after it reports drafted / accepted / step time to
``Controller.observe``. Halfway through, the drafter breaks (``--drop A:B``: requests A..B-1 get a
random draft, as after a bad deploy or a traffic shift) and the Controller switches speculation off
for that traffic, probes, and switches it back on once the drafter is healthy again. Outputs stay
exactly the target's: verification is exact whatever the draft.

    python examples/serving_loop.py                                   # tiny models, made here
    python examples/serving_loop.py --model zoo                       # the project's CI zoo
    python examples/serving_loop.py --profile profiles/code-assistant-8b-a100.yaml --requests 24

In your own server the integration is the same three lines as in :func:`serve`: build the
Controller once (``Controller.from_profile`` or ``from_recommendation``), wrap each request's
drafter in ``ControlledDrafter(inner, controller, task=..., batch_size=...)``, and call
``generate``; persist ``controller.state()`` across restarts with ``Controller.from_state``.
"""

from __future__ import annotations

import argparse
import copy
import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from picker.engine.backend import TorchBackend
from picker.engine.drafting import (
    Draft,
    DraftContext,
    Drafter,
    SamplingParams,
    StepOutcome,
    bind,
    call_observe,
    call_reset,
)
from picker.engine.loop import Generation, generate
from picker.engine.plugins import Capabilities
from picker.engine.tree import TokenTree
from picker.sdk.controller import Controller
from picker.sdk.drafter import ControlledDrafter
from picker.sdk.plan import ControllerPlan, flat_step_ratio
from policies.online import OnlineParams


@dataclass(frozen=True)
class Request:
    """One request: prompt token ids, its task type (the Controller's statistics key) and sampling."""

    prompt: tuple[int, ...]
    task: str
    temperature: float = 0.0
    max_new_tokens: int = 48


@dataclass
class Served:
    """What one request produced, and the Controller's decisions while it ran."""

    request: Request
    generation: Generation
    decisions: Counter[str] = field(default_factory=Counter)


class DriftingDrafter:
    """Wraps a drafter; while ``broken`` it proposes uniform-random tokens instead (a dead drafter).

    The random draft is still a valid proposal (``p`` uniform, the tokens drawn from it), so
    verification stays exact and acceptance drops to about 1/V — the drop the Controller must catch.
    """

    def __init__(self, inner: Drafter, vocab_size: int, seed: int = 0) -> None:
        self.inner = inner
        self.vocab_size = vocab_size
        self.broken = False
        self._rng = np.random.default_rng(seed)

    def reset(self, prompt_ids: Sequence[int]) -> None:
        call_reset(self.inner, prompt_ids)

    def propose(self, ctx: DraftContext) -> Draft:
        if not self.broken:
            return self.inner.propose(ctx)
        n = max(min(ctx.max_draft, 8), 0)
        tokens = self._rng.integers(0, self.vocab_size, size=n).tolist()
        p = None if ctx.sampling.greedy else np.full((n, self.vocab_size), 1.0 / self.vocab_size)
        return Draft(TokenTree.from_chain(tokens), p)

    def observe(self, outcome: StepOutcome) -> None:
        call_observe(self.inner, outcome)


def serve(requests: Sequence[Request], target: TorchBackend, drafter: Drafter, controller: Controller,
          capabilities: Capabilities | None = None, *, batch_size: int | Callable[[], int] = 1,
          report_step_time: bool = True, before: Callable[[int], None] | None = None) -> list[Served]:
    """Decode ``requests`` in order with the Controller deciding every step; ``before(i)`` runs
    before request i (the demo breaks and mends the drafter there). ``report_step_time``: see
    :class:`~picker.sdk.drafter.ControlledDrafter`."""
    out = []
    for i, req in enumerate(requests):
        if before is not None:
            before(i)
        controlled = ControlledDrafter(drafter, controller, task=req.task, batch_size=batch_size,
                                       report_step_time=report_step_time)
        gen = generate(target, req.prompt, bind(controlled, capabilities),
                       sampling=SamplingParams(temperature=req.temperature), max_new_tokens=req.max_new_tokens,
                       max_draft=controller.plan.num_speculative_tokens or 1,
                       rng=np.random.default_rng(i))
        out.append(Served(req, gen, controlled.decisions))
    return out


def noisy_copy(model: torch.nn.Module, eps: float, seed: int = 1) -> torch.nn.Module:
    """A draft with a chosen acceptance: the target's weights plus noise of ``eps`` standard deviations.

    ``eps`` = 0 accepts everything at T = 0; 0.02 about 90%, 0.1 about 50% on the tiny target.
    """
    draft = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(eps * p.std() * torch.randn(p.shape, generator=gen))
    return draft


def tiny_engine(seed: int = 0, vocab_size: int = 96, eps: float = 0.02) -> tuple[TorchBackend, TorchBackend]:
    """A randomly initialised tiny Llama target and a noisy copy as its draft (no download, < 1 s)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=1024)
    model = LlamaForCausalLM(cfg).eval()
    return TorchBackend(model), TorchBackend(noisy_copy(model, eps).eval())


def zoo_engine() -> tuple[TorchBackend, TorchBackend]:
    """The project's CI zoo: its target and the small draft model that shares its tokenizer."""
    from picker.zoo import build_zoo  # type: ignore[attr-defined]

    paths = build_zoo("ci")
    return TorchBackend.from_pretrained(paths.target), TorchBackend.from_pretrained(paths.draft)


def demo_plan(n: int = 3, step_ratio: float = 1.45) -> ControllerPlan:
    """A plan for a CPU loop without a profile: vanilla, N everywhere, break-even α ≈ 0.33 at N = 3."""
    return ControllerPlan(strategy="vanilla", num_speculative_tokens=n, tree=None, schedule=((1, None, n),),
                          temperature_above=None, step_ratio=flat_step_ratio(step_ratio, n))


def make_requests(count: int, vocab_size: int, seed: int = 0, max_new_tokens: int = 48,
                  tasks: Sequence[str] = ("code", "chat")) -> list[Request]:
    """Random 8-token prompts (for the untrained tiny target), greedy, the tasks taking turns."""
    rng = np.random.default_rng(seed)
    return [Request(tuple(int(t) for t in rng.integers(3, vocab_size, size=8)), tasks[i % len(tasks)],
                    0.0, max_new_tokens) for i in range(count)]


def zoo_requests(count: int, max_new_tokens: int = 48, prompt_tokens: int = 24) -> list[Request]:
    """Prompts the zoo knows: standard-library code (its training domain) and pydoc prose, in turns."""
    import inspect
    import json as json_module

    from picker.zoo import build_zoo
    from picker.zoo.tokenizer import load_tokenizer

    tok = load_tokenizer(build_zoo("ci").tokenizer)
    code = tok.encode(inspect.getsource(json_module)).ids
    prose = tok.encode(" ".join((inspect.getdoc(f) or "") for f in (sorted, zip, map, open))).ids
    out = []
    for i in range(count):
        ids, task = (code, "code") if i % 2 == 0 else (prose, "chat")
        start = (i // 2) * 61 % max(len(ids) - prompt_tokens, 1)
        out.append(Request(tuple(ids[start: start + prompt_tokens]), task, 0.0, max_new_tokens))
    return out


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny", help="'tiny' (made here) or 'zoo' (picker.zoo's CI build)")
    ap.add_argument("--profile", default=None, help="a workload profile: the Controller starts from its recommendation")
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--drop", default="5:10", help="A:B: the drafter is broken for requests A..B-1")
    ap.add_argument("--state", default=None, help="write the Controller's final state() here (JSON)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)  # FACTS.md: one thread, or timings on a shared CPU swing 10-50x
    target, draft = zoo_engine() if args.model == "zoo" else tiny_engine()
    params = OnlineParams(half_life=8, min_off_decisions=16, probe_every=8)  # fast, for a short demo
    controller = (Controller.from_profile(args.profile, params=params) if args.profile
                  else Controller(demo_plan(), params))
    n_max = max(controller.plan.num_speculative_tokens, 1)
    from strategies.vanilla.drafter import DraftModelDrafter

    drafter = DriftingDrafter(DraftModelDrafter(draft, num_draft_tokens=n_max), target.vocab_size)
    lo, hi = (int(x) for x in args.drop.split(":"))
    reqs = zoo_requests(args.requests) if args.model == "zoo" else make_requests(args.requests, target.vocab_size)

    def before(i: int) -> None:
        drafter.broken = lo <= i < hi

    # The tiny draft is a noisy copy as large as its target, so measured step times would (rightly)
    # show speculation never pays here; the tiny demo lets the plan's cost model set break-even.
    served = serve(reqs, target, drafter, controller, report_step_time=args.model == "zoo", before=before)
    print(f"{'req':>3} {'task':<5} {'drafter':<7} {'steps':>5} {'tok/step':>8} {'spec':>5} {'probe':>5} {'off':>5}")
    for i, s in enumerate(served):
        d, st = s.decisions, s.generation.stats
        print(f"{i:>3} {s.request.task:<5} {'broken' if lo <= i < hi else 'ok':<7} {st.steps:>5} "
              f"{st.tokens_per_step:>8.2f} {d['speculate']:>5} {d['probe']:>5} {d['off_below_break_even']:>5}")
    print(json.dumps(controller.describe(), indent=1))
    if args.state:
        with open(args.state, "w") as f:
            json.dump(controller.state(), f)


if __name__ == "__main__":
    main()

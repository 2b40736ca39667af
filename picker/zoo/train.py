"""Training the zoo's Llama models on CPU: packing, a seeded AdamW loop, distillation, sampling.

Everything a build needs to reproduce bit for bit is an argument (seed, steps, thread count);
:func:`deterministic` pins torch's global switches for the duration of a build and puts them back.

    >>> import torch
    >>> spec = ModelSpec(hidden=32, layers=1, heads=2, kv_heads=1, intermediate=64)
    >>> model = new_model(spec, vocab_size=300, max_positions=64, seed=0)
    >>> rows = pack([[0, *range(3, 200), 1]] * 4, seq_len=16)
    >>> rows.shape[1]
    17
    >>> losses = train(model, rows, TrainSchedule(steps=2, batch=4, lr=1e-3), seed=0)
    >>> len(losses)
    2
"""

from __future__ import annotations

import contextlib
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedModel
from transformers.utils import logging as hf_logging

from picker.engine.training import optimizer_step
from picker.zoo.tokenizer import BOS_ID, EOS_ID, PAD_ID

# Called after every optimizer step with (step, loss): the build's progress bar hangs here.
StepCallback = Callable[[int, float], None]


@dataclass(frozen=True)
class ModelSpec:
    """The shape of one Llama; the vocabulary comes from the tokenizer."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int


@dataclass(frozen=True)
class TrainSchedule:
    """Optimizer steps and batch; LR warms up linearly, then decays on a cosine to ``lr * final``."""

    steps: int
    batch: int
    lr: float
    warmup: float = 0.05
    final: float = 0.1
    weight_decay: float = 0.1


@contextlib.contextmanager
def deterministic(threads: int) -> Iterator[None]:
    """Fix the thread count and demand deterministic kernels; restore both afterwards."""
    old_threads = torch.get_num_threads()
    old_det = torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(old_det)
        torch.set_num_threads(old_threads)


def new_model(spec: ModelSpec, vocab_size: int, max_positions: int, seed: int) -> LlamaForCausalLM:
    """A freshly initialised ``LlamaForCausalLM``, seeded, tied embeddings, fp32, eager attention."""
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=spec.hidden,
        intermediate_size=spec.intermediate,
        num_hidden_layers=spec.layers,
        num_attention_heads=spec.heads,
        num_key_value_heads=spec.kv_heads,
        max_position_embeddings=max_positions,
        rope_theta=10000.0,
        # Tied input/output embeddings: at these sizes the vocabulary is a big share of parameters.
        tie_word_embeddings=True,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=PAD_ID,
        torch_dtype="float32",
        attn_implementation="sdpa",
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    return model.float()


def save_quietly(model: PreTrainedModel, out: Path) -> None:
    """``save_pretrained`` without transformers' tqdm bar (the build draws its own rich bars)."""
    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model.save_pretrained(out)
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def param_count(model: torch.nn.Module) -> int:
    """Distinct parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def pack(docs: list[list[int]], seq_len: int) -> torch.Tensor:
    """Concatenate documents into one stream and cut rows of ``seq_len + 1`` (input plus shifted label).

    Packing wastes no compute on padding; a document that spans two rows loses nothing but the
    attention to its earlier half, which is what a model sees at inference on long inputs anyway.
    """
    stream = [t for doc in docs for t in doc]
    n = (len(stream) - 1) // seq_len
    rows = [stream[i * seq_len: i * seq_len + seq_len + 1] for i in range(n)]
    return torch.tensor(rows, dtype=torch.long)


def lr_at(step: int, sched: TrainSchedule) -> float:
    """Linear warm-up, then cosine decay to ``lr * final`` at the last step."""
    warm = max(1, int(sched.steps * sched.warmup))
    if step < warm:
        return sched.lr * (step + 1) / warm
    progress = (step - warm) / max(1, sched.steps - warm)
    return sched.lr * (sched.final + (1 - sched.final) * 0.5 * (1 + math.cos(math.pi * progress)))


def _batches(rows: torch.Tensor, sched: TrainSchedule, seed: int) -> Iterator[torch.Tensor]:
    """Seeded epochs over the rows: each epoch a fresh permutation, cut into batches."""
    rng = random.Random(seed)
    order: list[int] = []
    for _ in range(sched.steps):
        if len(order) < sched.batch:
            perm = list(range(rows.shape[0]))
            rng.shuffle(perm)
            order.extend(perm)
        idx, order = order[: sched.batch], order[sched.batch:]
        yield rows[idx]


def train(
    model: LlamaForCausalLM,
    rows: torch.Tensor,
    sched: TrainSchedule,
    seed: int,
    teacher: LlamaForCausalLM | None = None,
    kd_weight: float = 0.0,
    on_step: StepCallback | None = None,
) -> list[float]:
    """Train ``model`` on packed ``rows``; with a ``teacher``, mix in KL(teacher ‖ model).

    The KL term pulls the draft's whole next-token distribution ``p`` toward the target's ``q``,
    which is what acceptance ``Σ min(p, q)`` rewards; cross-entropy on the text keeps it grounded.
    Returns the training loss per step.
    """
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "embed" not in n]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2 or "embed" in n]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": sched.weight_decay},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=sched.lr, betas=(0.9, 0.95), eps=1e-8,
    )
    model.train()
    losses: list[float] = []
    for step, batch in enumerate(_batches(rows, sched, seed)):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, sched)
        inputs, labels = batch[:, :-1], batch[:, 1:]
        logits = model(input_ids=inputs).logits
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten())
        if teacher is not None and kd_weight > 0:
            with torch.no_grad():
                q_log = F.log_softmax(teacher(input_ids=inputs).logits, dim=-1)
            p_log = F.log_softmax(logits, dim=-1)
            kl = F.kl_div(p_log.flatten(0, 1), q_log.flatten(0, 1), log_target=True,
                          reduction="batchmean")
            loss = (1 - kd_weight) * loss + kd_weight * kl
        losses.append(optimizer_step(opt, loss, model.parameters()))
        if on_step is not None:
            on_step(step, losses[-1])
    model.eval()
    return losses


@torch.no_grad()
def sample_continuations(
    model: LlamaForCausalLM, prompts: torch.Tensor, new_tokens: int, seed: int, batch: int = 32
) -> list[list[int]]:
    """Sample (temperature 1, no truncation) ``new_tokens`` after each equal-length prompt row.

    The draft learns from these: text in the target's own distribution, including its mistakes,
    which is exactly what the draft must predict at inference.
    """
    model.eval()
    gen = torch.Generator().manual_seed(seed)
    out: list[list[int]] = []
    for i in range(0, prompts.shape[0], batch):
        ids = prompts[i: i + batch]
        result = model(input_ids=ids, use_cache=True)
        past, logits = result.cache, result.logits[:, -1]
        seqs = [ids]
        for _ in range(new_tokens):
            probs = torch.softmax(logits.float(), dim=-1)
            nxt = torch.multinomial(probs, 1, generator=gen)
            seqs.append(nxt)
            result = model(input_ids=nxt, cache=past, use_cache=True)
            past, logits = result.cache, result.logits[:, -1]
        out.extend(torch.cat(seqs, dim=1).tolist())
    return out

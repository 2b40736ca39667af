"""Tiny randomly initialised Llamas for fast, behaviour-level tests of the backend and the loop.

    >>> be = tiny_backend(seed=0)
    >>> be.vocab_size
    64
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from picker.engine.backend import TorchBackend


def tiny_llama(
    seed: int = 0, *, vocab: int = 64, hidden: int = 32, layers: int = 2, heads: int = 4,
    kv_heads: int = 2, attn: str = "sdpa", scale: float = 1.0,
) -> LlamaForCausalLM:
    """A seeded random Llama; ``scale`` sharpens its output distribution (bigger logits)."""
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=512,
        bos_token_id=0, eos_token_id=1, pad_token_id=2, tie_word_embeddings=False,
    )
    cfg._attn_implementation = attn
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(scale)
    return model


def tiny_backend(seed: int = 0, **kwargs: object) -> TorchBackend:
    hidden_layers = kwargs.pop("hidden_layers", ())
    return TorchBackend(tiny_llama(seed, **kwargs), hidden_layers=hidden_layers)  # type: ignore[arg-type]


def tiny_folder(out: Path, tasks: list[str], prompts: int) -> Path:
    """A random tiny Llama saved as a Hugging Face folder with a byte-level BPE tokenizer
    trained on built-in prompts of ``tasks`` (what the CLI loads as ``--model``)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from picker.tasks import builtin_prompts

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator([p.turns[0] for p in builtin_prompts(tasks, prompts)], trainer)
    tok.save(str(out / "tokenizer.json"))
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
                      bos_token_id=None, eos_token_id=None)
    LlamaForCausalLM(cfg).save_pretrained(out)
    return out

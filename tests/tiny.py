"""Tiny randomly initialised Llamas for fast, behaviour-level tests of the backend and the loop.

    >>> be = tiny_backend(seed=0)
    >>> be.vocab_size
    64
"""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from picker.backend import TorchBackend


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

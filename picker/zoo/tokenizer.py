"""A small byte-level BPE tokenizer trained locally, saved as a standard Hugging Face tokenizer.

Byte-level BPE in the GPT-2 style (the same pre-tokenizer regex and byte alphabet), so every
string round-trips exactly, ``AutoTokenizer.from_pretrained(dir)`` loads it, and llama.cpp's
converter accepts it once told the pre-tokenizer is ``gpt-2``. A few thousand merges give about
three characters per token on the zoo corpus, three times the context of a byte tokenizer for the
same model cost. Encoding prepends ``<s>`` (BOS); documents in training end with ``</s>`` (EOS).

    >>> from picker.zoo.corpus import build_corpus
    >>> tok = train_tokenizer(build_corpus(20_000, 2_000, seed=0), vocab_size=512)
    >>> ids = tok.encode("x = 1").ids
    >>> ids[0] == BOS_ID and tok.decode(ids) == "x = 1"
    True
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from picker.zoo.corpus import DOMAINS, Corpus

BOS, EOS, PAD = "<s>", "</s>", "<pad>"
# Special tokens take the first ids, as in Llama (BOS 1, EOS 2 there; we start at 0).
BOS_ID, EOS_ID, PAD_ID = 0, 1, 2
SPECIAL_TOKENS = (BOS, EOS, PAD)


def train_tokenizer(corpus: Corpus, vocab_size: int) -> Tokenizer:
    """Train byte-level BPE on the training split, every domain weighted by its text.

    The trainer counts words then merges the most frequent pair; ties are broken by the pair
    itself, so the result does not depend on hash order or thread count.
    """
    tok = Tokenizer(models.BPE())
    # use_regex=True is GPT-2's split; add_prefix_space=False keeps decode(encode(s)) == s.
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    texts = [doc for domain in DOMAINS for doc in corpus.train[domain]]
    tok.train_from_iterator(texts, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, BOS_ID)]
    )
    # Byte-level BPE never needs trimming offsets; the ByteLevel post-step is folded into the template.
    assert tok.token_to_id(BOS) == BOS_ID and tok.token_to_id(EOS) == EOS_ID
    return tok


def save_tokenizer(tok: Tokenizer, out: Path, model_max_length: int) -> None:
    """Write ``tokenizer.json``, ``tokenizer_config.json`` and ``special_tokens_map.json``."""
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    specials = {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD}
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **specials,
        "unk_token": None,
        "add_bos_token": True,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": model_max_length,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    (out / "special_tokens_map.json").write_text(json.dumps(specials, indent=2) + "\n")


def load_tokenizer(path: Path) -> Tokenizer:
    """Load the raw ``tokenizers`` object from a folder written by :func:`save_tokenizer`."""
    return Tokenizer.from_file(str(path / "tokenizer.json"))


def encode_documents(tok: Tokenizer, docs: list[str]) -> list[list[int]]:
    """Encode documents as ``<s> text </s>`` id lists (batch-encoded, in order)."""
    return [enc.ids + [EOS_ID] for enc in tok.encode_batch(docs)]

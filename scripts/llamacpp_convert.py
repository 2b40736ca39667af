"""Convert a Hugging Face Llama folder to GGUF with the converter vendored beside a llama.cpp source tree.

    python scripts/llamacpp_convert.py LLAMA_CPP_DIR MODEL_DIR OUT.gguf

Runs ``LLAMA_CPP_DIR/convert_hf_to_gguf.py`` with its own bundled ``gguf-py`` (the PyPI ``gguf``
is too old for it), in the project's Python (torch, transformers), with two overrides:

- the pre-tokenizer name is ``gpt-2``: the converter names a BPE pre-tokenizer by hashing the
  tokenizer's output on a fixed text and refuses hashes it has not seen, and the zoo's byte-level
  tokenizer is trained locally, so no hash list can know it. Its pre-tokenization is GPT-2's
  byte-level split, which is what ``gpt-2`` tells llama.cpp to use.
- a folder without ``tokenizer.model`` skips the SentencePiece attempt, as the converter does
  when ``sentencepiece`` is installed (it imports it before looking for the file), so the
  ``tokenizer.json`` path runs without that package.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path


def main(argv: list[str]) -> None:
    if len(argv) != 3:
        sys.exit(__doc__)
    source, model, out = (Path(a).resolve() for a in argv)
    sys.path[:0] = [str(source), str(source / "gguf-py")]
    from conversion.base import TextModel  # the vendored converter's base class

    TextModel.get_vocab_base_pre = lambda self, tokenizer: "gpt-2"  # type: ignore[method-assign]
    if not (model / "tokenizer.model").exists():
        def no_sentencepiece(self: TextModel) -> None:
            raise FileNotFoundError(model / "tokenizer.model")

        TextModel._set_vocab_sentencepiece = no_sentencepiece  # type: ignore[method-assign]
    sys.argv = ["convert_hf_to_gguf.py", str(model), "--outfile", str(out), "--outtype", "f32"]
    runpy.run_path(str(source / "convert_hf_to_gguf.py"), run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])

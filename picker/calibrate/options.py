"""What one calibration run measures: the model, the grid, the timing and the loop's drafters."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal


@dataclass(frozen=True)
class CalibrateOptions:
    """The grid is every (context, batch) pair, each timed at every count of new tokens per sequence."""

    model: Path | None = None  # a local Hugging Face folder; None: a random-weight Llama of ``shape``
    shape: str = "llama-3.2-1b"
    device: str = "cuda"
    dtype: str | None = None  # default: bfloat16 on CUDA, float32 on CPU
    hardware: str | None = None  # catalog name; guessed from the CUDA device's name when None
    batches: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128)
    tokens: tuple[int, ...] = (1, 2, 4, 8, 16)
    contexts: tuple[int, ...] = (512, 2048)
    repeats: int = 5
    warmup: int = 2
    seed: int = 0
    threads: int = 1
    forward: Literal["hf", "reference"] = "hf"
    draft: Path | None = None  # with forward="reference": a draft model (draft_fixed_s, draft_host_s_per_seq)
    eagle3: Path | None = None  # an EAGLE-3 head folder (layer_host_s_per_seq)
    medusa: Path | None = None  # a Medusa heads folder (heads_host_s_per_seq)
    loop_tokens: int = 16  # new tokens per sequence of the serve() runs that time the loop's host work

    @property
    def grid(self) -> list[tuple[int, int]]:
        """(batch, context) pairs in the order they are timed."""
        return [(b, c) for c in self.contexts for b in self.batches]

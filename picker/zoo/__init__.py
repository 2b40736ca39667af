"""The model zoo: a tiny target, a ten-times-smaller draft and their tokenizer, trained here.

No weights can be downloaded on the machines this project runs on, so it trains its own family on
text every Python install carries (see :mod:`picker.zoo.corpus`). Builds are seeded, cached by a
hash of the recipe, and saved as Hugging Face folders that ``AutoModelForCausalLM`` loads.

    >>> from picker.zoo import build_zoo
    >>> paths = build_zoo("ci")            # doctest: +SKIP
    >>> paths.target.name, paths.draft.name  # doctest: +SKIP
    ('target', 'draft')

The names below import torch only when first used, so ``specpick --help`` stays fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from picker.zoo.build import build_zoo, zoo_path
    from picker.zoo.eps import EpsPair, make_eps_draft
    from picker.zoo.paths import ZooPaths

__all__ = ["EpsPair", "ZooPaths", "build_zoo", "make_eps_draft", "zoo_path"]

_HOMES = {"ZooPaths": "paths", "build_zoo": "build", "zoo_path": "build",
          "EpsPair": "eps", "make_eps_draft": "eps"}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(f"picker.zoo.{_HOMES[name]}"), name)
    raise AttributeError(f"module 'picker.zoo' has no attribute {name!r}")

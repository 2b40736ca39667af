"""One resolver of ``--model zoo``: the zoo build's target, draft and heads, by artifact kind.

``zoo`` (or ``zoo:ci``) is the project's own ``ci`` build and ``zoo:small`` the larger one, built on
first use with progress on stderr; anything else is a local Hugging Face folder. Artifacts are
keyed by the kind a strategy declares (``Capabilities.artifact``), never by strategy name, so the
CLI's ``generate`` and the profiler resolve a model the same way.

    >>> zoo_size("zoo"), zoo_size("zoo:small"), zoo_size("/models/llama")
    ('ci', 'small', None)
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, get_args

from picker.engine.plugins import Artifact
from picker.engine.runtime import model_folder

if TYPE_CHECKING:
    from picker.zoo.paths import ZooPaths

ZOO = "zoo"
_SIZES = {"zoo": "ci", "zoo:ci": "ci", "zoo:small": "small"}


def zoo_size(spec: str | None) -> str | None:
    """The zoo size ``spec`` names (``zoo``, ``zoo:ci``, ``zoo:small``), or None for a folder."""
    return _SIZES.get(spec or "")


def zoo_paths(spec: str = ZOO, progress: bool = True) -> ZooPaths:
    """The zoo build ``spec`` names, built now if it is not cached yet."""
    from picker.zoo.build import build_zoo

    return build_zoo(zoo_size(spec) or "ci", progress=progress)  # type: ignore[arg-type]


def zoo_artifacts(paths: ZooPaths) -> dict[str, Path]:
    """Artifact kind -> folder in a zoo build: the draft model, and ``<root>/<kind>/`` for heads."""
    found = {kind: paths.root / kind for kind in get_args(Artifact)}
    found["draft_model"] = paths.draft
    return found


def resolve_target(spec: str, field: str = "--model") -> tuple[Path, dict[str, Path], ZooPaths | None]:
    """(target folder, artifacts by kind, the zoo build or None) for a ``--model`` value.

    A zoo target comes with every artifact its build holds (heads trained on that very target);
    a local folder comes with none (the user names its draft and heads).
    """
    if zoo_size(spec) is None:
        return model_folder(spec, field), {}, None
    paths = zoo_paths(spec)
    return paths.target, zoo_artifacts(paths), paths

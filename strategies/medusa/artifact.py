"""What a Medusa heads folder allows, read from its ``config.json`` alone (no torch).

The plugin's ``artifact_depth`` hook: Medusa has one head per tree depth, so a folder with K heads
drafts at most K deep. Our own folders write ``num_heads``; Medusa's reference checkpoints write
``medusa_num_heads``.

    >>> import json, tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "config.json").write_text(json.dumps({"medusa_num_heads": 5}))
    >>> max_depth(folder), max_depth(folder / "missing")
    (5, None)
"""

from __future__ import annotations

import json
from pathlib import Path


def max_depth(folder: str | Path) -> int | None:
    """The number of heads in ``folder``'s ``config.json``, or None where it is missing or says none."""
    try:
        cfg = json.loads(Path(folder, "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    heads = cfg.get("num_heads") or cfg.get("medusa_num_heads")
    return int(heads) if heads else None

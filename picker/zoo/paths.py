"""Where a zoo build lives on disk: one folder per model, a tokenizer and the build report.

    >>> from pathlib import Path
    >>> ZooPaths.at(Path("/cache/ci-abc")).draft.as_posix()
    '/cache/ci-abc/draft'
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ZooPaths:
    """Where one zoo build lives; each model folder loads with ``from_pretrained``."""

    root: Path
    target: Path
    draft: Path
    tokenizer: Path
    report: Path

    @classmethod
    def at(cls, root: Path) -> ZooPaths:
        return cls(root=root, target=root / "target", draft=root / "draft",
                   tokenizer=root / "tokenizer", report=root / "report.json")

    def exists(self) -> bool:
        """True when a finished build is here (the report is written last)."""
        return self.report.is_file()

"""Install the test plugin package (``tests/plugin_pkg``) the way a user would, with pip.

It goes into a private ``--target`` folder keyed by a hash of its sources (built once per
machine, reused after), never into the venv: only code run inside :func:`discoverable` sees it, so
the rest of the test suite keeps a registry of built-ins only. Discovery is the real mechanism:
``importlib.metadata`` reads the ``entry_points.txt`` pip wrote into the folder's ``.dist-info``.

    >>> with discoverable():                                   # doctest: +SKIP
    ...     "repeat-last" in load_strategies()
    True
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "plugin_pkg"
PLUGIN_NAME = "repeat-last"


def _digest() -> str:
    h = hashlib.sha256()
    for path in sorted(PACKAGE.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and ".egg-info" not in str(path):
            h.update(path.relative_to(PACKAGE).as_posix().encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


def install() -> Path:
    """pip-install the package into a cached folder; return the folder (the sys.path entry)."""
    dest = Path(tempfile.gettempdir()) / f"specpicker-testplugin-{_digest()}"
    if (dest / "specpicker_testplugin").is_dir():
        return dest
    tmp = Path(tempfile.mkdtemp(prefix=dest.name + ".", dir=dest.parent))
    try:
        with tempfile.TemporaryDirectory() as src:
            # Build from a copy: setuptools leaves build/ and *.egg-info beside the sources it builds.
            shutil.copytree(PACKAGE, Path(src) / "pkg", ignore=shutil.ignore_patterns("__pycache__"))
            # Build isolation (pip's default) builds with a fresh setuptools, as for the project.
            subprocess.run(
                [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--disable-pip-version-check",
                 "--target", str(tmp), str(Path(src) / "pkg")],
                check=True, env={**os.environ, "PIP_NO_INPUT": "1"},
            )
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    try:
        tmp.rename(dest)
    except OSError:  # a concurrent session installed it first: theirs is identical
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


@contextlib.contextmanager
def discoverable() -> Iterator[None]:
    """Make the installed test plugin visible to ``load_strategies()`` inside the block."""
    path = str(install())
    sys.path.insert(0, path)
    importlib.invalidate_caches()
    try:
        yield
    finally:
        sys.path.remove(path)
        importlib.invalidate_caches()

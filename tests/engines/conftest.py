"""Fixtures for the engine-validated tier; the helpers are in ``support.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.engines.support import write_config_folder


@pytest.fixture(scope="session")
def config_folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Target and draft folders with a tiny Llama ``config.json`` each."""
    root = tmp_path_factory.mktemp("config-folders")
    return {"target": write_config_folder(root / "target"), "draft": write_config_folder(root / "draft")}

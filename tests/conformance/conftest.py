"""Fixtures for the conformance suite: the zoo ci build, and every registered strategy.

The strategy list is whatever ``load_strategies()`` discovers -- the built-ins plus the third-party
test plugin installed from ``tests/plugin_pkg`` (see ``third_party.py``) -- so a new plugin joins
the suite by being installed, never by being named here. A strategy whose declared artifact is
missing from the zoo (trained heads not built yet) is skipped with the reason; any other failure
to build its drafter fails.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from picker.engine.backend import TorchBackend
from picker.engine.drafting import Drafter, MissingArtifact, Speculator
from picker.engine.plugins import StrategyPlugin, load_strategies
from tests.conformance.third_party import discoverable

torch.set_num_threads(1)  # one thread: two on a busy 2-core machine are many times slower

try:
    with discoverable():
        STRATEGIES = sorted(load_strategies(only_builtin=False))
    INSTALL_ERROR = ""
except subprocess.CalledProcessError as exc:  # no index for pip's isolated build, say
    STRATEGIES = sorted(load_strategies(only_builtin=False))
    INSTALL_ERROR = f"pip could not install tests/plugin_pkg: {exc}"


@dataclass
class Strategy:
    """A registered plugin with its drafter built on the zoo target, bound to its capabilities
    (``spec``: one drafter per concurrent sequence, forked or built anew)."""

    name: str
    plugin: StrategyPlugin
    drafter: Drafter
    spec: Speculator
    spawn: Callable[[], Drafter]

    @property
    def caps(self) -> Any:
        return self.plugin.capabilities

    def fresh(self) -> Speculator:
        """Drafters built anew: for a run compared token for token with another, which must not see
        what earlier runs left in a drafter that keeps state across requests (a response cache)."""
        return Speculator(self.spawn(), self.caps, self.spawn)


@pytest.fixture(scope="session")
def zoo() -> Any:
    from picker.zoo.resolve import zoo_paths

    return zoo_paths(progress=False)


@pytest.fixture(scope="session")
def target(zoo: Any) -> TorchBackend:
    return TorchBackend.from_pretrained(zoo.target)


@pytest.fixture(scope="session")
def tokenizer(zoo: Any) -> Any:
    from picker.engine.runtime import load_tokenizer

    return load_tokenizer(Path(zoo.target))


@pytest.fixture(scope="session")
def artifacts(zoo: Any) -> dict[str, Path]:
    from picker.zoo.resolve import zoo_artifacts

    return zoo_artifacts(zoo)


@pytest.fixture(scope="session", params=STRATEGIES)
def strategy(request: pytest.FixtureRequest, target: TorchBackend, artifacts: dict[str, Path]) -> Iterator[Strategy]:
    """Each registered strategy once per session; drafters are reused (``reset`` per generation)."""
    from picker.engine.runtime import build_drafter

    name = request.param
    with discoverable():
        plugin = load_strategies()[name]
        try:
            drafter = build_drafter(plugin, target, artifacts)
        except MissingArtifact as exc:
            pytest.skip(f"{name}: {exc} -- not in the zoo build yet")
    def spawn() -> Drafter:
        with discoverable():
            return build_drafter(plugin, target, artifacts)

    yield Strategy(name, plugin, drafter, Speculator(drafter, plugin.capabilities, spawn), spawn)

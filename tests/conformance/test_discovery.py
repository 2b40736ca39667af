"""The third-party test plugin is found through its installed entry point, like any outside plugin."""

from __future__ import annotations

import json
from importlib.metadata import distribution, entry_points

from typer.testing import CliRunner

from picker.cli.main import app
from picker.engine.plugins import ENTRY_POINT_GROUP, load_strategies
from tests.conformance.conftest import INSTALL_ERROR, STRATEGIES
from tests.conformance.third_party import PLUGIN_NAME, discoverable, install


def test_plugin_is_an_installed_distribution_with_an_entry_point() -> None:
    with discoverable():
        dist = distribution("specpicker-testplugin")
        names = {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)}
        plugin = load_strategies()[PLUGIN_NAME]
        module_file = __import__(plugin.drafter_factory().__module__).__file__
    assert PLUGIN_NAME in names and dist.version == "0.1.0"
    assert str(install()) in str(module_file)  # imported from the pip install, not the test tree
    assert plugin.capabilities.deterministic_draft


def test_suite_runs_every_registered_strategy() -> None:
    assert not INSTALL_ERROR, INSTALL_ERROR
    assert PLUGIN_NAME in STRATEGIES
    assert {"vanilla", "medusa", "eagle3", "lookahead", "ngram"} <= set(STRATEGIES)


def test_builtin_switch_and_the_listing_command() -> None:
    with discoverable():
        assert PLUGIN_NAME not in load_strategies(only_builtin=True)
        listed = json.loads(CliRunner().invoke(app, ["strategies", "--format", "json"]).stdout)
    assert PLUGIN_NAME in {p["name"] for p in listed}
    assert PLUGIN_NAME not in load_strategies()  # outside the block the rest of the suite is unaffected

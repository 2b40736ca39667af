"""Strategy plugins: declared capabilities and discovery through entry points.

A strategy registers a :class:`StrategyPlugin` under the entry-point group
``specpicker.strategies``; the built-ins register the same way (see ``pyproject.toml``)::

    [project.entry-points."specpicker.strategies"]
    ngram = "strategies.ngram:PLUGIN"

    >>> from picker.engine.plugins import load_strategies
    >>> sorted(load_strategies())[:2]        # doctest: +SKIP
    ['eagle3', 'lookahead']

Code elsewhere branches on :class:`Capabilities`, never on a strategy's name.
Set ``SPECPICKER_PLUGINS=builtin`` to load only the project's own strategies (tests do).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

ENTRY_POINT_GROUP = "specpicker.strategies"
BUILTIN_MODULE_PREFIX = "strategies."
RESERVED_NAMES = frozenset({"none", "plain", "auto"})

# draft_model: a small LM forward per draft token; target_layer: one target-sized decoder layer
# per draft step (EAGLE); heads: a few MLPs on the last hidden state (Medusa); cpu_lookup: a
# host-side table lookup (prompt lookup); in_forward: the guesses ride in the target forward (lookahead).
Artifact = Literal["draft_model", "eagle3_head", "medusa_heads"]
DraftCost = Literal["draft_model", "target_layer", "heads", "cpu_lookup", "in_forward"]


@dataclass(frozen=True)
class Capabilities:
    """What a strategy needs and can do; the policy and the loop read only this."""

    needs_draft_model: bool = False     # a separate, smaller causal LM with the target's tokenizer
    needs_hidden_states: bool = False   # reads the target's hidden states (Medusa, EAGLE)
    trainable_heads: bool = False       # has heads that must be trained on the target
    tree: bool = False                  # proposes token trees, verified with tree attention
    deterministic_draft: bool = False   # p is one-hot (n-gram, lookahead): accept d with prob q(d)
    # At temperature > 0 the reference drafter keeps proposing trees (siblings sampled); False: it
    # proposes a sampled chain of the tree's depth instead (what its measured costs describe).
    sampled_tree: bool = True
    draft_cost: DraftCost = "draft_model"  # what one draft step costs, for the cost model
    # What the deployment must supply (the workload profile's `drafters` section), if anything.
    artifact: Artifact | None = None
    # The artifact is a set of draft heads, one per drafted position (Medusa): a trained one holds
    # this many unless the profile says (drafters.<artifact>.num_heads); drafts go no deeper.
    artifact_heads: int | None = None
    # Engine name -> the engine's own name for this algorithm, or None where the engine has none.
    engines: dict[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True)
class StrategyPlugin:
    """One registered strategy: a name, its capabilities and a lazy drafter factory."""

    name: str
    summary: str
    capabilities: Capabilities
    # Imported lazily so that `specpick recommend` never pays for torch.
    make_drafter: Callable[..., Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        caps = self.capabilities
        return {
            "name": self.name,
            "summary": self.summary,
            "capabilities": {
                "needs_draft_model": caps.needs_draft_model,
                "needs_hidden_states": caps.needs_hidden_states,
                "trainable_heads": caps.trainable_heads,
                "tree": caps.tree,
                "deterministic_draft": caps.deterministic_draft,
                "sampled_tree": caps.sampled_tree,
                "draft_cost": caps.draft_cost,
                "artifact": caps.artifact,
                "engines": dict(caps.engines),
            },
        }


class PluginError(RuntimeError):
    """A plugin that cannot be registered (duplicate or reserved name, wrong object)."""


def load_strategies(only_builtin: bool | None = None) -> dict[str, StrategyPlugin]:
    """Discover every strategy registered under ``specpicker.strategies``; fail fast on conflicts."""
    from importlib.metadata import entry_points

    if only_builtin is None:
        only_builtin = os.environ.get("SPECPICKER_PLUGINS", "") == "builtin"
    found: dict[str, StrategyPlugin] = {}
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        if only_builtin and not ep.value.startswith(BUILTIN_MODULE_PREFIX):
            continue
        plugin = ep.load()
        if not isinstance(plugin, StrategyPlugin):
            raise PluginError(f"entry point {ep.name!r} ({ep.value}) is not a StrategyPlugin")
        if plugin.name != ep.name:
            raise PluginError(f"entry point {ep.name!r} names a plugin called {plugin.name!r}")
        if plugin.name in RESERVED_NAMES:
            raise PluginError(f"strategy name {plugin.name!r} is reserved")
        if plugin.name in found:
            raise PluginError(f"strategy {plugin.name!r} is registered twice")
        found[plugin.name] = plugin
    return found

"""Strategy plugins: declared capabilities and discovery through entry points.

A strategy registers a :class:`StrategyPlugin` under the entry-point group
``specpicker.strategies``; the built-ins register the same way (see ``pyproject.toml``)::

    [project.entry-points."specpicker.strategies"]
    ngram = "strategies.ngram:PLUGIN"

    >>> from picker.engine.plugins import load_strategies
    >>> sorted(load_strategies())[:2]        # doctest: +SKIP
    ['eagle3', 'lookahead']

Code elsewhere branches on :class:`Capabilities`, never on a strategy's name. What is specific
to one strategy is declared on its plugin: hooks named ``"module:attr"`` (the drafter factory, the
head trainer, the depth an artifact allows), imported only when used, and :class:`DraftOptions`
(which factory options set the draft length and the tree shape)::

    >>> DraftOptions(length="ngram", length_offset=1, capped=False).chain(3)
    ({'ngram': 4}, 64)
    >>> DraftOptions(depth="depth", topk="topk", length_offset=1).tree(4, 2, 8)
    {'depth': 4, 'topk': 2, 'num_draft_tokens': 8}

Engine configs come from the plugin too: ``engine_configs`` maps an engine to a hook that writes
that engine's config for a decision (``picker.engine.deploy``: ``hook(DeployRequest) ->
EngineConfig``); an engine the strategy names in ``Capabilities.engines`` without a hook gets the
engine's generic config for that algorithm (``picker.engine.deploy.default_config``).

Set ``SPECPICKER_PLUGINS=builtin`` to load only the project's own strategies (tests do).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

ENTRY_POINT_GROUP = "specpicker.strategies"
BUILTIN_MODULE_PREFIX = "strategies."
RESERVED_NAMES = frozenset({"none", "plain", "auto"})

# draft_model: a small LM forward per draft token; target_layer: one target-sized decoder layer
# per draft step (EAGLE); heads: a few MLPs on the last hidden state (Medusa); cpu_lookup: a
# host-side table lookup (prompt lookup); in_forward: the guesses ride in the target forward (lookahead).
Artifact = Literal["draft_model", "eagle3_head", "medusa_heads", "mtp"]
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
    # Engines that verify trees but whose algorithm for this strategy drafts chains (TensorRT-LLM's
    # suffix automaton for `suffix`): a tree of this strategy is not deployable there.
    chain_only_engines: tuple[str, ...] = ()
    # Engines whose algorithm only approximates this strategy: its config is emitted (and says how it
    # differs), but the strategy's priors describe the strategy, not the approximation, so a plan
    # for that engine does not rest on them.
    approximate_engines: tuple[str, ...] = ()


# A hook is named as ``"module:attr"`` (imported on first use, so that `specpick recommend` never
# pays for torch) or given as the callable itself (what plugins written before references did).
Hook = str | Callable[..., Any]

# The loop's own cap on drafted nodes per step (``picker.engine.loop.generate``'s ``max_draft``).
UNCAPPED_MAX_DRAFT = 64


@dataclass(frozen=True)
class DraftOptions:
    """Which of the factory's options set how much it drafts: declared, never read off its signature.

    The profiler and the sweep build a cell's drafter from these. A chain of N drafts passes
    N + ``length_offset`` to the option ``length`` (offset 1 where the option counts the root too,
    SGLang's convention, or names an n-gram that proposes n - 1 tokens), and the loop verifies at
    most N nodes a step unless ``capped`` is False. A strategy that takes a tree as ``depth`` and
    ``topk`` runs a chain as a top-1 tree of depth N; one that takes Medusa ``choices`` runs it as
    each head's top guess. A tree (depth, topk, verified tokens incl. the root) passes depth, topk
    and ``length`` = tokens, or the ``choices`` of :func:`picker.engine.tree_shapes.medusa_choices`.
    The defaults fit a chain drafter with ``num_draft_tokens``, so plugins that declare nothing
    keep working.
    """

    length: str | None = "num_draft_tokens"
    length_offset: int = 0
    depth: str | None = None
    topk: str | None = None
    choices: str | None = None
    # False: the strategy's whole verification set rides in the forward (lookahead's G guesses of
    # n tokens each), so the loop keeps its own cap instead of N.
    capped: bool = True

    def chain(self, n: int) -> tuple[dict[str, Any], int]:
        """(factory options, the loop's ``max_draft``) for a chain of ``n`` drafted tokens."""
        from picker.engine.tree_shapes import chain_choices

        options: dict[str, Any] = {}
        if self.depth and self.topk:
            options.update({self.depth: n, self.topk: 1})
        elif self.choices:
            options[self.choices] = chain_choices(n)
        if self.length:
            options[self.length] = n + self.length_offset
        return options, n if self.capped else UNCAPPED_MAX_DRAFT

    def tree(self, depth: int, topk: int, tokens: int) -> dict[str, Any] | None:
        """Factory options for a tree of ``tokens`` verified tokens (root included); None: no tree option."""
        from picker.engine.tree_shapes import medusa_choices

        if self.depth and self.topk:
            options: dict[str, Any] = {self.depth: depth, self.topk: topk}
            if self.length:
                options[self.length] = tokens - 1 + self.length_offset
            return options
        if self.choices:
            return {self.choices: medusa_choices(depth, topk, tokens - 1)}
        return None

    def to_dict(self) -> dict[str, Any]:
        return {"length": self.length, "length_offset": self.length_offset, "depth": self.depth,
                "topk": self.topk, "choices": self.choices, "capped": self.capped}


@dataclass(frozen=True)
class StrategyPlugin:
    """One registered strategy: a name, its capabilities, and hooks named as ``"module:attr"``.

    ``name`` is the entry point's name; ``summary`` one line for listings; ``capabilities`` what
    the policy and the loop read. Hooks, each optional:
    ``make_drafter(*, target_backend, artifact=None, **options) -> Drafter`` builds the drafter
    (``picker.engine.drafting``); ``draft_options`` names the options that set its length or tree.
    ``train_heads(target, data, out_dir, *, steps, seed, on_step) -> dict`` trains its heads on
    :class:`picker.engine.training.DistillData` and saves them to ``out_dir`` (required where
    ``capabilities.trainable_heads``). ``artifact_depth(folder) -> int | None`` says how deep a
    draft the artifact in ``folder`` can make (Medusa: one head per depth); None: no limit known.
    ``engine_configs``: engine name -> ``config(DeployRequest) -> EngineConfig`` for engines whose
    config needs more than the generic one (``picker.engine.deploy``).
    """

    name: str
    summary: str
    capabilities: Capabilities
    make_drafter: Hook | None = None
    draft_options: DraftOptions = field(default_factory=DraftOptions)
    train_heads: Hook | None = None
    artifact_depth: Hook | None = None
    engine_configs: dict[str, Hook] = field(default_factory=dict)

    def drafter_factory(self) -> Callable[..., Any] | None:
        """The ``make_drafter`` callable (imported now), or None for a strategy with no local drafter."""
        return resolve_hook(self.make_drafter, self.name)

    def head_trainer(self) -> Callable[..., dict[str, Any]] | None:
        """The ``train_heads`` callable (imported now), or None for a strategy without heads to train."""
        return resolve_hook(self.train_heads, self.name)

    def max_depth(self, artifact: Any) -> int | None:
        """The deepest draft the artifact folder allows, or None (no hook, or nothing it can tell)."""
        hook = resolve_hook(self.artifact_depth, self.name)
        return None if hook is None else hook(artifact)

    def engine_config(self, engine: str) -> Callable[..., Any]:
        """The hook writing ``engine``'s config (imported now); the generic one when none is declared."""
        from picker.engine.deploy import default_config

        return resolve_hook(self.engine_configs.get(engine), self.name) or default_config

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
                "chain_only_engines": list(caps.chain_only_engines),
                "approximate_engines": list(caps.approximate_engines),
            },
            "draft_options": self.draft_options.to_dict(),
            "hooks": {"make_drafter": hook_name(self.make_drafter), "train_heads": hook_name(self.train_heads),
                      "artifact_depth": hook_name(self.artifact_depth)},
            "engine_configs": {engine: hook_name(hook) for engine, hook in self.engine_configs.items()},
        }


def hook_name(hook: Hook | None) -> str | None:
    """``"module:attr"`` for a hook, whether it is named or given as a callable."""
    if hook is None or isinstance(hook, str):
        return hook
    return f"{hook.__module__}:{hook.__qualname__}"


def resolve_hook(hook: Hook | None, plugin: str) -> Callable[..., Any] | None:
    """Import a ``"module:attr"`` hook (attr may be dotted); a callable comes back as it is."""
    if hook is None or callable(hook):
        return hook
    module, _, attr = hook.partition(":")
    if not module or not attr:
        raise PluginError(f"strategy {plugin!r}: hook {hook!r} is not 'module:attr'")
    target: Any = importlib.import_module(module)
    for part in attr.split("."):
        target = getattr(target, part)  # a declared name, resolved like an entry point's
    if not callable(target):
        raise PluginError(f"strategy {plugin!r}: hook {hook!r} is not callable")
    return target


class PluginError(RuntimeError):
    """A plugin that cannot be registered (duplicate or reserved name, wrong object)."""


_FOUND: dict[tuple[bool, tuple[str, ...]], dict[str, StrategyPlugin]] = {}  # load_strategies' per search path


def load_strategies(only_builtin: bool | None = None) -> dict[str, StrategyPlugin]:
    """Discover every strategy registered under ``specpicker.strategies``; fail fast on conflicts."""
    from importlib.metadata import entry_points

    if only_builtin is None:
        only_builtin = os.environ.get("SPECPICKER_PLUGINS", "") == "builtin"
    # Scanning every installed distribution's metadata costs ~5 ms, and one plan validates strategy
    # names several times: what was found is kept per search path (a folder put on sys.path, as a
    # --target install is, is a new search; a pip install into a running process is not seen).
    key = (only_builtin, tuple(sys.path))
    if key in _FOUND:
        return dict(_FOUND[key])
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
        check_plugin(plugin)
        found[plugin.name] = plugin
    _FOUND[key] = dict(found)
    return found


def check_plugin(plugin: StrategyPlugin) -> None:
    """Fail at discovery, not at first use, on a hook that cannot name anything or a missing trainer."""
    hooks = {"make_drafter": plugin.make_drafter, "train_heads": plugin.train_heads,
             "artifact_depth": plugin.artifact_depth,
             **{f"engine_configs[{engine!r}]": hook for engine, hook in plugin.engine_configs.items()}}
    for name, hook in hooks.items():
        if isinstance(hook, str) and (hook.count(":") != 1 or not all(hook.partition(":")[::2])):
            raise PluginError(f"strategy {plugin.name!r}: {name}={hook!r} is not 'module:attr'")
        if hook is not None and not isinstance(hook, str) and not callable(hook):
            raise PluginError(f"strategy {plugin.name!r}: {name} is neither 'module:attr' nor callable")
    if not isinstance(plugin.draft_options, DraftOptions):
        raise PluginError(f"strategy {plugin.name!r}: draft_options is not a DraftOptions")
    if stray := sorted(set(plugin.engine_configs) - set(plugin.capabilities.engines)):
        raise PluginError(f"strategy {plugin.name!r}: engine_configs for {stray}, which capabilities.engines "
                          "does not name (give the engine's algorithm there)")

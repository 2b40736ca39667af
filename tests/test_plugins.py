"""The plugin contract (``picker.engine.plugins``): declared draft options and ``"module:attr"`` hooks.

What is specific to one strategy is read from its plugin, never from its factory's signature or
its module: these tests pin what each built-in declares, check each declaration against the
factory it names, and show that a plugin written before the hooks existed still works.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import pytest

from picker.engine.plugins import (
    Capabilities,
    DraftOptions,
    PluginError,
    StrategyPlugin,
    check_plugin,
    hook_name,
    load_strategies,
    resolve_hook,
)
from picker.engine.tree_shapes import chain_choices, medusa_choices

BUILTINS = load_strategies(only_builtin=True)


# What the profiler passed each built-in before the options were declared (read then from the
# factory's parameter names): a chain of 3 drafts, and the tree depth 4, top-k 2, 8 tokens.
CHAIN_3 = {
    "vanilla": ({"num_draft_tokens": 3}, 3),
    "ngram": ({"num_draft_tokens": 3}, 3),
    "lookahead": ({"ngram": 4}, 64),
    "medusa": ({"choices": [[0], [0, 0], [0, 0, 0]]}, 3),
    "eagle3": ({"depth": 3, "topk": 1, "num_draft_tokens": 4}, 3),
}
TREE_4X2X8 = {
    "vanilla": None, "ngram": None, "lookahead": None,
    "medusa": {"choices": medusa_choices(4, 2, 7)},
    "eagle3": {"depth": 4, "topk": 2, "num_draft_tokens": 8},
}


@pytest.mark.parametrize("name", sorted(CHAIN_3))
def test_builtin_draft_options_give_what_inspection_gave(name: str) -> None:
    options = BUILTINS[name].draft_options
    assert options.chain(3) == CHAIN_3[name]
    assert options.tree(4, 2, 8) == TREE_4X2X8[name]


@pytest.mark.parametrize("name", sorted(BUILTINS))
def test_declared_option_names_are_parameters_of_the_factory(name: str) -> None:
    """A declaration that names an option the factory lacks would fail at the first profile."""
    plugin = BUILTINS[name]
    params = inspect.signature(plugin.drafter_factory()).parameters
    declared = plugin.draft_options
    named = [n for n in (declared.length, declared.depth, declared.topk, declared.choices) if n]
    assert named and all(n in params for n in named), (name, named, list(params))
    assert {"target_backend", "artifact"} <= set(params)


def test_hooks_are_named_and_resolve_to_the_strategy_modules() -> None:
    for name, plugin in BUILTINS.items():
        assert isinstance(plugin.make_drafter, str), name  # lazy: no wrapper in the package's __init__
        assert plugin.drafter_factory().__module__ == f"strategies.{name}.drafter"
    trainers = {n: p.head_trainer() for n, p in BUILTINS.items() if p.capabilities.trainable_heads}
    assert {n: t.__module__ for n, t in trainers.items()} == {
        "eagle3": "strategies.eagle3.train", "medusa": "strategies.medusa.train", "mtp": "strategies.mtp.train"}
    assert all(p.head_trainer() is None for p in BUILTINS.values() if not p.capabilities.trainable_heads)


def test_artifact_depth_hook_reads_the_heads_folder(tmp_path: Path) -> None:
    ours, reference = tmp_path / "ours", tmp_path / "reference"
    for folder, cfg in ((ours, {"num_heads": 3}), (reference, {"medusa_num_heads": 5})):
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(cfg))
    medusa = BUILTINS["medusa"]
    assert (medusa.max_depth(ours), medusa.max_depth(reference)) == (3, 5)
    assert medusa.max_depth(tmp_path / "missing") is None
    assert BUILTINS["eagle3"].max_depth(ours) is None  # no hook: no limit known


def _legacy_factory(*, target_backend: Any = None, artifact: Any = None, num_draft_tokens: int = 3) -> Any:
    from picker.engine.drafting import Draft
    from picker.engine.tree import TokenTree

    class Fixed:
        def propose(self, ctx: Any) -> Draft:
            return Draft(tree=TokenTree.from_chain([1] * num_draft_tokens), p=None)

    return Fixed()


def test_a_plugin_from_before_the_hooks_works_with_defaults() -> None:
    """Callable ``make_drafter``, no draft options, no trainer, no depth hook: all defaulted."""
    from picker.profiler.torch_source import _make_drafter

    old = StrategyPlugin(name="old-style", summary="written against the first contract",
                         capabilities=Capabilities(deterministic_draft=True, draft_cost="cpu_lookup"),
                         make_drafter=_legacy_factory)
    check_plugin(old)
    assert old.drafter_factory() is _legacy_factory
    assert old.draft_options == DraftOptions() and old.draft_options.chain(2) == ({"num_draft_tokens": 2}, 2)
    assert old.head_trainer() is None and old.max_depth("anywhere") is None
    drafter, max_draft = _make_drafter(old, None, None, 5)
    assert max_draft == 5 and len(drafter.propose(None).tree.tokens) == 5
    assert old.to_dict()["hooks"]["make_drafter"] == f"{__name__}:_legacy_factory"


def test_the_profiler_passes_the_declared_length_name() -> None:
    from picker.profiler.torch_source import _make_drafter

    seen: dict[str, Any] = {}

    def factory(*, target_backend: Any = None, artifact: Any = None, guesses: int = 1) -> Any:
        seen["guesses"] = guesses
        return object()

    plugin = StrategyPlugin(name="named", summary="", capabilities=Capabilities(), make_drafter=factory,
                            draft_options=DraftOptions(length="guesses", length_offset=2))
    _make_drafter(plugin, None, None, 4)
    assert seen == {"guesses": 6}


@pytest.mark.parametrize("hook", ["strategies.medusa.train", "no_colon", ":attr", "module:", "a:b:c"])
def test_malformed_hook_names_fail_at_discovery(hook: str) -> None:
    bad = StrategyPlugin(name="bad", summary="", capabilities=Capabilities(), make_drafter=hook)
    with pytest.raises(PluginError, match="module:attr"):
        check_plugin(bad)


def test_a_hook_naming_something_not_callable_fails_when_resolved() -> None:
    with pytest.raises(PluginError, match="not callable"):
        resolve_hook("picker.engine.plugins:UNCAPPED_MAX_DRAFT", "bad")
    assert resolve_hook("picker.engine.tree_shapes:chain_choices", "ok") is chain_choices
    assert hook_name(chain_choices) == "picker.engine.tree_shapes:chain_choices"


def test_every_field_of_the_contract_is_documented() -> None:
    from dataclasses import fields

    from picker.engine.deploy import DeployRequest, EngineConfig

    for cls in (StrategyPlugin, DraftOptions, DeployRequest, EngineConfig):
        missing = [f.name for f in fields(cls) if f"``{f.name}" not in (cls.__doc__ or "")]  # ``x`` or ``x(...)``
        assert not missing, f"{cls.__name__}: undocumented {missing}"

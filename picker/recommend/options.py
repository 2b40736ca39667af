"""What this deployment can run: every strategy's configurations, with feasibility and why not.

An option is feasible when the profile does not disable the strategy, its artifact is present (or
trainable within the budget) and fits the memory headroom; it is engine-supported when the
profile's engine has an algorithm for it (and verifies trees, for a tree).

    >>> from picker.inputs.workload import load_profile
    >>> from picker.engine.plugins import load_strategies
    >>> from picker.recommend.costs import cost_context
    >>> profile = load_profile("profiles/creative-writing.yaml")                        # doctest: +SKIP
    >>> opts = options_for(profile, load_strategies(), cost_context(profile).target)     # doctest: +SKIP
    >>> next(o for o in opts if o.plugin.name == "lookahead").notes[0]                   # doctest: +SKIP
    'disabled in the profile (drafters.allow_lookahead: false)'
"""

from __future__ import annotations

from picker.engine.plugins import Capabilities, StrategyPlugin
from picker.errors import UserError
from picker.inputs.workload import WorkloadProfile
from picker.recommend.engine_configs import ENGINE_VERIFIES_TREES, version_refusal
from picker.recommend.table import Option
from policies import ModelShape, configs_for, eagle_layer_shape, medusa_heads_shape

RESERVED = "none"  # the decision's strategy when speculation stays off; never a plugin's name


def check_named_strategies(profile: WorkloadProfile, plugins: dict[str, StrategyPlugin], path: str = "") -> None:
    """Every strategy the profile names (drafters.disabled, allow_<name>) must be registered."""
    known = {name.replace("-", "_"): name for name in plugins}
    for name, field in profile.drafters.named_strategies().items():
        if name not in plugins and name not in known:
            raise UserError(f"unknown strategy {name!r}; registered: {', '.join(sorted(plugins))}",
                            file=path or profile.name, field=field)


def artifact_heads(caps: Capabilities, profile: WorkloadProfile) -> int | None:
    """Heads the strategy's artifact holds (it drafts no deeper): the profile's count, else the plugin's
    declared default; None when the artifact is not a set of heads."""
    if caps.artifact_heads is None or caps.artifact is None:
        return None
    spec = getattr(profile.drafters, caps.artifact, None)
    return getattr(spec, "num_heads", None) or caps.artifact_heads


def artifact_memory_gib(caps: Capabilities, profile: WorkloadProfile, target: ModelShape) -> float:
    """Memory per accelerator the strategy's artifact needs (weights only; drafts keep a small cache),
    by what drafting runs (the declared draft cost): a draft model, one target-sized layer, or heads."""
    if caps.artifact is None:
        return 0.0
    d = profile.drafters
    if caps.draft_cost == "draft_model" and d.draft_model is not None:
        size = d.draft_model.params_b * 1e9 * target.bytes_per_param
    elif caps.draft_cost == "target_layer":
        size = eagle_layer_shape(target).weight_bytes
    elif caps.draft_cost == "heads":
        size = medusa_heads_shape(target, artifact_heads(caps, profile) or 1).weight_bytes
    else:
        return 0.0
    return size / profile.hardware.count / 2**30


def feasibility(plugin: StrategyPlugin, profile: WorkloadProfile, target: ModelShape) -> tuple[bool, list[str]]:
    """Can this deployment run the strategy at all: allowed, artifact present (or trainable), memory."""
    caps, d, notes = plugin.capabilities, profile.drafters, []
    off = d.disabled_by(plugin.name)
    if off is not None:
        return False, [f"disabled in the profile ({off})"]
    if caps.artifact is not None and getattr(d, caps.artifact) is None:
        if caps.artifact == "draft_model" or not d.can_train_heads:
            return False, [f"needs drafters.{caps.artifact}, which the profile does not provide"]
        notes.append(f"needs {caps.artifact.replace('_', ' ')} trained first (training budget "
                     f"{d.training_budget_gpu_hours:g} GPU-hours)")
    short = memory_shortfall(artifact_memory_gib(caps, profile, target), profile.memory_headroom_gib, "headroom")
    if short is not None:
        return False, [short]
    return True, notes


def memory_shortfall(need_gib: float, have_gib: float, what: str) -> str | None:
    """Why ``need_gib`` per accelerator does not fit in ``have_gib`` (named ``what``); None when it fits."""
    if need_gib <= have_gib:
        return None
    return f"needs {need_gib:.1f} GiB per accelerator, {what} is {have_gib:g} GiB"


def engine_support(caps: Capabilities, engine: str, tree: bool) -> str | None:
    """Why ``engine`` cannot run the strategy (as a tree when ``tree``); None when it can."""
    if caps.engines.get(engine) is None:
        return f"{engine} has no algorithm for it"
    if engine in caps.approximate_engines:
        return f"{engine} runs only an approximation of it ({caps.engines[engine]}), which its priors do not describe"
    if tree and not ENGINE_VERIFIES_TREES.get(engine, False):
        return f"{engine} verifies chains only"
    if tree and engine in caps.chain_only_engines:
        return f"{engine}'s algorithm for it drafts chains only"
    return None


def options_for(profile: WorkloadProfile, plugins: dict[str, StrategyPlugin], target: ModelShape) -> list[Option]:
    """Every configuration of every plugin (``policies.analytic.configs_for``), with feasibility and notes."""
    out = []
    for plugin in plugins.values():
        caps = plugin.capabilities
        feasible, notes = feasibility(plugin, profile, target)
        refused: dict[int, str | None] = {}  # the hook is probed at a shape (top-k), not a length: once per top-k
        for config in configs_for(caps, artifact_heads(caps, profile)):
            if config.topk not in refused:
                refused[config.topk] = version_refusal(profile.engine.name, plugin, config.topk, profile.engine.version)
            why_not = engine_support(caps, profile.engine.name, config.is_tree) or refused[config.topk]
            out.append(Option(plugin, config, feasible, why_not is None,
                              (*notes, why_not) if why_not else tuple(notes)))
    return out

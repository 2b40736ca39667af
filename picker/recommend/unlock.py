"""The better options a deployment cannot run, and what would make each runnable.

Read off the scored table (nothing is scored again): for every strategy whose best configuration
beats what the plan deploys (or, when speculation stays off, beats the worth-it threshold), would be
turned on by the decision's rule (``picker.recommend.uncertainty.enabled``) and is not deployable,
the best configuration the profile's own engine could run once something is provided, and, where
a configuration needs another engine and is better still, that one too. Each
blocker the alternatives table names gets its real remedy: a missing artifact the profile field to
fill (with the published artifact or the catalog's smaller model where one is known), a disabled
strategy the field that disables it, too little memory the headroom needed, an engine without the
algorithm (or without tree verification) the engines that have it, an engine version too old for
it a newer one.

    >>> from picker.inputs.workload import load_profile
    >>> from picker.recommend.pipeline import recommend
    >>> result = recommend(load_profile("profiles/offline-batch.yaml"))            # doctest: +SKIP
    >>> result.recommendation.unlocks[0].provide[0]                                 # doctest: +SKIP
    'drafters.mtp: {modules: N, builtin: true} where the checkpoint ships MTP modules ...'
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from picker.engine.plugins import Capabilities
from picker.inputs.model_catalog import CATALOG, find_model
from picker.inputs.workload import WorkloadProfile
from picker.recommend.contract import SpeedupRange, Unlock
from picker.recommend.engine_configs import ENGINE_VERIFIES_TREES, version_refusal
from picker.recommend.figures import rounded
from picker.recommend.options import artifact_memory_gib, engine_support
from picker.recommend.table import NOT_WORTH_IT, Scored, ScoredTable, ranked
from picker.recommend.uncertainty import enabled
from policies import ModelShape

SHOWN = 3  # unlocks carried in a plan, best first

# Published EAGLE-3 heads by target (hub ids), from the EAGLE repository's README, "EAGLE-3
# weights" table (github.com/SafeAILab/EAGLE); the two shipped profiles that use them name the same.
PUBLISHED_EAGLE3_HEADS = {
    "meta-llama/Llama-3.1-8B-Instruct": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
    "meta-llama/Llama-3.3-70B-Instruct": "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B",
}
_MTP_CHECKPOINTS = "DeepSeek-V3, Qwen3-Next, GLM-4.5 and MiMo ship them"


def setting_text(row: Scored) -> str:
    c = row.config
    if c.is_tree:
        return f"a tree of depth {c.depth}, top-k {c.topk}, {c.num_draft_tokens} tokens"
    return f"{c.depth} draft token{'s' if c.depth != 1 else ''} per step"


def _draft_model_hint(profile: WorkloadProfile) -> str:
    """The catalog's smallest model from the target's organisation with its vocabulary (its tokenizer)."""
    target = find_model(profile.model.name)
    vocab = profile.model.vocab_size
    org = (target.hub_id if target else profile.model.name).split("/", 1)[0]
    size = profile.model_shape().params / 1e9
    same = [m for m in CATALOG.values() if m.hub_id.split("/", 1)[0] == org and m.params_b < size / 4
            and vocab is not None and abs(int(m.config["vocab_size"]) - vocab) <= 1024]
    if not same:
        return "drafters.draft_model: {name, params_b}: a smaller model that shares the target's tokenizer"
    m = min(same, key=lambda x: x.params_b)
    return (f"drafters.draft_model: {{name: {m.hub_id}, params_b: {m.params_b:g}}} (a smaller model with "
            "the target's vocabulary in the model catalog)")


def artifact_hint(artifact: str, profile: WorkloadProfile) -> str:
    """The profile field that provides ``artifact``, with the published one where known."""
    target = profile.model.name
    train = "or drafters.training_budget_gpu_hours > 0 to plan one trained first"
    if artifact == "draft_model":
        return _draft_model_hint(profile)
    if artifact == "eagle3_head":
        known = PUBLISHED_EAGLE3_HEADS.get(target)
        if known:
            return f"drafters.eagle3_head: {{name: {known}}} (the published EAGLE-3 head for {target})"
        return f"drafters.eagle3_head: {{name or path}}: an EAGLE-3 head trained for {target}, {train}"
    if artifact == "medusa_heads":
        return f"drafters.medusa_heads: {{name or path, num_heads}}: Medusa heads trained for {target}, {train}"
    if artifact == "mtp":
        return (f"drafters.mtp: {{modules: N, builtin: true}} where the checkpoint ships MTP modules "
                f"({_MTP_CHECKPOINTS}), else modules trained for {target} by name or path")
    return f"drafters.{artifact}"


def _engines_running(caps: Capabilities, tree: bool) -> list[str]:
    """Engines whose own algorithm runs the strategy (as a tree when ``tree``)."""
    return [e for e, algo in caps.engines.items() if algo and e not in caps.approximate_engines
            and (not tree or (ENGINE_VERIFIES_TREES.get(e, False) and e not in caps.chain_only_engines))]


def _remedies(row: Scored, table: ScoredTable) -> list[str] | None:
    """What would make ``row`` runnable here, one entry per blocker; None when a blocker has no
    remedy the plan can name (an SLO the configuration breaks)."""
    profile, caps = table.profile, row.caps
    d, out = profile.drafters, []
    off = d.disabled_by(row.plugin.name)
    if off is not None:
        out.append(f"take {row.plugin.name} out of {off.split(':')[0]}")
    if caps.artifact is not None and getattr(d, caps.artifact) is None and (
            caps.artifact == "draft_model" or not d.can_train_heads):
        out.append(artifact_hint(caps.artifact, profile))
    need = artifact_memory_gib(caps, profile, table_target(table))
    if need > profile.memory_headroom_gib:
        out.append(f"memory_headroom_gib >= {need:.1f} (it is {profile.memory_headroom_gib:g}): the room its "
                   "weights need per accelerator")
    why_engine = engine_support(caps, profile.engine.name, row.config.is_tree)
    too_old = None if why_engine is not None else version_refusal(
        profile.engine.name, row.plugin, row.config.topk, profile.engine.version)
    if too_old is not None:
        out.append(f"switch to a newer {profile.engine.name} than {profile.engine.version} (engine.version): {too_old}")
    if why_engine is not None:
        engines = _engines_running(caps, row.config.is_tree)
        if not engines:
            return None
        out.append(f"switch the engine to {' or '.join(engines)} ({why_engine})")
    if not out or (row.option.feasible and not row.feasible):
        return None  # nothing the profile lacks, or an SLO it breaks: no unlock to name
    slo = profile.slo
    if not row.option.feasible and any(v is not None for v in slo.model_dump().values()):
        # Scoring checks the latency targets only for what can run: say so rather than promise it.
        out.append("then re-run specpick recommend: its latency against the profile's SLOs is checked once it "
                   "can run")
    return out


def table_target(table: ScoredTable) -> ModelShape:
    """The target's roofline shape (for the artifacts' memory)."""
    return ModelShape(**table.profile.model_shape().roofline_kwargs())


def _unlock(row: Scored, provide: list[str], same_engine: bool) -> Unlock:
    return Unlock(strategy=row.plugin.name, setting=setting_text(row),
                  predicted_speedup=SpeedupRange(mean=rounded(row.mean), low=rounded(row.low), high=rounded(row.high)),
                  blocked_by=list(row.notes), provide=provide, same_engine=same_engine)


def unlocks(table: ScoredTable, shown: int = SHOWN) -> list[Unlock]:
    """Better options this deployment cannot run, best first, each with what would unlock it."""
    usable = ranked(table.rows)
    bar = max(usable[0].mean if usable and usable[0].mean >= NOT_WORTH_IT else 0.0, NOT_WORTH_IT)
    # Only what the decision would deploy once runnable: its predicted low end clears the bar too.
    blocked = [r for r in table.rows if not r.deployable and r.mean > bar and enabled(r, table.buckets)]
    # Per strategy: the best configuration the profile's engine runs once provided, then (if better
    # still) one that needs another engine; strategies ordered by the best either gives.
    groups: list[tuple[float, list[Unlock]]] = []
    for name in dict.fromkeys(r.plugin.name for r in blocked):
        mine = sorted((r for r in blocked if r.plugin.name == name), key=lambda r: -r.mean)
        here = _best(mine, lambda r: r.option.engine_supported, table)
        there = _best(mine, lambda r: not r.option.engine_supported, table)
        group = [_unlock(*here, True)] if here is not None else []
        if there is not None and (here is None or there[0].mean > here[0].mean):
            group.append(_unlock(*there, False))
        if group:
            groups.append((max(u.predicted_speedup.mean for u in group), group))
    groups.sort(key=lambda g: -g[0])
    return [u for _, group in groups for u in group][:shown]


def _best(rows: Sequence[Scored], keep: Callable[[Scored], bool],
          table: ScoredTable) -> tuple[Scored, list[str]] | None:
    for r in rows:
        if keep(r):
            remedy = _remedies(r, table)
            if remedy is not None:
                return r, remedy
    return None

"""The engine-config hook: what a strategy's per-engine hook receives, and what it returns.

A strategy plugin names, per engine, a hook ``"module:attr"`` (``StrategyPlugin.engine_configs``)
that turns a decision into that engine's own speculative config: ``hook(DeployRequest) ->
EngineConfig``. The hook writes what is specific to the strategy (the algorithm's flags, its draft
length and tree, where its artifact lies); what is engine-wide -- batch schedules, which versions
exist, whether the engine verifies trees -- stays with the engine (``picker.recommend.engine_configs``),
which calls the hook and finishes the config. Plain data, no torch: ``specpick recommend`` runs it.

    >>> req = DeployRequest(engine="vllm", version="0.10.1", algorithm="ngram", depth=4)
    >>> req.at_least("0.11.0"), req.chain, req.num_draft_tokens
    (False, True, 5)
    >>> cfg = default_config(req)
    >>> cfg.config
    {'method': 'ngram', 'num_speculative_tokens': 4}

A hook says where its config stops being valid by raising :class:`Unsupported` (this version of
the engine cannot run it: the reason names the version that can), and states the versions its
output holds for in ``EngineConfig.versions`` (``">=0.11.1"``, ``"<0.11.0"``, or a comma list of
both bounds).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# ``0.10.1``, ``1.4.0rc4``, ``0.10.1.1.post2``; llama.cpp builds ``b6500``. Anything else (a commit,
# ``b1-0c1e570``) is an identifier that only equals itself.
_RELEASE = re.compile(r"^v?(\d+(?:\.\d+)*)(?:(a|b|rc)(\d+))?(?:\.post(\d+))?$")
_BUILD = re.compile(r"^b(\d+)$")
_PRE = {"a": -3, "b": -2, "rc": -1}


def parse_version(text: str) -> tuple[int, ...] | None:
    """Comparable key of a version string, or None for an identifier with no order.

    Releases compare numerically, a pre-release (``rc``) below its release and a post-release above.

        >>> parse_version("1.4.0rc4") < parse_version("1.4.0") < parse_version("1.4.0.post1")
        True
        >>> parse_version("0.10.1") < parse_version("0.9.2")
        False
        >>> parse_version("b6500") < parse_version("b6501"), parse_version("b1-0c1e570")
        (True, None)
    """
    m = _BUILD.match(text.strip())
    if m:
        return (int(m.group(1)), 0, 0, 0, 0, 0, 0)
    m = _RELEASE.match(text.strip())
    if m is None:
        return None
    release = [int(x) for x in m.group(1).split(".")]
    release += [0] * (4 - len(release))
    pre = (_PRE[m.group(2)], int(m.group(3))) if m.group(2) else (0, 0)
    return (*release[:4], *pre, int(m.group(4) or 0))


def in_range(version: str, spec: str) -> bool | None:
    """Whether ``version`` satisfies ``spec`` (``">=0.11.1"``, ``">=0.10.1,<0.11.0"``; ``""``: any).

    None when the version has no order (an identifier); the caller decides what that means.

        >>> in_range("0.12.0", ">=0.11.1"), in_range("0.10.2", ">=0.10.1,<0.11.0"), in_range("abc", ">=1")
        (True, True, None)
    """
    key = parse_version(version)
    if not spec:
        return True
    if key is None:
        return None
    for part in spec.split(","):
        op, bound = re.match(r"^\s*(>=|<=|<|>|==)\s*(\S+)\s*$", part).groups()  # type: ignore[union-attr]
        other = parse_version(bound)
        if other is None:
            raise ValueError(f"version bound {bound!r} has no order")
        ok = {">=": key >= other, "<=": key <= other, "<": key < other, ">": key > other, "==": key == other}[op]
        if not ok:
            return False
    return True


class Unsupported(Exception):  # noqa: N818 -- read as "raise Unsupported(why)"
    """This engine (at this version) cannot run the strategy; the message says why and what can."""


@dataclass(frozen=True)
class DeployRequest:
    """A decision, as one engine's hook sees it.

    ``engine`` and ``version``: the engine and the version its config is written for (the profile's,
    or the pinned one). ``algorithm`` is the engine's own name for the strategy
    (``Capabilities.engines``). ``depth`` is
    the chain length or the tree depth; ``topk`` > 1 makes a tree of ``tree_tokens`` verified tokens
    (the root included, SGLang's count); a chain has ``topk`` 1. ``artifact`` is where what the
    strategy declares in ``Capabilities.artifact`` lies (a path, a hub id, or a placeholder);
    ``artifact_info`` the profile's ``drafters.<artifact>`` entry as plain data (e.g. a module
    count). ``choices`` is a Medusa-style tree as rank paths, when the decision has one.
    ``verifies_trees`` is the engine's own fact. ``target`` is the profile's model name.
    """

    engine: str
    version: str
    algorithm: str
    depth: int
    topk: int = 1
    tree_tokens: int | None = None
    artifact: str | None = None
    artifact_info: Mapping[str, Any] = field(default_factory=dict)
    choices: tuple[tuple[int, ...], ...] | None = None
    verifies_trees: bool = True
    target: str | None = None

    @property
    def chain(self) -> bool:
        return self.topk == 1

    @property
    def num_draft_tokens(self) -> int:
        """Verified tokens, the root included: ``depth + 1`` for a chain (what SGLang forces)."""
        return self.depth + 1 if self.chain or self.tree_tokens is None else self.tree_tokens

    def at_least(self, version: str) -> bool:
        """Whether the request's engine version is ``version`` or later (an identifier: no)."""
        return bool(in_range(self.version, f">={version}"))


@dataclass(frozen=True)
class EngineConfig:
    """What a hook returns: the strategy's part of one engine's config.

    ``args``: CLI tokens (SGLang's launch_server, llama.cpp's llama-server). ``config``: the
    engine's config object (vLLM ``speculative_config``, TensorRT-LLM ``speculative_config``).
    ``notes``: caveats the plan prints. ``schedule``: False where the engine cannot vary this
    config's draft length by batch size (the engine then drafts the full length and says so).
    ``versions``: the engine versions this output is valid for (see :func:`in_range`).
    ``approximation``: set when the engine's algorithm only approximates the strategy -- why.
    """

    args: tuple[str, ...] = ()
    config: dict[str, Any] | None = None
    notes: tuple[str, ...] = ()
    schedule: bool = True
    versions: str = ""
    approximation: str | None = None


def default_config(req: DeployRequest) -> EngineConfig:
    """The engine's generic speculative config for ``req.algorithm`` and the draft length.

    What a plugin that declares an algorithm but no hook gets, and the base built-in hooks extend:
    SGLang's tree flags, vLLM's method and length, TensorRT-LLM's decoding type and length,
    llama.cpp's spec type and length.
    """
    if req.engine == "sglang":
        args = ["--speculative-algorithm", req.algorithm]
        if req.artifact is not None:
            args += ["--speculative-draft-model-path", req.artifact]
        return EngineConfig(args=(*args, *sglang_tree_flags(req.depth, req.topk, req.num_draft_tokens)))
    if req.engine == "vllm":
        spec: dict[str, Any] = {"method": req.algorithm, "num_speculative_tokens": req.depth}
        if req.artifact is not None:
            spec["model"] = req.artifact
        return EngineConfig(config=spec)
    if req.engine == "tensorrt_llm":
        cfg: dict[str, Any] = {"decoding_type": req.algorithm, "max_draft_len": req.depth}
        if req.artifact is not None:
            cfg["speculative_model"] = req.artifact
        return EngineConfig(config=cfg)
    if req.engine == "llama_cpp":
        return EngineConfig(args=("--spec-type", req.algorithm, "--spec-draft-n-max", str(req.depth)))
    raise Unsupported(f"no generic config for engine {req.engine!r}")


def check_sglang_tree(num_steps: int, topk: int, num_draft_tokens: int) -> None:
    """Our own copy of SGLang's shape rules, including the one it only enforces at run time."""
    if num_steps < 1 or topk < 1 or num_draft_tokens < 2:
        raise ValueError("SGLang needs steps >= 1, topk >= 1 and draft tokens >= 2")
    if topk == 1 and num_draft_tokens != num_steps + 1:
        raise ValueError("SGLang forces num_draft_tokens = num_steps + 1 when topk == 1")
    if num_draft_tokens > num_steps * topk + 1:
        # resolve_once() accepts this; the draft tree cannot hold that many nodes and the worker fails.
        raise ValueError("num_draft_tokens must be <= num_steps * topk + 1 (the tree cannot hold more)")


def sglang_tree_flags(num_steps: int, topk: int, num_draft_tokens: int) -> tuple[str, ...]:
    """SGLang 0.5.23's three EAGLE-family tree flags, all together (it asserts when only some are set).

        >>> sglang_tree_flags(3, 1, 4)
        ('--speculative-num-steps', '3', '--speculative-eagle-topk', '1', '--speculative-num-draft-tokens', '4')
    """
    check_sglang_tree(num_steps, topk, num_draft_tokens)
    return ("--speculative-num-steps", str(num_steps), "--speculative-eagle-topk", str(topk),
            "--speculative-num-draft-tokens", str(num_draft_tokens))


# --speculative-ngram-max-trie-depth default in SGLang 0.5.23 (arg_groups/fields/spec.py).
SGLANG_NGRAM_TRIE_DEPTH = 18


def sglang_ngram_args(req: DeployRequest, *, breadth: int = 1, match_type: str | None = None) -> tuple[str, ...]:
    """SGLang 0.5.23 NGRAM flags for ``req.num_draft_tokens`` verified tokens.

    BFS breadth 1 keeps a chain; SGLang then derives topk = breadth and steps = draft tokens //
    topk itself, so neither is passed. The trie only holds (and matches) ``max_trie_depth`` tokens,
    so a longer chain raises it. ``match_type`` ``"PROB"`` ranks continuations by frequency.

        >>> sglang_ngram_args(DeployRequest(engine="sglang", version="0.5.23", algorithm="NGRAM", depth=4))[:4]
        ('--speculative-algorithm', 'NGRAM', '--speculative-num-draft-tokens', '5')
    """
    tokens = req.num_draft_tokens
    args = ["--speculative-algorithm", req.algorithm, "--speculative-num-draft-tokens", str(tokens),
            "--speculative-ngram-min-bfs-breadth", "1", "--speculative-ngram-max-bfs-breadth", str(breadth)]
    if tokens > SGLANG_NGRAM_TRIE_DEPTH:
        args += ["--speculative-ngram-max-trie-depth", str(tokens)]
    if match_type is not None:
        args += ["--speculative-ngram-match-type", match_type]
    return tuple(args)

"""The oracle: measure every grid point on the reference engine, at a stated cost.

``specpick sweep`` runs the profiler (``picker.profiler``) with sequential stopping off over the
full grid strategy × N × tree × temperature for a workload's task types, so every cell measures
every prompt, interleaved prompt by prompt with the plain baseline. Records are the profiler's
append-only JSONL (``records.jsonl``): a killed sweep continues with ``--resume`` and repeats no
finished generation.

Batch size: the reference engine (``picker.engine.loop``) decodes one sequence at a time, so the sweep
cannot measure batches. It measures instead what batching changes -- the time of one verify
forward against the number of tokens in flight (``verify_curve.jsonl``: forwards of m query
tokens over a cached context, m = 1 .. 64) -- and the cost model reads a batch of B sequences
drafting N tokens as B·(N+1) tokens in flight (``picker.inputs.verify_curve.verify_ratio``). That is an approximation,
stated wherever it is used: B sequences of N+1 tokens read B KV caches where one sequence of
B·(N+1) tokens reads one.

    >>> grid = sweep_grid({"ngram": Capabilities(deterministic_draft=True, draft_cost="cpu_lookup")},
    ...                   chain_lengths=(1, 2), trees=((4, 2, 8),))
    >>> [(g.strategy, g.num_draft_tokens, g.tree) for g in grid]
    [('ngram', 1, None), ('ngram', 2, None)]
    >>> tree_label(4, 2, 8), parse_tree_label("depth=4,topk=2,tokens=8")
    ('depth=4,topk=2,tokens=8', (4, 2, 8))

Cost: ``sweep.json`` states what the sweep spent (target forwards and seconds, per cell and in
total, from the records), next to the grid it covered.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from picker.engine.plugins import Capabilities
from picker.engine.runtime import build_drafter
from picker.errors import UserError
from picker.inputs.measurements import parse_tree_label, tree_label  # re-exported: the sweep's vocabulary
from picker.inputs.verify_curve import CURVE_NAME, CurvePoint, curve_medians, read_curve_lines
from picker.profiler.records import CellKey
from picker.profiler.source import DraftConfig
from picker.profiler.torch_source import TorchSource, _make_drafter

CHAIN_LENGTHS = (1, 2, 3, 4, 5, 6, 8)
# Trees (depth, topk, verified tokens incl. the root; SGLang's convention). (5, 4, 8) is SGLang's
# auto default for Llama targets; the others span wider and deeper shapes of similar budgets.
TREES = ((3, 2, 6), (4, 2, 8), (5, 4, 8), (4, 4, 12), (6, 4, 16))
TOKENS_IN_FLIGHT = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 24, 32, 48, 64)
CURVE_REPEATS = 15
SUMMARY_NAME, SWEEP_NAME = "summary.json", "sweep.json"


def sweep_grid(
    capabilities: Mapping[str, Capabilities],
    chain_lengths: Sequence[int] = CHAIN_LENGTHS,
    trees: Sequence[tuple[int, int, int]] = TREES,
    max_depth: Mapping[str, int] | None = None,
) -> list[DraftConfig]:
    """Every grid point: chains for every strategy, trees for those that declare ``tree``.

    ``max_depth`` caps a strategy's depth (Medusa drafts no deeper than it has heads).
    """
    out: list[DraftConfig] = []
    for name, caps in capabilities.items():
        cap = (max_depth or {}).get(name)
        out += [DraftConfig(name, n) for n in chain_lengths if cap is None or n <= cap]
        if caps.tree:
            out += [DraftConfig(name, tokens - 1, tree_label(d, k, tokens)) for d, k, tokens in trees
                    if (cap is None or d <= cap) and d + 1 < tokens <= d * k + 1]
    return out


class SweepSource(TorchSource):
    """The profiler's torch source, able to run tree cells too (chains go through unchanged)."""

    def __init__(self, *args: Any, grid: Sequence[DraftConfig], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.grid = list(grid)

    def configs(self, strategies: Sequence[str], num_draft_tokens: Sequence[int]) -> list[DraftConfig]:
        super().configs(strategies, [1])  # the artifact checks, with the profiler's messages
        return [g for g in self.grid if g.strategy in strategies]

    def _drafter(self, cell: CellKey) -> tuple[Any, Any, int]:
        if cell.tree is None:
            return super()._drafter(cell)
        from picker.engine.plugins import load_strategies

        plugin = load_strategies()[cell.strategy]
        key = CellKey("", cell.strategy, 0.0, cell.num_draft_tokens, cell.tree)
        if key not in self._drafters:
            self._drafters[key] = (_tree_drafter(plugin, self.target, self.artifacts.get(cell.strategy),
                                                 *parse_tree_label(cell.tree)), cell.num_draft_tokens)
        drafter, max_draft = self._drafters[key]
        return drafter, plugin.capabilities, max_draft


def _tree_drafter(plugin: Any, target: Any, artifact: Path | None, depth: int, topk: int, tokens: int) -> Any:
    """A tree drafter from the tree options the plugin declares (``StrategyPlugin.draft_options``).

    A strategy that declares none drafts the cell as a chain of ``tokens - 1``.
    """
    options = plugin.draft_options.tree(depth, topk, tokens)
    if options is None:
        return _make_drafter(plugin, target, artifact, tokens - 1)[0]
    kind = plugin.capabilities.artifact
    return build_drafter(plugin, target, {kind: artifact} if kind and artifact else {}, options)


# ----------------------------------------------------------------------------- verify time curve

def measure_verify_curve(
    backend: Any,
    path: Path,
    *,
    tokens_in_flight: Sequence[int] = TOKENS_IN_FLIGHT,
    contexts: Sequence[int] = (128, 384),
    repeats: int = CURVE_REPEATS,
) -> list[CurvePoint]:
    """Time one verify forward (a pending token plus a chain of m - 1 drafts) against m.

    Rounds interleave every m (a shared CPU drifts; interleaving spreads the drift evenly); each
    timing is appended to ``path`` as one JSON line as it completes, so a resumed sweep keeps what
    was measured (and a larger ``repeats`` adds rounds). Returns :func:`curve_medians` of the file.
    """
    from picker.engine.tree import TokenTree

    done = read_curve_lines(path)
    vocab = int(backend.vocab_size)
    with path.open("a", encoding="utf-8") as fh:
        for context in contexts:
            prefix = [(7 * i + 3) % vocab for i in range(context)]
            backend.prefill(prefix)
            for r in range(repeats):
                for m in tokens_in_flight:
                    if sum(1 for d in done if d["tokens"] == m and d["context"] == context) > r:
                        continue
                    chain = TokenTree.from_chain([(5 * j + 11) % vocab for j in range(m - 1)])
                    t0 = time.perf_counter()
                    backend.forward([prefix[-1]], chain if m > 1 else None, logits_from=0)
                    seconds = time.perf_counter() - t0
                    backend.crop(context)
                    line = {"tokens": m, "context": context, "seconds": seconds, "repeat": r}
                    fh.write(json.dumps(line) + "\n")
                    fh.flush()
                    os.fsync(fh.fileno())
                    done.append(line)
    return curve_medians(done)


# ----------------------------------------------------------------------------- the cost statement

def sweep_cost(summary: Mapping[str, Any]) -> dict[str, Any]:
    """What a sweep (or any profile) spent: target forwards and seconds, per cell and in total."""
    cells = [*summary.get("cells", []), *summary.get("baselines", [])]
    per_cell = [{"task": c["task"], "strategy": c["strategy"], "temperature": c["temperature"],
                 "num_draft_tokens": c.get("num_draft_tokens", 0), "tree": c.get("tree"),
                 "target_forwards": c.get("target_forwards") or 0, "seconds": c.get("seconds") or 0.0}
                for c in cells]
    return {"cells": len(per_cell),
            "target_forwards": sum(c["target_forwards"] for c in per_cell),
            "seconds": round(sum(c["seconds"] for c in per_cell), 3), "per_cell": per_cell}


def write_sweep_file(out: Path, grid: Sequence[DraftConfig], meta: Mapping[str, Any],
                     curve: Sequence[CurvePoint]) -> dict[str, Any]:
    """``sweep.json``: the grid, the stated cost, the verify curve and how batches are handled."""
    from picker.profiler.summary import write_json_atomic

    summary = json.loads((out / SUMMARY_NAME).read_text(encoding="utf-8"))
    curve_lines = read_curve_lines(out / CURVE_NAME)
    cost = sweep_cost(summary)
    cost["verify_curve"] = {"forwards": len(curve_lines),
                            "seconds": round(sum(d["seconds"] for d in curve_lines), 3)}
    data = {
        "schema": "specpicker.sweep/1", **dict(meta),
        "grid": [{"strategy": g.strategy, "num_draft_tokens": g.num_draft_tokens, "tree": g.tree} for g in grid],
        "cost": cost,
        "verify_curve": [vars(p) for p in curve],
        "batch": ("measured at concurrency " + ", ".join(map(str, meta["concurrency"])) +
                  " (the batched reference engine, every cell against plain decoding at its own level); between "
                  "and beyond those levels the cost model reads a batch of B drafting N tokens as B*(N+1) tokens "
                  "in flight on the verify curve")
        if len(meta.get("concurrency", [1])) > 1 or max(meta.get("concurrency", [1])) > 1 else
        "not measured: every cell ran one sequence at a time; verify time is measured against tokens in flight "
        "(verify_curve) and a batch of B drafting N tokens is read as B*(N+1) tokens in flight by the cost model",
    }
    write_json_atomic(out / SWEEP_NAME, data)
    return data


def iter_cells(summary: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Strategy cells of a sweep summary with a measured speedup."""
    for c in summary.get("cells", []):
        if c.get("speedup_vs_plain"):
            yield c


def check_grid(grid: Sequence[DraftConfig]) -> None:
    if not grid:
        raise UserError("the grid is empty: no strategy can run any configuration", field="--strategies")

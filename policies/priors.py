"""Acceptance priors: published per-token acceptance by strategy, task type and temperature.

The policy falls back on these when nothing has been measured. The numbers live in
``policies/data/priors.yaml``; every one traces to a cited source, and entries with no published
figure say how they were derived (``kind`` is ``published``, ``derived`` or ``assumption``).

    >>> prior = load_priors().lookup("eagle3", "code", temperature=0.0)
    >>> prior.kind, round(prior.alpha, 2), prior.source
    ('published', 0.92, 'prior')
    >>> load_priors().lookup("ngram", "summarization", 0.5).kind  # between published T=0 and derived T=1
    'derived'

``alpha`` is the per-token acceptance of the i.i.d. chain model: tau = (1 - alpha^(N+1)) / (1 - alpha)
with N = ``depth``. For tree strategies it is the equivalent-chain alpha of the published tree;
``alpha_chain`` is what a chain of the same drafter gets (EAGLE-1 Table 5), the number to use for
chain-only engines such as vLLM.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import statistics
from importlib import resources
from typing import Literal, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

Strategy = Literal["vanilla", "medusa", "eagle3", "lookahead", "ngram", "mtp", "suffix"]
Task = Literal["chat", "code", "structured", "math", "summarization", "rag", "translation", "creative", "agentic"]
Kind = Literal["published", "derived", "assumption"]

STRATEGIES: tuple[str, ...] = get_args(Strategy)
TASKS: tuple[str, ...] = get_args(Task)
KIND_ORDER: tuple[str, ...] = get_args(Kind)  # strongest evidence first
TAU_TOLERANCE = 1e-3  # a measurement's alpha must reproduce its reported tau this closely
ALPHA_FLOOR = 0.01  # extrapolated lower bounds never go below this


def chain_tau(alpha: float, n: int) -> float:
    """Expected tokens per verify step for a chain of ``n`` drafts (bonus included)."""
    if abs(1.0 - alpha) < 1e-12:
        return n + 1.0
    return (1.0 - alpha ** (n + 1)) / (1.0 - alpha)


def alpha_from_tau(tau: float, n: int) -> float:
    """The alpha in (0, 1) whose chain of ``n`` drafts yields ``tau`` (bisection; tau is increasing)."""
    if not 1.0 < tau < n + 1:
        raise ValueError(f"tau={tau} is outside (1, {n + 1}) for a chain of {n} drafts")
    lo, hi = 0.0, 1.0
    for _ in range(60):  # 2^-60: far below any tolerance used here
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if chain_tau(mid, n) < tau else (lo, mid)
    return (lo + hi) / 2


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Measurement(_Frozen):
    """One published number exactly as reported, its configuration, and the alpha solved from it."""

    source: str
    where: str
    target: str
    drafter: str
    dataset: str
    role: Literal["primary", "supporting", "weak"]
    quantity: Literal["tau", "alpha", "speedup"]
    value: float
    convention: str
    config: dict[str, str | int | float]
    n: int | None = Field(default=None, ge=1)
    alpha_basis: Literal["chain", "tree_depth", "direct", "tau_lower_bound"]
    alpha: float = Field(gt=0.0, lt=1.0)
    per_position: tuple[float, ...] | None = None
    note: str | None = None

    @model_validator(mode="after")
    def _alpha_matches_value(self) -> Measurement:
        if self.quantity == "alpha":
            if self.alpha_basis != "direct" or self.alpha != self.value:
                raise ValueError("a reported alpha is used as is (alpha_basis: direct, alpha == value)")
            return self
        expected_basis = ("tau_lower_bound",) if self.quantity == "speedup" else ("chain", "tree_depth")
        if self.alpha_basis not in expected_basis or self.n is None:
            raise ValueError(f"{self.quantity} needs n and alpha_basis in {expected_basis}")
        if abs(chain_tau(self.alpha, self.n) - self.value) > TAU_TOLERANCE:
            raise ValueError(f"alpha={self.alpha} with n={self.n} gives tau={chain_tau(self.alpha, self.n):.4f}, "
                             f"not the reported {self.value}")
        return self


class Derivation(_Frozen):
    """How a derived or assumed entry's alpha follows from other entries and sources."""

    rule: str
    from_: tuple[str, ...] = Field(alias="from")  # "strategy/task/temperature"
    factor: float | None = None


class Entry(_Frozen):
    """One strategy x task x temperature point of the table."""

    strategy: Strategy
    task: Task
    temperature: float = Field(ge=0.0)
    kind: Kind
    alpha: float
    range: tuple[float, float]
    citations: tuple[str, ...] = Field(min_length=1)
    note: str
    derivation: Derivation | None = None
    measurements: tuple[Measurement, ...] = ()

    @model_validator(mode="after")
    def _coherent(self) -> Entry:
        lo, hi = self.range
        if not 0.0 < lo <= self.alpha <= hi < 1.0:
            raise ValueError(f"need 0 < low <= alpha <= high < 1, got {lo} <= {self.alpha} <= {hi}")
        primary = [m for m in self.measurements if m.role == "primary"]
        if self.kind == "published" and (not primary or self.derivation is not None):
            raise ValueError("a published entry has primary measurements and no derivation")
        if self.kind != "published" and self.derivation is None:
            raise ValueError(f"a {self.kind} entry states its derivation")
        return self


class StrategyInfo(_Frozen):
    shape: Literal["chain", "tree"]
    depth: int = Field(ge=1)
    config: dict[str, str | int | float]
    depth_basis: str
    citations: tuple[str, ...]


class Source(_Frozen):
    citation: str
    url: str
    read_via: str


class TreeChainPoint(_Frozen):
    chain_tau: float
    tree_tau: float
    ratio: float


class TreeToChain(_Frozen):
    """Chain alpha / tree-equivalent alpha of one head measured both ways (EAGLE-1 Table 5)."""

    factor: float = Field(gt=0.0, le=1.0)
    min: float = Field(gt=0.0, le=1.0)
    max: float = Field(gt=0.0, le=1.0)
    n: int = Field(ge=1)
    per_model: dict[str, TreeChainPoint]
    rule: str
    check: str
    citations: tuple[str, ...]


class Evidence(_Frozen):
    source: str
    where: str
    observation: str


class TemperatureModel(_Frozen):
    points: tuple[float, ...]
    interpolation: str
    outside: str
    basis: str
    evidence: tuple[Evidence, ...]
    missing_t1: dict[Strategy, str]
    citations: tuple[str, ...]


class PriorFile(_Frozen):
    """The whole of ``priors.yaml``, validated once at the edge."""

    schema_version: Literal[1]
    conventions: dict[str, str | dict[str, str]]
    task_map: dict[str, str]
    tree_to_chain: TreeToChain
    strategies: dict[Strategy, StrategyInfo]
    temperature_model: TemperatureModel
    sources: dict[str, Source]
    entries: tuple[Entry, ...]

    @model_validator(mode="after")
    def _complete_and_cited(self) -> PriorFile:
        cited = {c for e in self.entries for c in e.citations}
        cited |= {m.source for e in self.entries for m in e.measurements}
        cited |= {c for s in self.strategies.values() for c in s.citations}
        cited |= set(self.tree_to_chain.citations) | set(self.temperature_model.citations)
        cited |= {ev.source for ev in self.temperature_model.evidence}
        if unknown := sorted(cited - set(self.sources)):
            raise ValueError(f"citations without a source: {unknown}")
        if unused := sorted(set(self.sources) - cited):
            raise ValueError(f"sources never cited: {unused}")
        keys = [(e.strategy, e.task, e.temperature) for e in self.entries]
        known = set(keys)
        if len(keys) != len(known):
            raise ValueError("duplicate strategy/task/temperature entries")
        wanted = {(s, t, p) for s in STRATEGIES for t in TASKS for p in self.temperature_model.points}
        if missing := sorted(wanted - known):
            raise ValueError(f"missing entries: {missing[:5]}")
        if missing_strategies := sorted(set(STRATEGIES) - set(self.strategies)):
            raise ValueError(f"strategies without a config: {missing_strategies}")
        for entry in self.entries:
            for ref in entry.derivation.from_ if entry.derivation else ():
                s, t, temp = ref.split("/")
                if (s, t, float(temp)) not in known:
                    raise ValueError(f"derivation of {entry.strategy}/{entry.task} names unknown entry {ref}")
        return self


class Prior(_Frozen):
    """Acceptance prior for one strategy, task and temperature, ready for the cost model."""

    alpha: float
    alpha_low: float
    alpha_high: float
    alpha_chain: float  # per-token acceptance for a chain of the same drafter (== alpha for chains)
    shape: Literal["chain", "tree"]  # draft shape the published alpha was measured with
    depth: int  # N in tau = (1 - alpha^(N+1)) / (1 - alpha) for that shape
    per_position: tuple[float, ...] | None
    source: Literal["prior"] = "prior"
    kind: Kind
    citations: tuple[str, ...]
    note: str


def _weakest(*kinds: str) -> str:
    return max(kinds, key=KIND_ORDER.index)


class PriorTable:
    """Lookup over the validated priors; temperatures between published points interpolate."""

    def __init__(self, data: PriorFile) -> None:
        self.data = data
        self._points: dict[tuple[str, str], list[Entry]] = {}
        for entry in data.entries:
            self._points.setdefault((entry.strategy, entry.task), []).append(entry)
        for entries in self._points.values():
            entries.sort(key=lambda e: e.temperature)

    def lookup(self, strategy: str, task: str, temperature: float) -> Prior:
        """Prior for ``strategy`` on ``task`` at ``temperature`` (linear between points, clamped above)."""
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {strategy!r}; known: {', '.join(STRATEGIES)}")
        if task not in TASKS:
            raise ValueError(f"unknown task {task!r}; known: {', '.join(TASKS)}")
        if not math.isfinite(temperature) or temperature < 0:
            raise ValueError(f"temperature must be finite and >= 0, got {temperature}")
        points = self._points[(strategy, task)]
        exact = [e for e in points if e.temperature == temperature]
        if exact:
            return self._prior(strategy, *self._values(exact[0]), exact[0].kind, exact, self._note(exact[0]))
        below = [e for e in points if e.temperature < temperature]
        above = [e for e in points if e.temperature > temperature]
        if above:  # points start at T=0, so a lower neighbour always exists
            a, b = below[-1], above[0]
            w = (temperature - a.temperature) / (b.temperature - a.temperature)
            values = [x + w * (y - x) for x, y in zip(self._values(a), self._values(b), strict=True)]
            note = (f"interpolated at T={temperature:g} between T={a.temperature:g} ({a.kind}) and "
                    f"T={b.temperature:g} ({b.kind}). {self._note(a)} | {self._note(b)}")
            return self._prior(strategy, *values, _weakest(a.kind, b.kind), [a, b], note)
        first, last = points[0], points[-1]
        slope = (first.alpha - last.alpha) / (last.temperature - first.temperature)
        alpha, low, high = self._values(last)
        low = max(ALPHA_FLOOR, min(low, low - slope * (temperature - last.temperature)))
        note = (f"T={temperature:g} is beyond the published T={last.temperature:g}: alpha clamped, "
                f"alpha_low extended along the T={first.temperature:g}..{last.temperature:g} slope. {self._note(last)}")
        return self._prior(strategy, alpha, min(low, alpha), high, _weakest(last.kind, "derived"), [last], note)

    def citations(self) -> tuple[str, ...]:
        """Every source of the table once, in file order, for a recommendation's evidence section."""
        return tuple(f"{s.citation}. {s.url}" for s in self.data.sources.values())

    @staticmethod
    def _values(entry: Entry) -> tuple[float, float, float]:
        return entry.alpha, entry.range[0], entry.range[1]

    @staticmethod
    def _note(entry: Entry) -> str:
        rule = f" Derivation: {entry.derivation.rule}" if entry.derivation else ""
        return f"{entry.note.rstrip('.')}.{rule}"

    def _prior(self, strategy: str, alpha: float, low: float, high: float, kind: str,
               entries: list[Entry], note: str) -> Prior:
        info = self.data.strategies[strategy]
        factor = self.data.tree_to_chain.factor if info.shape == "tree" else 1.0
        return Prior(alpha=alpha, alpha_low=low, alpha_high=high, alpha_chain=alpha * factor, shape=info.shape,
                     depth=info.depth, per_position=_per_position(entries), kind=kind,
                     citations=self._cite(entries), note=note)

    def _cite(self, entries: list[Entry]) -> tuple[str, ...]:
        """Full citation per source, naming the tables each entry's measurements came from."""
        out: list[str] = []
        for key in dict.fromkeys(c for e in entries for c in e.citations):
            where = dict.fromkeys(m.where for e in entries for m in e.measurements if m.source == key)
            text = self.data.sources[key].citation + (f" [{'; '.join(where)}]" if where else "")
            out.append(text)
        return tuple(out)


def _per_position(entries: list[Entry]) -> tuple[float, ...] | None:
    """Element-wise median per-position acceptance of the primary measurements, where all publish it."""
    if len(entries) != 1:
        return None
    rows = [m.per_position for m in entries[0].measurements if m.role == "primary"]
    if not rows or any(r is None for r in rows) or len({len(r) for r in rows if r}) != 1:
        return None
    return tuple(statistics.median(col) for col in zip(*rows, strict=True))


def parse_priors(text: str) -> PriorTable:
    """Validate a priors document (the shipped one or an edited copy) into a table."""
    return PriorTable(PriorFile.model_validate(yaml.safe_load(text)))


# The YAML is the source of truth; priors.json is the same document compiled to JSON, stamped with the
# YAML's SHA-256, because parsing 100 KB of YAML costs ~0.3 s of `specpick recommend`'s start-up.
# A stale or missing JSON falls back to the YAML. Regenerate with `python -m policies.priors`.
def _yaml_text() -> str:
    return resources.files("policies").joinpath("data", "priors.yaml").read_text(encoding="utf-8")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def compile_priors_json() -> str:
    """The JSON twin of priors.yaml, with the YAML's digest."""
    text = _yaml_text()
    return json.dumps({"yaml_sha256": _digest(text), "priors": yaml.safe_load(text)}, separators=(",", ":"))


@functools.lru_cache(maxsize=1)
def load_priors() -> PriorTable:
    """The shipped priors, parsed and validated once per process."""
    text = _yaml_text()
    compiled = resources.files("policies").joinpath("data", "priors.json")
    if compiled.is_file():
        data = json.loads(compiled.read_text(encoding="utf-8"))
        if data.get("yaml_sha256") == _digest(text):
            return PriorTable(PriorFile.model_validate(data["priors"]))
    return parse_priors(text)


if __name__ == "__main__":  # python -m policies.priors: refresh the compiled JSON
    target = resources.files("policies").joinpath("data", "priors.json")
    with resources.as_file(target) as path:
        path.write_text(compile_priors_json() + "\n", encoding="utf-8")
        print(f"wrote {path}")

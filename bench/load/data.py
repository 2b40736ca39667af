"""Published throughput-vs-batch curves (``published_batch.csv`` beside this file) as typed points.

Each CSV row becomes a :class:`Point` in a curve (one figure's line: source, model, method,
hardware, dataset). What the CSV leaves open — hardware variant, draft sizes, EAGLE-1's tree, the
mean cached context of each dataset — is filled in by the ASSUMPTIONS below, each stated once.
Rows measured on SGLang are RESERVED (independent evaluation): they are split off here and never
reach a fit or a threshold.

    >>> pts, skipped = load_points()
    >>> any(p.engine_name.lower().startswith("sglang") for p in pts)
    False
    >>> sorted({p.source for p in pts})[:2]
    ['EAGLE-1 arXiv:2401.15077', 'EAGLE-3 arXiv:2503.01840 (vLLM)']
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path

# The project's collected published rows, kept as they are (each row cites its source; the facts beside
# them are in policies/data/forward_time_facts.md).
CSV_PATH = Path(__file__).with_name("published_batch.csv")

# (pattern in the source column, source key for leave-one-source-out)
SOURCES: tuple[tuple[str, str], ...] = (
    ("vLLM blog 2024-10-17", "vLLM blog 2024-10-17"),
    ("arXiv:2601.11580", "arXiv:2601.11580"),
    ("EAGLE-3 arXiv:2503.01840", "EAGLE-3 arXiv:2503.01840 (vLLM)"),
    ("EAGLE-1 arXiv:2401.15077", "EAGLE-1 arXiv:2401.15077"),
    ("DSpark", "vLLM DSpark blog 2026-08-14"),
    ("MagicDec", "MagicDec arXiv:2408.11049"),
    ("TensorRT-LLM tech blog 7", "TensorRT-LLM blog 7"),
    ("TRT-LLM blog7", "TensorRT-LLM blog 7"),
    ("vLLM PR #48944", "vLLM PR #48944"),
    ("vLLM issue #49548", "vLLM issue #49548"),
    ("vLLM PR #35301", "vLLM PR #35301"),
    ("SGLang docs", "SGLang docs"),
)
# ASSUMPTION: mean cached tokens per sequence during decode (prompt + half the output), rounded;
# the sources state datasets, not lengths. MagicDec states its prefill length.
DATASET_CONTEXT: tuple[tuple[str, int], ...] = (
    ("gsm8k", 300), ("sharegpt", 500), ("instructcoder", 600), ("cnn/dailymail", 900),
    ("mt-bench", 500), ("magpie", 1000),
)
# ASSUMPTION: hardware spelled in the CSV -> (catalog name, devices). EAGLE-3's Table 5 names an
# RTX 3090 in the text and an A100 in one caption: the text is taken.
HARDWARE: tuple[tuple[str, str], ...] = (
    ("rtx3090", "rtx-3090"), ("a100-40g", "a100-40gb"), ("a100", "a100-80gb"), ("h100 nvl", "h100-nvl"),
    ("h100", "h100-sxm"), ("b200", "b200"), ("b300", "b300"),
)
# ASSUMPTION: draft sizes the rows name or imply. The 70B draft of arXiv:2601.11580 (its Table 5)
# is taken to be Llama-3.2-1B, consistent with its "draft forward ~12.5% of the target's".
DRAFTS: tuple[tuple[str, float], ...] = (
    ("qwama-0.5b", 0.5e9), ("qwen3-0.6b", 0.6e9), ("tinyllama-1.1b", 1.1e9), ("llama-3.2-1b", 1.24e9),
)
DEFAULT_70B_DRAFT = 1.24e9
# ASSUMPTION: StreamingLLM draft KV window of MagicDec's self-speculation (a few hundred tokens).
STREAMING_WINDOW = 512
# ASSUMPTION: EAGLE-1's reference tree (paper Fig. 9): 25 nodes + root, depth 5.
EAGLE1_TREE = (25, 5)
MODEL_PARAMS: tuple[tuple[str, float], ...] = (
    ("70b", 70.6e9), ("qwen3-8b", 8.19e9), ("8b", 8.03e9), ("7b", 6.74e9), ("31b", 31e9),
)


@dataclass(frozen=True)
class Point:
    """One published point, mapped to what the cost model needs."""

    source: str  # leave-one-source-out key
    curve: str  # points of one line in one figure
    engine_name: str  # the CSV's engine column, verbatim
    engine: str  # loadcurve engine section
    hardware: str
    devices: int
    model_params: float
    kind: str  # DraftCost: draft_model | target_layer | cpu_lookup
    draft_params: float | None
    k: int  # tokens drafted per step (tree nodes for a tree)
    tree_depth: int | None
    x: float  # batch size, concurrency, or QPS
    x_kind: str  # "batch" | "qps"
    context_len: int
    draft_context_len: int | None
    value: float
    latency_noSD_s: float | None  # QPS points: the plain system's latency read off the same bars


def _source(text: str) -> str:
    for pattern, key in SOURCES:
        if pattern in text:
            return key
    return text.split(" ")[0]


def _lookup(text: str, table: tuple[tuple[str, float], ...] | tuple[tuple[str, int], ...]) -> float | None:
    low = text.lower()
    for key, value in table:
        if key in low:
            return value
    return None


def _hardware(text: str) -> tuple[str, int]:
    low = text.lower().replace(" ", "")
    devices = int(m.group(1)) if (m := re.match(r"(\d+)x", low)) else 1
    for key, name in HARDWARE:
        if key.replace(" ", "") in low:
            return name, devices
    return low, devices


def _kind(method: str) -> str | None:
    low = method.lower()
    if "eagle" in low:
        return "target_layer"
    if "n-gram" in low:
        return "cpu_lookup"
    if "draft" in low or "self-spec" in low or "tinyllama" in low:
        return "draft_model"
    return None


def _k(config: str) -> int | None:
    m = re.search(r"(?:k=|len(?:gth)? |spec len )(\d+)", config, re.IGNORECASE)
    return int(m.group(1)) if m else None


def _engine(engine: str) -> str:
    low = engine.lower()
    if low.startswith("sglang"):
        return "sglang"
    if "tensorrt" in low:
        return "tensorrt_llm"
    if "magicdec" in low:
        return "gpt_fast"
    if "eagle ref" in low:
        return "hf"
    return "vllm"


def _context(row: dict[str, str]) -> int:
    m = re.search(r"(?:prefill|ctx) (\d+)", row["notes"])
    if m:
        return int(m.group(1))
    text = f"{row['notes']} {row['source']}"
    return int(_lookup(text, DATASET_CONTEXT) or 500)


def _point(row: dict[str, str], dataset: str) -> Point | str:
    """A Point, or the reason the row is not a predictable throughput point."""
    source = _source(row["source"])
    if "moe" in row["model_params"].lower():
        return "mixture-of-experts model: active parameters not modelled"
    if "overhead" in row["metric"].lower():
        return "TPOT overhead at K=0: the data the spec_overhead constants are fitted to"
    kind = _kind(row["method"])
    if kind is None:
        return f"method {row['method']!r} not modelled"
    hardware, devices = _hardware(row["hardware"])
    tree = "tree" in row["draft_config"].lower()
    k, depth = EAGLE1_TREE if tree else (_k(row["draft_config"]), None)
    if k is None:
        return f"no draft length in {row['draft_config']!r}"
    params = _lookup(row["model"] + " " + row["model_params"], MODEL_PARAMS)
    if params is None:
        return f"model size {row['model_params']!r} unknown"
    draft = _lookup(f"{row['method']} {row['draft_config']}", DRAFTS) if kind == "draft_model" else None
    self_spec = "self-spec" in row["method"].lower()
    if kind == "draft_model" and draft is None:
        draft = params if self_spec else DEFAULT_70B_DRAFT
    x_text = row["batch_or_concurrency"]
    m = re.search(r"(\d+)", x_text)
    x = float(m.group(1)) if m else 1.0
    x_kind = "qps" if x_text.lower().startswith("qps") else "batch"
    lat = re.search(r"(\d+\.\d+)s", row["notes"])
    figure = re.search(r"(Fig\.\s?\d+\w?|Table \d+|\d+x\w+(?:_SXM)? table)", row["source"])
    # One line of one figure: keyed on what was parsed, not on how each row happens to spell it.
    curve = "; ".join(str(v) for v in (
        source, figure.group(1) if figure else "", row["model"].split("(")[0], kind,
        row["method"].split()[0] if kind == "target_layer" else "",  # EAGLE-1 vs EAGLE-3
        f"draft {draft:.3g}" if draft else "", f"{devices}x{hardware}", dataset) if v)
    # MagicDec's drafts all keep a StreamingLLM KV window (self-speculation and TinyLlama alike).
    streaming = source.startswith("MagicDec")
    return Point(
        source, curve, row["engine"], _engine(row["engine"]), hardware, devices, params, kind, draft,
        k, depth, x, x_kind, _context(row), STREAMING_WINDOW if streaming else None,
        float(row["value"].strip("~+%")), float(lat.group(1)) if lat and x_kind == "qps" else None,
    )


def _dataset(notes: str) -> str | None:
    low = notes.lower()
    if m := re.search(r"prefill \d+", low):
        return m.group(0)
    return next((k for k, _ in DATASET_CONTEXT if k in low), None)


def load_points(path: Path = CSV_PATH) -> tuple[list[Point], list[tuple[str, str, str]]]:
    """Predictable non-SGLang points, and (source, row summary, reason) for every row left out."""
    points: list[Point] = []
    skipped: list[tuple[str, str, str]] = []
    dataset, figure = "", ""
    with open(path, newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            # A figure names its dataset on its first rows only; it carries to the figure's others.
            here = re.search(r"(Fig\.\s?\d+\w?|Table \d+|\d+x\w+ table)", row["source"])
            key = f"{_source(row['source'])} {here.group(1) if here else ''}"
            named = _dataset(row["notes"])
            dataset = named or (dataset if key == figure else "")
            figure = key
            summary = f"{row['model']} {row['method']} {row['draft_config']} {row['batch_or_concurrency']}"
            if row["engine"].lower().startswith("sglang"):
                skipped.append((_source(row["source"]), summary, "RESERVED: measured on SGLang"))
                continue
            got = _point({**row, "notes": f"{row['notes']} {dataset}"}, dataset)
            if isinstance(got, str):
                skipped.append((_source(row["source"]), summary, got))
            else:
                points.append(got)
    return points, skipped

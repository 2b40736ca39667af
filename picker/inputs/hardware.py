"""Hardware catalog: the accelerator figures the cost model (a roofline) needs.

Each entry gives peak memory bandwidth, dense BF16 tensor throughput (no 2:4 sparsity) and
memory capacity, from the vendor's datasheet or whitepaper, with the source written in the entry.
Peak figures are upper bounds: real kernels reach roughly 70-90 % of peak bandwidth and less of
peak compute, and the cost model is responsible for that derating, not this table.

    >>> from picker.inputs.hardware import get_hardware
    >>> hw = get_hardware("H100")            # aliases are case- and separator-tolerant
    >>> hw.name, hw.memory_bandwidth_gbps, hw.bf16_tflops
    ('h100-sxm', 3350.0, 989.0)
    >>> round(hw.memory_bandwidth_gbps * 1e9 / (hw.bf16_tflops * 1e12), 5)  # bytes per FLOP
    0.00339

Units: ``memory_bandwidth_gbps`` is GB/s with GB = 1e9 bytes (vendors quote decimal units);
``bf16_tflops`` is 1e12 FLOP/s, counting a fused multiply-add as two FLOPs; ``memory_gib`` is the
vendor's nominal capacity (HBM and GDDR parts are built in binary sizes, so "80 GB" is 80 GiB;
the driver reports a little less as usable).
"""

from __future__ import annotations

from dataclasses import dataclass

from picker.errors import UserError


@dataclass(frozen=True)
class Hardware:
    """One accelerator (or a generic CPU server), per device: tensor parallelism multiplies."""

    name: str                     # catalog key, e.g. "h100-sxm"
    description: str              # human-readable product name and variant
    memory_bandwidth_gbps: float  # peak DRAM/HBM bandwidth, GB/s (1 GB = 1e9 bytes)
    bf16_tflops: float            # peak dense BF16 tensor throughput (FP32 accumulate), TFLOP/s
    memory_gib: float             # device memory capacity, GiB (vendor's nominal figure)
    source: str                   # where the figures come from


def _entry(name: str, description: str, bw: float, tflops: float, mem: float, source: str) -> Hardware:
    return Hardware(name, description, bw, tflops, mem, source)


_ENTRIES: tuple[Hardware, ...] = (
    # NVIDIA H100 Tensor Core GPU datasheet, SXM column: 3.35 TB/s HBM3, BF16 Tensor Core 1,979 TFLOPS
    # "with sparsity" -> 989 dense, 80 GB.
    _entry("h100-sxm", "NVIDIA H100 SXM5 80GB", 3350.0, 989.0, 80.0,
           "NVIDIA H100 datasheet (SXM): 3.35 TB/s, BF16 1979 TFLOPS with sparsity = 989 dense"),
    # Same datasheet, PCIe column (the 80 GB PCIe card; the H100 NVL variant differs): 2.0 TB/s HBM2e,
    # BF16 1,513 TFLOPS with sparsity -> 756 dense.
    _entry("h100-pcie", "NVIDIA H100 PCIe 80GB", 2000.0, 756.0, 80.0,
           "NVIDIA H100 datasheet (PCIe): 2.0 TB/s, BF16 1513 TFLOPS with sparsity = 756 dense"),
    # NVIDIA H200 datasheet, SXM: 141 GB HBM3e at 4.8 TB/s; same GH100 compute as H100 SXM.
    _entry("h200", "NVIDIA H200 SXM 141GB", 4800.0, 989.0, 141.0,
           "NVIDIA H200 datasheet (SXM): 4.8 TB/s, 141 GB, BF16 1979 TFLOPS with sparsity = 989 dense"),
    # NVIDIA HGX B200 figures (1,000 W configuration): 8 TB/s HBM3e per GPU, FP16/BF16 dense 2.25 PFLOPS
    # (4.5 with sparsity), 180 GB per GPU (1,440 GB per 8-GPU board). The GB200 (1,200 W) part is
    # faster (2.5 PFLOPS dense); we list the HGX part people rent.
    _entry("b200", "NVIDIA B200 (HGX, 1000 W) 180GB", 8000.0, 2250.0, 180.0,
           "NVIDIA HGX B200 datasheet: 8 TB/s, 180 GB per GPU, BF16 4.5 PFLOPS with sparsity "
           "= 2.25 dense"),
    # NVIDIA A100 datasheet: 40 GB HBM2 at 1,555 GB/s; BF16 Tensor Core 312 TFLOPS dense (624 sparse).
    _entry("a100-40gb", "NVIDIA A100 40GB (SXM4/PCIe)", 1555.0, 312.0, 40.0,
           "NVIDIA A100 datasheet (40GB): 1555 GB/s, BF16 312 TFLOPS dense"),
    # Same datasheet, 80 GB SXM: HBM2e at 2,039 GB/s (the 80 GB PCIe card is 1,935 GB/s).
    _entry("a100-80gb", "NVIDIA A100 80GB SXM4", 2039.0, 312.0, 80.0,
           "NVIDIA A100 datasheet (80GB SXM): 2039 GB/s, BF16 312 TFLOPS dense"),
    # NVIDIA L40S datasheet: 48 GB GDDR6 at 864 GB/s; BF16 Tensor Core 362.05 TFLOPS dense (733 sparse).
    _entry("l40s", "NVIDIA L40S 48GB", 864.0, 362.05, 48.0,
           "NVIDIA L40S datasheet: 864 GB/s, BF16 362.05 TFLOPS dense (733 with sparsity)"),
    # The A10G is an AWS-only variant of the A10 (EC2 G5). Memory is documented (24 GB GDDR6,
    # 600 GB/s, same as the A10); NVIDIA publishes no A10G datasheet. Its tensor throughput is lower
    # than the A10's 125 dense TFLOPS: AWS and third-party comparisons put it at about 70 TFLOPS
    # FP16/BF16 dense. Treat 70 as uncertain (+/- 15 %); decode is bandwidth-bound on this part anyway.
    _entry("a10g", "NVIDIA A10G 24GB (AWS G5)", 600.0, 70.0, 24.0,
           "AWS EC2 G5 / third-party A10 vs A10G comparisons: 600 GB/s; ~70 TFLOPS BF16 dense "
           "(uncertain: no NVIDIA datasheet for the A10G)"),
    # NVIDIA Ada Lovelace architecture whitepaper (GeForce RTX 4090 column): 1,008 GB/s GDDR6X;
    # Peak BF16 Tensor TFLOPS with FP32 accumulate 165.2 dense (330.4 sparse). BF16 always
    # accumulates in FP32 on tensor cores; 330.3 is FP16 with FP16 accumulate, and 82.6 is the
    # non-tensor FP32 shader rate. Neither of those is the figure for a BF16 model.
    _entry("rtx-4090", "NVIDIA GeForce RTX 4090 24GB", 1008.0, 165.2, 24.0,
           "NVIDIA Ada Lovelace whitepaper (RTX 4090): 1008 GB/s, BF16 tensor (FP32 accumulate) "
           "165.2 TFLOPS dense"),
    # NVIDIA Ampere GA102 whitepaper (GeForce RTX 3090 appendix): 936 GB/s GDDR6X; Peak BF16 Tensor
    # TFLOPS with FP32 accumulate 71 dense (142 sparse). FP16 with FP16 accumulate is 142 dense;
    # 35.6 is the non-tensor FP32 shader rate.
    _entry("rtx-3090", "NVIDIA GeForce RTX 3090 24GB", 936.0, 71.0, 24.0,
           "NVIDIA Ampere GA102 whitepaper (RTX 3090): 936 GB/s, BF16 tensor (FP32 accumulate) "
           "71 TFLOPS dense"),
    # ASSUMPTION, not a product: one socket of a current x86 server with 8 channels of DDR5-4800
    # (8 x 38.4 GB/s = 307 GB/s theoretical) and 256 GiB of RAM. 10 TFLOPS BF16 is a modest
    # figure for ~48-64 cores with AVX-512 BF16 or AMX; it matters little because CPU decode is
    # bandwidth-bound. Edit a copy of this entry for your own machine.
    _entry("cpu", "Generic 1-socket DDR5 server (assumed: 8x DDR5-4800, 256 GiB)", 307.0, 10.0, 256.0,
           "assumption: 8 channels x DDR5-4800 = 307 GB/s theoretical; 10 TFLOPS BF16 is a modest "
           "AMX/AVX-512 estimate, not a measured figure"),
)

CATALOG: dict[str, Hardware] = {hw.name: hw for hw in _ENTRIES}

# Extra spellings people type; keys are already normalized (lower case, '-' as separator).
# A bare "h100" means the SXM part because that is what most H100 serving runs on; a bare
# "a100" means the 80 GB part for the same reason. Those family names are AMBIGUOUS: resolving one
# comes with a note saying which part was assumed and how to name the other.
ALIASES: dict[str, str] = {
    "h100": "h100-sxm",
    "h100-sxm5": "h100-sxm",
    "h100-80gb": "h100-sxm",
    "h200-sxm": "h200",
    "b200-sxm": "b200",
    "a100": "a100-80gb",
    "a100-80gb-sxm": "a100-80gb",
    "a100-sxm": "a100-80gb",
    "a100-40": "a100-40gb",
    "a100-80": "a100-80gb",
    "l40-s": "l40s",
    "4090": "rtx-4090",
    "rtx4090": "rtx-4090",
    "geforce-rtx-4090": "rtx-4090",
    "3090": "rtx-3090",
    "rtx3090": "rtx-3090",
    "geforce-rtx-3090": "rtx-3090",
}


# Family names that cover more than one catalog part -> what to write for the part not assumed.
AMBIGUOUS: dict[str, str] = {
    "h100": "write h100-pcie for the PCIe card",
    "h100-80gb": "write h100-pcie for the PCIe card (both are 80 GB)",
    "a100": "write a100-40gb for the 40 GB part",
    "a100-sxm": "write a100-40gb for the 40 GB SXM part",
}


def _normalize(name: str) -> str:
    """Lower-case and unify separators, so 'H100_SXM', 'h100 sxm' and 'h100-sxm' agree."""
    return "-".join(name.strip().lower().replace("_", "-").split()).replace("--", "-")


def resolve_hardware_name(name: str) -> str | None:
    """Return the catalog key for ``name`` (an exact key or an alias), or None if unknown."""
    key = _normalize(name)
    if key in CATALOG:
        return key
    return ALIASES.get(key)


def hardware_note(name: str) -> str | None:
    """What was assumed when ``name`` is a family name covering several parts, else None.

    >>> hardware_note("H100")
    "'H100' names more than one part: assumed h100-sxm (NVIDIA H100 SXM5 80GB); write h100-pcie for the PCIe card"
    >>> hardware_note("h100-sxm") is None
    True
    """
    key = _normalize(name)
    if key not in AMBIGUOUS:
        return None
    part = CATALOG[ALIASES[key]]
    return f"{name.strip()!r} names more than one part: assumed {part.name} ({part.description}); {AMBIGUOUS[key]}"


def get_hardware(name: str) -> Hardware:
    """Look up a catalog entry by name or alias; raise :class:`UserError` listing the names."""
    key = resolve_hardware_name(name)
    if key is None:
        allowed = ", ".join(CATALOG)
        raise UserError(f"unknown hardware {name!r}; must be one of {allowed}")
    return CATALOG[key]

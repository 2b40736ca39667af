"""The GEMM knee (``knee_p``) against vLLM PR #49363's H100 bf16 GEMM times: a check.

    $ python -m bench.load.knee

The PR times two gemma-4-31B GEMM shapes at M = 1 … 256 tokens (``policies/data/forward_time_facts.md``).
Each GEMM is modelled as ``softmax_p(weight streaming, FLOPs) + activation streaming`` on an H100 SXM
(3.35 TB/s, 989 dense TFLOP/s). :func:`check` takes the shipped p (fitted to whole forwards on an
H200, ``python -m bench.load.h200``) and fits only the two efficiencies of one large GEMM (upper
bounds for a whole model's forward, never carried over); :func:`fit` also searches p, which is how
p was set before the H200 timings (3, at 1.7% mean |log error|).
"""

from __future__ import annotations

import itertools
import math

from policies.loadcurve import engine_curve, softmax_p

BANDWIDTH, FLOPS = 3.35e12, 989e12  # H100 SXM datasheet (picker.inputs.hardware)
# (N, K) -> [(M tokens, microseconds)], vLLM PR #49363
POINTS: dict[tuple[int, int], list[tuple[int, float]]] = {
    (12288, 5376): [(1, 46.0), (16, 45.4), (64, 46.3), (128, 48.0)],
    (43008, 5376): [(1, 150.5), (16, 153.1), (64, 157.4), (128, 162.3), (256, 199.5)],
}


def predict(n: int, k: int, m: int, bw_eff: float, gemm_eff: float, p: float) -> float:
    """Microseconds of an (M×K)·(K×N) bf16 GEMM."""
    weights = n * k * 2 / (BANDWIDTH * bw_eff)
    activations = m * (n + k) * 2 / (BANDWIDTH * bw_eff)
    compute = 2 * n * k * m / (FLOPS * gemm_eff)
    return (softmax_p(weights, compute, p) + activations) * 1e6


def fit(ps: tuple[float, ...] = (1, 1.5, 2, 2.5, 3, 3.5, 4, 5, 6, 8)) -> tuple[float, float, float, float]:
    """(mean |log error|, streaming efficiency, GEMM efficiency, p) of the best grid point, p in ``ps``."""
    best = (math.inf, 0.0, 0.0, 0.0)
    for bw, ge, p in itertools.product([x / 100 for x in range(70, 101)], [x / 100 for x in range(40, 101, 2)], ps):
        errs = [abs(math.log(predict(n, k, m, bw, ge, p) / t)) for (n, k), pts in POINTS.items() for m, t in pts]
        best = min(best, (sum(errs) / len(errs), bw, ge, p))
    return best


def check() -> tuple[float, float, float, float]:
    """:func:`fit` at the shipped ``knee_p`` only."""
    return fit((engine_curve("vllm").knee_p,))


def main() -> None:
    for label, (err, bw, ge, p) in (("shipped", check()), ("free", fit())):
        print(f"{label}: knee_p = {p:.4g} (streaming efficiency {bw:.2f}, GEMM efficiency {ge:.2f}): "
              f"mean |log error| {err:.1%}")
    err, bw, ge, p = check()
    for (n, k), pts in POINTS.items():
        for m, t in pts:
            print(f"  N={n} K={k} M={m:4d}: measured {t:6.1f} us, shipped p {predict(n, k, m, bw, ge, p):6.1f} us")


if __name__ == "__main__":
    main()

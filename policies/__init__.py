"""The policy room's public surface: what ``picker.recommend`` and ``picker.sdk`` may use.

Names are re-exported from the modules that define them and imported on first use (PEP 562), so
``import policies`` stays free: numpy and scikit-learn load only when a name that needs them is
touched (``load_policy``, ``SpeedupEstimator``, ``feature_matrix`` ...).

    >>> from policies import chain, chain_length
    >>> chain(4).depth, round(chain_length(0.5, 4), 4)
    (4, 1.9375)

Submodules stay importable for the benches and tests that study the internals; the application
layers (``picker.recommend``, ``picker.sdk``) import only from here (tests/test_policies_api.py).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# public name -> defining module (policies.<module>)
_EXPORTS: dict[str, str] = {
    # the analytic cost model of one configuration
    "Config": "analytic", "CostContext": "analytic", "chain": "analytic", "configs_for": "analytic",
    "config_cost": "analytic", "speedup": "analytic", "break_even": "analytic", "expected_length": "analytic",
    # step costs and shapes
    "StepCost": "costmodel", "estimate": "estimation", "eagle_layer_shape": "costmodel",
    "medusa_heads_shape": "costmodel", "ModelShape": "roofline",
    # evidence and candidate rows
    "Candidate": "evidence", "CostEvidence": "evidence", "Evidence": "evidence",
    # the core speedup model of one candidate row, and its numeric encoding for the learned correction
    "base_range": "speedup_model", "base_speedup": "speedup_model", "step_ratio": "speedup_model",
    "HELD_OUT_ERROR": "speedup_model", "HELD_OUT_SHARE": "speedup_model", "CPU_HELD_OUT_ERROR": "speedup_model",
    "feature_matrix": "encoding",
    "evidence_from_cell": "cell_evidence", "live_step_points": "cell_evidence",
    "load_priors": "priors",
    # the fitted policy
    "Policy": "artifacts", "load_policy": "artifacts", "SpeedupEstimator": "estimator",
    # closed forms and the online controller's rules
    "chain_length": "scalar", "solve_alpha": "scalar", "tree_length": "scalar",
    "JEFFREYS": "online", "OnlineParams": "online", "beta_quantile": "online", "beta_var": "online",
    "break_even_from_ratio": "online", "chain_evidence": "online", "decayed_update": "online",
    "gate_next": "online",
    # E[L] of a chain, and the forward-time curve an engine (optionally calibrated) runs on
    "expected_length_iid": "theory", "engine_curve": "loadcurve", "load_calibration": "calibration",
    "Calibration": "calibration", "calibration_for": "calibration",
    # latency (TTFT, ITL, TPOT) from the same step costs
    "Latency": "latency_model", "Share": "latency_model", "latency": "latency_model",
    "pooled_latency": "latency_model", "prefill_seconds": "latency_model", "plain_step_seconds": "latency_model",
}

__all__ = [  # every key of _EXPORTS (tests/test_recommend_pipeline.py checks they agree)
    "CPU_HELD_OUT_ERROR", "Calibration", "Candidate", "Config", "CostContext", "CostEvidence", "Evidence",
    "HELD_OUT_ERROR", "HELD_OUT_SHARE", "JEFFREYS", "Latency",
    "ModelShape", "OnlineParams", "Policy", "Share", "SpeedupEstimator", "StepCost", "base_range", "base_speedup",
    "beta_quantile", "beta_var", "break_even", "break_even_from_ratio", "calibration_for", "chain",
    "chain_evidence", "chain_length", "config_cost", "configs_for", "decayed_update", "eagle_layer_shape",
    "engine_curve", "estimate", "evidence_from_cell", "expected_length", "expected_length_iid", "feature_matrix",
    "gate_next", "latency",
    "live_step_points", "load_calibration", "load_policy", "load_priors", "medusa_heads_shape",
    "plain_step_seconds", "pooled_latency", "prefill_seconds", "solve_alpha", "speedup", "step_ratio", "tree_length",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'policies' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"policies.{module}"), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:  # the same names, for type checkers
    from policies.analytic import (
        Config,
        CostContext,
        break_even,
        chain,
        config_cost,
        configs_for,
        expected_length,
        speedup,
    )
    from policies.artifacts import Policy, load_policy
    from policies.calibration import Calibration, calibration_for, load_calibration
    from policies.cell_evidence import evidence_from_cell, live_step_points
    from policies.costmodel import (
        StepCost,
        eagle_layer_shape,
        medusa_heads_shape,
    )
    from policies.estimation import estimate
    from policies.estimator import SpeedupEstimator
    from policies.encoding import feature_matrix
    from policies.evidence import Candidate, CostEvidence, Evidence
    from policies.latency_model import (
        Latency,
        Share,
        latency,
        plain_step_seconds,
        pooled_latency,
        prefill_seconds,
    )
    from policies.loadcurve import engine_curve
    from policies.online import (
        JEFFREYS,
        OnlineParams,
        beta_quantile,
        beta_var,
        break_even_from_ratio,
        chain_evidence,
        decayed_update,
        gate_next,
    )
    from policies.priors import load_priors
    from policies.roofline import ModelShape
    from policies.scalar import chain_length, solve_alpha, tree_length
    from policies.speedup_model import CPU_HELD_OUT_ERROR, HELD_OUT_ERROR, HELD_OUT_SHARE, base_range, base_speedup, step_ratio
    from policies.theory import expected_length_iid

"""What a plan was asked, as every rendering opens with it: the profile as loaded (with each default
it used and how a family hardware name was resolved) and the evidence the numbers rest on.

    >>> from picker.inputs.workload import load_profile
    >>> asked = plan_inputs(load_profile("profiles/chat-70b-h100.yaml"), acceptance="prior",
    ...                     step_costs="modelled")                                   # doctest: +SKIP
    >>> asked.hardware.gpu, asked.engine.version, asked.defaults_applied               # doctest: +SKIP
    ('h100-sxm', '0.5.23', [])

:func:`lines` writes the block as label / text pairs, the one wording the markdown plan, the
report page and ``--explain`` share.
"""

from __future__ import annotations

from picker.inputs.workload import WorkloadProfile
from picker.recommend.contract import (
    ConcurrencyInput,
    DefaultUsed,
    EngineInput,
    EvidenceInput,
    HardwareInput,
    ModelInput,
    PlanInputs,
    SloInput,
    TemperatureInput,
    TrafficInput,
)

_SHAPE_GIVEN = "given in the profile"


def plan_inputs(profile: WorkloadProfile, *, file: str = "", acceptance: str, step_costs: str,
                measurements: str | None = None, calibration: str | None = None,
                policy: str | None = None) -> PlanInputs:
    """The inputs block of ``profile``'s plan; ``acceptance`` and ``step_costs`` as the evidence states them."""
    defaults = {d.field: d for d in profile.defaults_applied}
    shape = profile.model_shape()
    model_note = defaults.get("model")
    shape_from = model_note.why if model_note else (
        _SHAPE_GIVEN + ("; parameters estimated from it" if shape.params_estimated else ""))
    hw, gpu_note = profile.hardware, defaults.get("hardware.gpu")
    t = profile.traffic
    d = profile.drafters
    return PlanInputs(
        name=profile.name, description=profile.description.strip(), file=file,
        model=ModelInput(name=profile.model.name, params_b=round(shape.params / 1e9, 2), dtype=shape.dtype,
                         shape_from=shape_from),
        hardware=HardwareInput(gpu=hw.gpu, count=hw.count, memory_gib=hw.spec.memory_gib,
                               note=gpu_note.why if gpu_note else None),
        engine=EngineInput(name=profile.engine.name, version=profile.engine.version,
                           version_default="engine.version" in defaults),
        traffic=TrafficInput(
            task_mix={k: float(v) for k, v in t.task_mix.items() if v > 0},
            concurrency=[ConcurrencyInput(min_batch=c.low, max_batch=c.high, weight=c.weight) for c in t.concurrency],
            temperature=[TemperatureInput(value=p.value, weight=p.weight) for p in t.temperature],
            prompt_tokens=round(t.prompt_tokens.expected(), 1), output_tokens=round(t.output_tokens.expected(), 1)),
        slo=SloInput(**profile.slo.model_dump()),
        drafters=_drafters(profile), disabled=sorted(n for n in d.named_strategies() if d.disabled_by(n)),
        memory_headroom_gib=profile.memory_headroom_gib,
        evidence=EvidenceInput(acceptance=acceptance, step_costs=step_costs,  # type: ignore[arg-type]
                               measurements=measurements, calibration=calibration, policy=policy),
        defaults_applied=[DefaultUsed(field=a.field, value=a.value, why=a.why) for a in profile.defaults_applied])


def _drafters(profile: WorkloadProfile) -> list[str]:
    d, out = profile.drafters, []
    if d.draft_model is not None:
        out.append(f"draft model {d.draft_model.name} ({d.draft_model.params_b:g}B)")
    if d.eagle3_head is not None:
        out.append(f"EAGLE-3 head {d.eagle3_head.name or d.eagle3_head.path}")
    if d.medusa_heads is not None:
        out.append(f"{d.medusa_heads.num_heads} Medusa heads {d.medusa_heads.name or d.medusa_heads.path}")
    if d.mtp is not None:
        where = "in the checkpoint" if d.mtp.builtin else (d.mtp.name or d.mtp.path)
        out.append(f"{d.mtp.modules} MTP module{'s' if d.mtp.modules != 1 else ''} ({where})")
    if d.training_budget_gpu_hours > 0:
        out.append(f"a training budget of {d.training_budget_gpu_hours:g} GPU-hours for heads")
    return out


def _share(w: float) -> str:
    return f"{w:.0%}"


def _batches(c: ConcurrencyInput) -> str:
    return str(c.min_batch) if c.min_batch == c.max_batch else f"{c.min_batch}-{c.max_batch}"


def traffic_text(t: TrafficInput) -> str:
    """The traffic in one line: task mix, concurrency, temperatures and token lengths."""
    mix = ", ".join(f"{task} {_share(w)}" for task, w in t.task_mix.items())
    one = len(t.concurrency) == 1
    conc = (_batches(t.concurrency[0]) if one
            else ", ".join(f"{_batches(c)} ({_share(c.weight)})" for c in t.concurrency))
    temps = f"{t.temperature[0].value:g}" if len(t.temperature) == 1 else \
        ", ".join(f"{p.value:g} ({_share(p.weight)})" for p in t.temperature)
    return (f"{mix}; concurrency {conc} sequences; temperature {temps}; prompts {t.prompt_tokens:g} and "
            f"outputs {t.output_tokens:g} tokens on average")


def slo_text(s: SloInput) -> str:
    parts = [f"{label} ≤ {v:g} ms" for label, v in (("time to first token (TTFT)", s.ttft_ms),
                                                     ("median inter-token latency (ITL)", s.itl_p50_ms),
                                                     ("p99 inter-token latency (ITL)", s.itl_p99_ms),
                                                     ("mean time per output token (TPOT)", s.tpot_ms)) if v is not None]
    return "; ".join(parts) or "none"


_ACCEPTANCE = {"prior": "published priors (cited under Evidence)", "measured": "measured",
               "mixed": "measured where the measurements cover it, published priors elsewhere"}
_COSTS = {"measured": "measured", "calibrated": "the load curve, calibrated on this machine's forwards",
          "modelled": "the shipped load curve (a cost model; `specpick calibrate` fits it to your GPU)"}


def evidence_text(e: EvidenceInput) -> str:
    files = [f"{what} {path}" for what, path in (("measurements", e.measurements), ("calibration", e.calibration),
                                                 ("policy", e.policy)) if path]
    return (f"acceptance from {_ACCEPTANCE[e.acceptance]}; step costs from {_COSTS[e.step_costs]}"
            + (f"; files: {', '.join(files)}" if files else "; no measurement, calibration or policy file given"))


def lines(asked: PlanInputs) -> list[tuple[str, str]]:
    """(label, text) for each input, in the order every rendering shows them."""
    m, hw, e = asked.model, asked.hardware, asked.engine
    hardware = f"{hw.count}x {hw.gpu} ({hw.memory_gib:g} GiB each)" + (f"; {hw.note}" if hw.note else "")
    version = " (the version specpick's configs are written for)" if e.version_default else ""
    out = [
        ("Model", f"{m.name}, {m.params_b:g}B parameters, {m.dtype}; shape "
                  + (m.shape_from if m.shape_from.startswith(_SHAPE_GIVEN) else f"from {m.shape_from}")),
        ("Hardware", hardware),
        ("Engine", f"{e.name} {e.version}{version}"),
        ("Traffic", traffic_text(asked.traffic)),
        ("SLOs", slo_text(asked.slo)),
        ("Drafters", "; ".join(asked.drafters) or "none (only strategies that need no draft model or heads)"),
        ("Memory headroom", f"{asked.memory_headroom_gib:g} GiB per accelerator for drafts and heads"),
        ("Evidence", evidence_text(asked.evidence)),
    ]
    if asked.disabled:
        out.insert(6, ("Left out", ", ".join(asked.disabled)))
    return out


def default_lines(asked: PlanInputs) -> list[str]:
    """Each default the profile used, as ``field = value (why)``."""
    return [f"{d.field} = {d.value} ({d.why})" for d in asked.defaults_applied]

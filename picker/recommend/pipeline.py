"""`specpick recommend` in one straight line: inputs → evidence index and cost source → scored
table → decision → one :class:`~picker.recommend.result.Result` every rendering reads.

    >>> from picker.inputs.workload import load_profile
    >>> result = recommend(load_profile("profiles/code-assistant-8b-a100.yaml"))          # doctest: +SKIP
    >>> result.recommendation.decision.strategy, result.recommendation.predicted_speedup.mean  # doctest: +SKIP
    ('eagle3', 2.544)

:func:`load_inputs` reads what a command names (profile, measurements with their provenance
check, the verify curve beside them, a calibration file, a policy artifact and whether its domain
covers the deployment) once, for ``specpick recommend`` and ``specpick report`` alike;
:func:`recommend` is the one place a Recommendation is built. The SDK plan and the regret evaluation
call it too (with its own options and engine curve).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from picker.inputs.measurements import Measurements
from picker.inputs.workload import WorkloadProfile
from picker.recommend.contract import PlanInputs, Recommendation
from picker.recommend.costs import CostSource, choose_costs, step_cost
from picker.recommend.decide import decide
from picker.recommend.evidence_index import EvidenceIndex, index_evidence
from picker.recommend.explain import explain_rows
from picker.recommend.plan_inputs import plan_inputs
from picker.recommend.provenance_labels import with_provenance
from picker.recommend.result import Result
from picker.recommend.schedule import Deployment
from picker.recommend.scoring import score
from picker.recommend.series import alpha_points, gain_by_batch, gain_by_n, measured_cells
from picker.recommend.table import CONTROLLER_BATCHES, Option, ScoredTable, cut_to_depth
from picker.recommend.unlock import unlocks

if TYPE_CHECKING:  # numpy-free at run time: policies.calibration imports numpy
    from policies import Calibration


@dataclass(frozen=True)
class Inputs:
    """What a command hands :func:`recommend`, read and checked once (:func:`load_inputs`)."""

    profile: WorkloadProfile
    path: str
    measurements: Measurements | None = None
    verify_curve: tuple[tuple[float, float], ...] | None = None
    calibration: Calibration | None = None
    policy: Any = None  # a fitted estimator whose domain covers the deployment, else None
    measured_costs: bool | None = None  # as the policy's training rows were built, where one applies
    notes: tuple[str, ...] = ()
    files: EvidenceFiles | None = None


@dataclass(frozen=True)
class EvidenceFiles:
    """The files behind a plan's evidence, as the command named them (the plan's inputs list them)."""

    measurements: str | None = None
    policy: str | None = None


def load_inputs(profile: Path, measurements: Path | None = None, *, policy: Path | None = None,
                calibration: Path | None = None, allow_other_model: bool = False) -> Inputs:
    """Read the profile, the measurements (refusing another model's unless allowed, picker.inputs.
    provenance) and the verify curve beside them, the calibration for the profile's engine and
    hardware, and the policy artifact (applied only inside its training domain)."""
    from picker.inputs.measurements import load_measurements
    from picker.inputs.verify_curve import verify_curve_beside
    from picker.inputs.workload import load_profile

    prof = load_profile(profile)
    meas = load_measurements(measurements) if measurements is not None else None
    if meas is not None:
        from picker.inputs.provenance import check_measurements

        check_measurements(meas, prof, allow_other_model)
    cal = None
    if calibration is not None:
        from policies import calibration_for

        cal = calibration_for(calibration, prof.engine.name, prof.hardware.gpu)
    est, measured_costs, notes = None, None, []
    if policy is not None:
        from policies import load_policy

        art = load_policy(policy)
        ok, why = art.covers(prof.hardware.gpu, prof.engine.name, prof.model_shape().params)
        if ok:
            # Score rows the way the policy's training rows were built (measured or roofline costs).
            est, measured_costs = art.estimator, art.card.get("measured_costs")
            notes.append(f"learned correction applied ({policy}; cross-validated median error "
                         f"{art.card['cross_validated_error']['median_rel_error']:.1%})")
        else:
            notes.append(f"learned correction NOT applied: {why}; the analytic model scores every option")
    curve = verify_curve_beside(measurements)
    files = EvidenceFiles(str(measurements) if measurements else None, str(policy) if policy else None)
    return Inputs(prof, str(profile), meas, tuple(curve) if curve else None, cal, est, measured_costs, tuple(notes),
                  files)


def recommend(profile: WorkloadProfile, measurements: Measurements | None = None, *, path: str = "",
              policy: Any = None, calibration: Calibration | None = None,
              verify_curve: Sequence[tuple[float, float]] | None = None, measured_costs: bool | None = None,
              options: Sequence[Option] | None = None, engine: str | None = None,
              notes: Sequence[str] = (), files: EvidenceFiles | None = None) -> Result:
    """The :class:`~picker.recommend.result.Result` for ``profile``: scored, decided, explained.

    ``policy`` is a fitted ``policies.SpeedupEstimator`` (``load_inputs`` checks its domain); without
    one the analytic model scores every option. ``measured_costs`` overrides whether the
    measurements' step costs transfer (``picker.inputs.provenance.costs_transfer``);
    ``verify_curve`` shapes measured verify costs; ``calibration`` replaces load-curve constants
    (``policies.calibration_for``). ``options`` replaces the profile's own (``options.options_for``)
    and ``engine`` the load curve's engine: the regret evaluation scores exactly the configurations a
    sweep measured, priced on the reference loop's curve. ``files`` names the measurements and
    policy files in the plan's inputs block (``load_inputs`` records them).
    """
    index = index_evidence(profile, measurements, measured_costs=measured_costs, verify_curve=verify_curve)
    costs = choose_costs(profile, index, measurements, calibration, engine)
    table = score(profile, index, costs, options, policy=policy, path=path)
    decided = decide(table, path=path)
    rec = with_provenance(decided.recommendation, profile, measurements)
    rec = rec.model_copy(update={"inputs": _asked(profile, path, rec, files or EvidenceFiles()),
                                 "unlocks": unlocks(table)})
    return Result(
        recommendation=rec, table=table, deployment=decided.deployment, batch_points=decided.points,
        explain=explain_rows(table, index, costs), gain_n=gain_by_n(table, decided.deployment),
        gain_batch=gain_by_batch(decided.deployment, decided.points), alpha=alpha_points(table, index, costs),
        measured=measured_cells(measurements, {b.task for b in table.buckets}),
        step_ratios=_controller_costs(table, index, costs, decided.deployment),
        notes=(*notes, *table.cost_notes))


def _asked(profile: WorkloadProfile, path: str, rec: Recommendation, files: EvidenceFiles) -> PlanInputs:
    ev = rec.evidence
    return plan_inputs(profile, file=path, acceptance=ev.source, step_costs=ev.cost_source,
                       measurements=files.measurements, calibration=ev.calibration, policy=files.policy)


def recommend_inputs(inputs: Inputs) -> Result:
    """:func:`recommend` on what :func:`load_inputs` read."""
    return recommend(inputs.profile, inputs.measurements, path=inputs.path, policy=inputs.policy,
                     calibration=inputs.calibration, verify_curve=inputs.verify_curve,
                     measured_costs=inputs.measured_costs, notes=inputs.notes, files=inputs.files)


def _controller_costs(table: ScoredTable, index: EvidenceIndex, costs: CostSource,
                      deployed: Deployment | None) -> tuple[tuple[float, ...], ...]:
    """R(n, batch) for the SDK Controller: the step cost, in plain forwards, of the deployed shape cut
    to each n = 1..N (as the Controller drafts it) at each of ``CONTROLLER_BATCHES``, from the same
    cost source as the plan -- the measured gain against concurrency inside its measured levels,
    the measured per-step costs carried by the load curve, else the load curve."""
    if deployed is None:
        return ()
    chosen = deployed.chosen
    n_max = max(chosen.config.depth, *(r.num_speculative_tokens for r in deployed.ranges))
    out = []
    for n in range(1, n_max + 1):
        option = Option(chosen.plugin, cut_to_depth(chosen.config, n), True, True)
        out.append(tuple(step_cost(index, costs, option, table.buckets, b).step_ratio for b in CONTROLLER_BATCHES))
    return tuple(out)

"""The one result of ``picker.recommend.pipeline.recommend``: every number a rendering shows.

Markdown, JSON and YAML (``render``), ``--explain`` and ``--plot`` (``explain``), the HTML report
(``report``), the SDK plan (``picker.sdk.plan``) and the regret evaluation read a :class:`Result`; none
of them scores or decides again. A new predicted quantity is added where it is computed (the
scored table, or the deployment) and carried here once; the Recommendation contract holds what
the JSON prints, ``figures`` how text prints it.

    >>> from picker.inputs.workload import load_profile
    >>> from picker.recommend.pipeline import recommend
    >>> result = recommend(load_profile("profiles/chat-70b-h100.yaml"))            # doctest: +SKIP
    >>> result.recommendation.decision.strategy, result.gain_batch[0].mean[0]      # doctest: +SKIP
    ('eagle3', 3.423)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from picker.recommend.contract import Recommendation
from picker.recommend.schedule import Deployment, Point
from picker.recommend.series import AlphaPoint, MeasuredCell, Series
from picker.recommend.table import CONTROLLER_BATCHES, ScoredTable

__all__ = ["CONTROLLER_BATCHES", "Result"]


@dataclass(frozen=True)
class Result:
    """A recommendation with everything behind it.

    ``recommendation``: the JSON contract. ``table``: every option scored. ``deployment`` and
    ``batch_points``: what runs at each batch and its predicted speedup (None and () when speculation
    stays off). ``explain``: per task type, each strategy's best configuration with its evidence
    (JSON-ready, as ``--explain`` prints it). ``gain_n``, ``gain_batch``, ``alpha``, ``measured``:
    the plots' series. ``step_ratios[n - 1][i]``: the step cost in plain forwards of the deployed
    shape cut to n drafts at ``CONTROLLER_BATCHES[i]`` (the SDK Controller's table). ``notes``: what
    the numbers rest on beyond the plan's own evidence (the learned correction, cost notes).
    """

    recommendation: Recommendation
    table: ScoredTable
    deployment: Deployment | None
    batch_points: tuple[Point, ...]
    explain: tuple[dict[str, Any], ...]
    gain_n: tuple[Series, ...]
    gain_batch: tuple[Series, ...]
    alpha: tuple[AlphaPoint, ...]
    measured: tuple[MeasuredCell, ...]
    step_ratios: tuple[tuple[float, ...], ...]
    notes: tuple[str, ...] = ()

    @property
    def cost_source(self) -> str:
        """measured, calibrated or modelled (``picker.recommend.costs``), as the plan states it."""
        return self.table.cost_kind

"""Say in the plan what the measurements stand for (``picker.inputs.provenance``), and cite each source once.

Applied to every Recommendation after the decision (``scoring.recommend`` and ``explain.build``):

- the provenance note goes into ``evidence.notes`` and, unless the file matches the deployment,
  into ``warnings`` (costs dropped; provenance unknown; another model);
- the measurements file is cited with what it measured, not as a bare path;
- with another model (``--allow-other-model``), every row and candidate resting on the file carries
  "measured on <model>" (``TaskRow.measured_on``, ``Evidence.measured_on``, candidate notes);
- citations are merged: one entry per source listing the tables used.

    >>> merge_citations(["A. Paper [Table 1, temperature=0]", "A. Paper", "A. Paper [Table 2, temperature=0]"])
    ['A. Paper [Table 1, temperature=0; Table 2, temperature=0]']
"""

from __future__ import annotations

from typing import Any

from picker.inputs.provenance import OVERRIDE_FLAG, compare, read_provenance
from picker.inputs.workload import WorkloadProfile
from picker.recommend.contract import Recommendation


def split_citation(text: str) -> tuple[str, list[str]]:
    """(source, the tables it was used for): ``Source [T1; T2]`` -> ``("Source", ["T1", "T2"])``."""
    if text.endswith("]") and " [" in text:
        head, _, tail = text[:-1].rpartition(" [")
        return head, [t.strip() for t in tail.split(";") if t.strip()]
    return text, []


def merge_citations(citations: list[str]) -> list[str]:
    """One entry per source, its tables listed once each in first-seen order; sources sorted."""
    tables: dict[str, list[str]] = {}
    for c in citations:
        head, used = split_citation(c)
        seen = tables.setdefault(head, [])
        seen += [t for t in used if t not in seen]
    return [f"{head} [{'; '.join(used)}]" if used else head for head, used in sorted(tables.items())]


def _describe(measurements: Any) -> str | None:
    """The measurements file's citation: its path, the model, engine, hardware and date."""
    prov = read_provenance(measurements)
    if prov is None:
        return None
    date = f", {prov.date[:10]}" if prov.date else ""
    return f"{measurements.source}: {prov.model.name} via {prov.where}{date}"


def with_provenance(rec: Recommendation, profile: WorkloadProfile, measurements: Any) -> Recommendation:
    """``rec`` with its measurements' provenance stated and labelled, and its citations merged."""
    ev = rec.evidence
    citations = list(ev.citations)
    if measurements is None:
        return rec.model_copy(update={"evidence": ev.model_copy(update={"citations": merge_citations(citations)})})
    match = compare(read_provenance(measurements), profile)
    source = getattr(measurements, "source", "")
    described = _describe(measurements)
    if described and source:
        citations = [described if c == source else c for c in citations]
    label = match.label
    update: dict[str, Any] = {
        "evidence": ev.model_copy(update={
            "citations": merge_citations(citations), "notes": [*ev.notes, *match.notes],
            "provenance": match.status,
            "measured_on": match.measured_model if label and ev.source != "prior" else None}),
        "warnings": [*rec.warnings, *(match.notes if match.status != "measured" else ())],
    }
    if label:
        measured = {c.strategy for c in measurements.cells}
        update["per_task"] = [t.model_copy(update={"measured_on": match.measured_model}) if t.evidence != "prior"
                              else t for t in rec.per_task]
        update["alternatives"] = [c.model_copy(update={"notes": [*c.notes, f"alpha {label}"]})
                                  if c.strategy in measured else c for c in rec.alternatives]
        if ev.source != "prior":
            update["rationale"] = [f"Speedups and alpha below rest on measurements of {match.measured_model}, not on "
                                   f"{match.profile_model} ({OVERRIDE_FLAG}).", *rec.rationale]
    return rec.model_copy(update=update)


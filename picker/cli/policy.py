"""`specpick policy`: fit the learned policy on sweeps, or refit an artifact on its own rows.

    $ specpick sweep --model zoo ... --out runs/sweep-a               # every grid cell measured
    $ specpick policy fit --sweep runs/sweep-a --out policy.json
    $ specpick policy fit --sweep runs/sweep-d0 --sweep runs/sweep-d1 --replicate runs/sweep-c1 \\
          --profile runs/rep/a --profile runs/rep/b --held-out runs/regret/regret.json --out policy.json
    $ specpick policy refit policies/data/zoo-ci-policy.json --out policy.json   # after a scikit-learn upgrade
    $ specpick recommend PROFILE --measurements CHEAP --policy policy.json

``fit`` encodes every grid cell of every (task, temperature) workload of the sweeps with the evidence
the workload's cheap profile gives, labels it with the sweep's measured speedup, fits the estimator
and writes the JSON artifact with its model card (``picker.recommend.policy_fit``). ``refit`` refits
an artifact on the rows it stores, card kept: ``policies/data/zoo-ci-policy.json`` refits to itself
byte for byte. Bad input: one ``error:`` line each, exit 2; the artifact is written whole or not at all.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from picker.cli.common import OneLineUsageErrors, user_errors
from picker.errors import UserError, UserErrors

app = typer.Typer(cls=OneLineUsageErrors, no_args_is_help=True, rich_markup_mode=None,
                  help="Fit the learned policy (the estimator behind --policy).")


def _json_out(out: Path) -> None:
    """Refuse an artifact path that is not a writable .json file, before any work."""
    if out.suffix.lower() != ".json":
        raise UserError("a policy artifact is JSON; name it .json", file=str(out), field="--out")
    if not out.resolve().parent.is_dir():
        raise UserError("its folder does not exist", file=str(out), field="--out")


def _run_folders(folders: list[Path], field: str) -> list[UserError]:
    """One problem per folder that is not a `specpick sweep` / `profile` run."""
    return [UserError("not a run folder (no records.jsonl)", file=str(f), field=field)
            for f in folders if not (f / "records.jsonl").is_file()]


def _held_out(path: Path | None) -> dict[str, Any] | None:
    """The held-out figures of a regret run (its ``summary``), for the model card."""
    if path is None:
        return None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"cannot read it: {exc.__class__.__name__}", file=str(path), field="--held-out") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("summary"), dict):
        raise UserError("no 'summary' object: not a regret run's regret.json", file=str(path), field="--held-out")
    return doc["summary"]


@app.command()
@user_errors
def fit(
    sweep: Annotated[list[Path], typer.Option(help="`specpick sweep` folder (repeatable): the labels.")],
    out: Annotated[Path, typer.Option(help="The artifact to write (.json).")],
    replicate: Annotated[list[Path] | None, typer.Option(
        help="A further sweep of the grid on other prompts (repeatable): sharpens the labels only.")] = None,
    profile: Annotated[list[Path] | None, typer.Option(
        help="The policy's own `specpick profile` run (repeatable); default: cut from the sweep.")] = None,
    profile_prompts: Annotated[int, typer.Option(help="Without --profile: prompts cut from the sweep.", min=1)] = 3,
    prompt_tokens: Annotated[float, typer.Option(help="Mean prompt tokens of the workloads' profiles.", min=1)] =
    200.0,
    probe: Annotated[bool, typer.Option(
        help="Give the policy the drafter probe (N=1 chains of the draft model / EAGLE layer, one prompt).")] = True,
    held_out: Annotated[Path | None, typer.Option(
        help="A regret run's regret.json: its held-out figures go into the model card.")] = None,
) -> None:
    """Fit the policy on every workload of the sweeps and write the artifact with its model card."""
    _json_out(out)
    problems = _run_folders(sweep, "--sweep") + _run_folders(replicate or [], "--replicate")
    problems += _run_folders(profile or [], "--profile")
    problems += [UserError("not a sweep folder (no run.json)", file=str(f), field="--sweep")
                 for f in sweep if (f / "records.jsonl").is_file() and not (f / "run.json").is_file()]
    if problems:
        raise problems[0] if len(problems) == 1 else UserErrors(problems)
    card_held_out = _held_out(held_out)
    from threadpoolctl import threadpool_limits

    from picker.recommend.policy_fit import FitInputs, draft_kinds, fit_artifact, prepare
    from picker.recommend.sweep_data import load_profile_records, load_sweeps, probe_records

    data = load_sweeps(sweep, replicate or [])
    if not data.target_path:
        raise UserError("the sweep's run.json names no target_path", file=str(sweep[0]), field="--sweep")
    keys = sorted(data.workloads)
    profiled = load_profile_records(profile) if profile else {}
    missing = [f"{t}@T={temp:g}" for t, temp in keys if profile and (t, temp) not in profiled]
    if missing:
        raise UserError(f"the profile runs hold no records of workloads {', '.join(missing)}", field="--profile")
    probed = probe_records(data, draft_kinds()) if probe else []
    with threadpool_limits(limits=1):  # one thread: the fit is then the same on any machine
        every = [prepare(data, data.workloads[k], profile_prompts, prompt_tokens,
                         profiled.get(k) if profile else None, probed) for k in keys]
        inputs = FitInputs(tuple(map(str, sweep)), tuple(map(str, replicate or [])), tuple(map(str, profile or [])),
                           profile_prompts, probe)
        card = fit_artifact(out, every, data, inputs, card_held_out)
    typer.echo(f"policy fitted on {card['training_data']['rows']} rows of {len(keys)} workloads: {out}")


@app.command()
@user_errors
def refit(
    artifact: Annotated[Path, typer.Argument(help="A policy artifact (.json).")],
    out: Annotated[Path, typer.Option(help="The refitted artifact to write (.json; may be ARTIFACT itself).")],
) -> None:
    """Refit an artifact on the rows it stores with this scikit-learn, its model card kept."""
    from policies.artifacts import refit_policy

    _json_out(out)
    refit_policy(artifact, out)
    typer.echo(f"policy refitted: {out}")

"""One plan, one set of numbers: for every shipped profile (and with its shipped measurements where it
has them) the markdown plan, the JSON, ``--explain`` (markdown and JSON) and the report page state
the same headline speedup, range, break-even α and batch schedule, and the batch plot draws the
schedule's own numbers.

Everything runs through the CLI as a user runs it; the expected text is the JSON's numbers written
by ``picker.recommend.figures`` (the one rounding rule), so a rendering that rounds or recomputes on
its own fails here.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from picker.cli.main import app
from picker.inputs.measurements import load_measurements
from picker.inputs.workload import load_profile
from picker.recommend.contract import Recommendation
from picker.recommend.figures import fraction, headline, rounded, schedule_rows
from picker.recommend.pipeline import recommend
from picker.recommend.report import schedule_words
from tests.test_profile_defaults import ISSUE_EXAMPLE

ROOT = Path(__file__).resolve().parents[1]
PROFILES = sorted((ROOT / "profiles").glob("*.yaml"))
MEASURED = {p.name.removesuffix(".summary.json"): p
            for p in (ROOT / "profiles" / "measurements").glob("*.summary.json")}
CASES = [(p, None) for p in PROFILES] + [(ROOT / "profiles" / f"{name}.yaml", m)
                                         for name, m in sorted(MEASURED.items())]
runner = CliRunner()


def _run(*args: str) -> str:
    result = runner.invoke(app, [*args])
    assert result.exit_code == 0, result.output
    return result.stdout


def _html_schedule(page: str) -> list[list[str]]:
    """The cells of the report's schedule table, as text."""
    section = page.split('<section id="schedule">', 1)[1].split("</section>", 1)[0]
    body = section.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    return [[html.unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row)] for row in body.split("</tr>") if row]


@pytest.mark.parametrize(("profile", "measurements"), CASES,
                         ids=[p.stem + ("+measured" if m else "") for p, m in CASES])
def test_every_rendering_states_the_same_plan(profile: Path, measurements: Path | None, tmp_path: Path) -> None:
    extra = ["--measurements", str(measurements)] if measurements else []
    data = json.loads(_run("recommend", str(profile), *extra, "--format", "json"))
    md = _run("recommend", str(profile), *extra)
    explained_md = _run("recommend", str(profile), *extra, "--explain")
    explained = json.loads(_run("recommend", str(profile), *extra, "--explain", "--format", "json"))
    _run("report", str(profile), *extra, "--out", str(tmp_path / "plan.html"))
    page = (tmp_path / "plan.html").read_text(encoding="utf-8")

    rec = Recommendation.model_validate(data)
    # --explain adds its section; the plan it explains is the plan.
    assert {k: v for k, v in explained.items() if k != "explain"} == data
    assert explained_md.startswith(md)
    if rec.decision.strategy == "none":
        assert rec.predicted_speedup.mean == 1.0
        assert "leave speculative decoding off" in md and "Leave speculative decoding off" in page
        return
    h = headline(rec)
    for text in (md, explained_md):
        assert f"**{h.speedup}** (range {h.low}–{h.high};" in text
        assert f"typical batch of {h.typical_batch}: **α ≥ {h.break_even_alpha}** per token" in text
        assert f"**≥ {h.accept_length} tokens per verify step**" in text
    assert f"<b>{h.speedup}</b> (range {h.low}–{h.high})" in page
    assert f"typical batch of {h.typical_batch}: α ≥ <b>{h.break_even_alpha}</b>" in page
    # The prose and the rollout gate state the headline's break-even, not a number of their own.
    assert any(f"it pays while alpha >= {h.break_even_alpha}." in line for line in rec.rationale)
    assert any(f"alpha >= break-even {h.break_even_alpha} (accept length >= {h.accept_length}" in s.gate
               for s in rec.rollout)
    # The schedule row holding the typical batch states the headline's break-even, at that batch.
    held = next(r for r in rec.decision.batch_schedule
                if r.min_batch <= rec.typical_batch and (r.max_batch is None or rec.typical_batch <= r.max_batch))
    if held.num_speculative_tokens:
        assert (held.break_even_alpha, held.break_even_at_batch) == (rec.break_even_alpha, rec.typical_batch)
    # The schedule, cell for cell, in the markdown, --explain and the page.
    rows = schedule_rows(rec)
    for text in (md, explained_md):
        for cells in rows:
            assert "| " + " | ".join(cells) + " |" in text
    assert _html_schedule(page) == rows
    for r, cells in zip(rec.decision.batch_schedule, rows, strict=True):
        assert schedule_words(r, cells) in html.unescape(page)


@pytest.mark.parametrize(("profile", "measurements"), CASES,
                         ids=[p.stem + ("+measured" if m else "") for p, m in CASES])
def test_the_batch_plot_draws_what_the_schedule_deploys(profile: Path, measurements: Path | None) -> None:
    """At every grid batch the plotted speedup is the schedule row's own number there, and the
    schedule drafts only what the deployed configuration runs (its depth, cut for shorter rows)."""
    result = recommend(load_profile(profile), load_measurements(measurements) if measurements else None)
    rec = result.recommendation
    if rec.decision.strategy == "none":
        assert result.gain_batch == () and result.deployment is None
        return
    (series,) = result.gain_batch
    at = dict(zip(series.x, series.mean))
    for r in rec.decision.batch_schedule:
        grid = [x for x in series.x if x >= r.min_batch and (r.max_batch is None or x <= r.max_batch)]
        assert rounded(at[grid[0]]) == r.predicted_speedup and rounded(at[grid[-1]]) == r.predicted_speedup_at_max_batch
        assert r.num_speculative_tokens <= rec.decision.num_speculative_tokens
    # The deployed shape is what the plan names: the tree, not the best tree at each batch.
    chosen = result.deployment.chosen
    tree = rec.decision.tree
    assert chosen.config.depth == rec.decision.num_speculative_tokens
    assert (tree is None) == (not chosen.config.is_tree)
    if tree is not None:
        assert (chosen.config.topk, chosen.config.num_draft_tokens) == (tree.topk, tree.num_draft_tokens)
    # The gain against N marks the deployed strategy's shape first, at the deployed N.
    first = result.gain_n[0]
    assert first.label.startswith(rec.decision.strategy)
    assert rounded(dict(zip(first.x, first.mean))[float(rec.decision.num_speculative_tokens)]) == next(
        a.predicted_speedup.mean for a in rec.alternatives if a.strategy == rec.decision.strategy)


def test_the_chat_plan_agrees_with_itself() -> None:
    """The issue's examples on chat-70b-h100 (SGLang, an EAGLE-3 tree): one break-even α in the
    headline, the rationale, the rollout gate and the schedule row at the typical batch of 17; the
    schedule drafts the tree at every batch (SGLang cannot switch a tree by batch size), so the
    plot, the rows and the headline describe that one tree."""
    rec = recommend(load_profile(ROOT / "profiles" / "chat-70b-h100.yaml")).recommendation
    assert rec.typical_batch == 17 and rec.decision.tree is not None
    assert {r.num_speculative_tokens for r in rec.decision.batch_schedule} == {rec.decision.num_speculative_tokens}
    assert fraction(rec.decision.batch_schedule[0].break_even_alpha) == fraction(rec.break_even_alpha)
    assert any("sglang cannot change the draft length by batch size" in w for w in rec.warnings)


def _prose(text: str) -> str:
    """``text`` without code: fenced blocks, inline code spans and HTML <code>/<pre> elements (where
    plugin names and engine flags rightly stay)."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"<(pre|code)[^>]*>.*?</\1>", "", text, flags=re.S)
    return re.sub(r"`[^`\n]*`", "", text)


def _page_text(page: str) -> str:
    body = page.split("<main>", 1)[1].split("<script>", 1)[0]
    return html.unescape(re.sub(r"<[^>]+>", " ", re.sub(r"<img[^>]*>", "", _prose(body))))


@pytest.mark.parametrize(("profile", "measurements"), CASES,
                         ids=[p.stem + ("+measured" if m else "") for p, m in CASES])
def test_every_plan_opens_with_its_inputs_and_off_plans_enable_nothing(profile: Path, measurements: Path | None,
                                                                      tmp_path: Path) -> None:
    """The markdown, JSON and the page open with what the plan was asked (model, hardware, engine,
    traffic, SLOs, evidence, every default the profile used), titled by the profile's name; an "off"
    plan has no enable step, no rollout gate and no config section; no rendering calls the separate
    draft model by its plugin name in prose, and the markdown's tables fit 80 columns."""
    extra = ["--measurements", str(measurements)] if measurements else []
    prof = load_profile(profile)
    data = json.loads(_run("recommend", str(profile), *extra, "--format", "json"))
    md = _run("recommend", str(profile), *extra)
    explained = _run("recommend", str(profile), *extra, "--explain")
    _run("report", str(profile), *extra, "--out", str(tmp_path / "plan.html"))
    page = (tmp_path / "plan.html").read_text(encoding="utf-8")

    asked = data["inputs"]
    assert asked["name"] == prof.name and asked["model"]["name"] == prof.model.name
    assert (asked["hardware"]["gpu"], asked["hardware"]["count"]) == (prof.hardware.gpu, prof.hardware.count)
    assert (asked["engine"]["name"], asked["engine"]["version"]) == (prof.engine.name, prof.engine.version)
    assert asked["traffic"]["task_mix"] == {k: v for k, v in prof.traffic.task_mix.items() if v > 0}
    assert asked["defaults_applied"] == [{"field": d.field, "value": d.value, "why": d.why}
                                         for d in prof.defaults_applied]
    assert asked["evidence"]["measurements"] == (str(measurements) if measurements else None)

    # The markdown: title, description, then the inputs before the decision.
    head, decision = md.split("## Decision:", 1)
    assert md.startswith(f"# Speculative decoding plan: {prof.name}\n")
    assert head.count("\n## ") == 1 and "\n## Inputs\n" in head
    for label in ("Model", "Hardware", "Engine", "Traffic", "SLOs", "Evidence"):
        assert f"- **{label}**: " in head
    assert f"{prof.engine.name} {prof.engine.version}" in head and prof.model.name in head
    for d in prof.defaults_applied:
        assert f"  - {d.field} = {d.value} ({d.why})" in head
    # The page: titled by the name (and description), its first section the inputs.
    assert f"<title>{html.escape(f'Speculative decoding plan: {prof.name}')}</title>" in page
    assert html.escape(" ".join(prof.description.split())) in page
    assert page.index('<section id="inputs">') < page.index('<section id="decision">')
    assert "## Glossary" in md and "α (alpha)" in md and "break-even α" in md and "step cost" in md

    if data["decision"]["strategy"] == "none":
        assert data["rollout"] == [] and data["engine_configs"] == {}
        for text in (md, _page_text(page)):
            assert "nable" not in text and "config below" not in text and "break-even 1.00" not in text
        assert "## Rollout" not in md and "## Engine configs" not in md and "### What would change it" in md
        assert "What would change it" in page and "<h2>Rollout</h2>" not in page
    else:
        assert "### What would change it" not in md and "## Rollout" in md

    for text in (_prose(md), _prose(explained), _page_text(page)):
        assert "vanilla" not in text
        assert not re.search(r"\b1 draft tokens\b|c=0\.|verify \d", text)
    # Tables, and the explanation's candidates (wrapped lists), fit 80 columns.
    candidates = explained.split("## Explain", 1)[1]
    for line in [*(x for x in md.splitlines() if x.startswith("|")), *candidates.splitlines()]:
        assert len(line) <= 80 or line.startswith("> "), line




def test_the_issue_profile_says_what_it_was_asked_and_what_would_unlock_more(tmp_path: Path) -> None:
    """Issue 38's newcomer profile (Llama-3.1-8B-Instruct, one H100, vLLM, 70% chat / 30% code,
    concurrency 32, 50 ms p99 ITL, T = 0.7): the plan states the H100 -> h100-sxm resolution, the
    defaults it used, and in "Why" the EAGLE-3 option it cannot run yet, its speedup, and the
    published head that unlocks it on vLLM."""
    path = tmp_path / "llama.yaml"
    path.write_text(ISSUE_EXAMPLE)
    md = _run("recommend", str(path))
    data = json.loads(_run("recommend", str(path), "--format", "json"))
    head = md.split("## Decision:", 1)[0]
    assert "1x h100-sxm (80 GiB each); 'H100' names more than one part: assumed h100-sxm" in head
    assert "- **Engine**: vllm 0.32.0 (the version specpick's configs are written for)" in head
    assert "chat 70%, code 30%; concurrency 32 sequences; temperature 0.7" in head
    assert "p99 inter-token latency (ITL) ≤ 50 ms" in head
    assert "  - memory_headroom_gib = " in head and "  - engine.version = 0.32.0" in head

    best = data["unlocks"][0]
    assert best["strategy"] == "eagle3" and best["same_engine"] is True
    assert best["provide"][0].startswith("drafters.eagle3_head: {name: yuhuili/EAGLE3-LLaMA3.1-Instruct-8B}")
    # It beats what the plan deploys (nothing, where the SLO leaves speculation off), on the same
    # basis as the alternatives (full depth, every batch).
    deployed = [a["predicted_speedup"]["mean"] for a in data["alternatives"]
                if a["strategy"] == data["decision"]["strategy"]]
    assert best["predicted_speedup"]["mean"] > max(deployed, default=1.0)
    said = f"eagle3 ({best['setting']}) would give {fraction(best['predicted_speedup']['mean'])}x"
    if data["decision"]["strategy"] == "none":
        section = md.split("### What would change it", 1)[1].split("###", 1)[0]
        unlocked = next(line for line in section.splitlines() if line.startswith(f"- {said}"))
    else:
        why = md.split("### Why", 1)[1].split("###", 1)[0]
        unlocked = next(line for line in why.splitlines() if line.startswith("- Better once unlocked: "))
    assert said in unlocked and "on vllm: provide drafters.eagle3_head" in unlocked

"""`specpick report`: the page's structure without a browser (stdlib html.parser)."""

from __future__ import annotations

import base64
import json
import shlex
import struct
from html import escape
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from picker.cli.main import app
from picker.cli.report import build_page
from picker.inputs.workload import load_profile
from picker.recommend.pipeline import recommend
from picker.recommend.report import SECTIONS, html_page
from picker.recommend.series import crossover
from picker.recommend.words import strategy_labels

ROOT = Path(__file__).resolve().parents[1]
PROFILES = sorted((ROOT / "profiles").glob("*.yaml"))
CODE = ROOT / "profiles" / "code-assistant-8b-a100.yaml"
runner = CliRunner()


class Page(HTMLParser):
    """Sections, images, every URL-bearing attribute, and the text of each config <pre>."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.sections: list[str] = []
        self.images: list[dict[str, str]] = []
        self.urls: list[tuple[str, str, str]] = []
        self.tags: list[str] = []
        self.configs: dict[str, tuple[str, str, str]] = {}  # pre id -> (engine, kind, text)
        self.buttons: list[str] = []
        self._engine: str | None = None
        self._kind = ""
        self._pre: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.tags.append(tag)
        if tag == "section":
            self.sections.append(a.get("id", ""))
        if tag == "img":
            self.images.append(a)
        for key in ("src", "href", "action", "data", "poster"):
            if key in a:
                self.urls.append((tag, key, a[key]))
        if tag == "div" and "config" in a.get("class", ""):
            self._engine, self._kind = a.get("data-engine"), a.get("data-kind", "")
        if tag == "button" and "copy" in a.get("class", ""):
            self.buttons.append(a.get("data-target", ""))
        if tag == "pre" and a.get("id", "").startswith("cfg-"):
            self._pre, self._text = a["id"], []

    def handle_data(self, data: str) -> None:
        if self._pre is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "pre" and self._pre is not None:
            self.configs[self._pre] = (self._engine or "", self._kind, "".join(self._text))
            self._pre = None


def parse(page: str) -> Page:
    p = Page()
    p.feed(page)
    return p


def png_size(uri: str) -> tuple[int, int]:
    raw = base64.b64decode(uri.split(",", 1)[1])
    assert raw[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", raw[16:24])


def check_configs(p: Page, configs: dict[str, Any]) -> int:
    """Every pasted text is exactly the Recommendation's config for its engine; returns how many."""
    for engine, kind, text in p.configs.values():
        cfg = configs[engine]
        if kind == "flags":
            assert shlex.split(text) == cfg["args"]
        elif kind == "yaml":
            assert yaml.safe_load(text) == {"speculative_config": cfg["speculative_config"]}
        else:
            assert kind == "json" and json.loads(text) == cfg["adaptive_config"]
    supported = {e for e, c in configs.items() if c.get("supported")}
    assert {e for e, _, _ in p.configs.values()} == supported
    assert sorted(p.buttons) == sorted(p.configs)
    return len(p.configs)


@pytest.mark.parametrize("profile", PROFILES, ids=[p.stem for p in PROFILES])
def test_every_shipped_profile_gives_a_self_contained_page(profile: Path) -> None:
    page = build_page(profile)
    p = parse(page)
    assert p.sections == list(SECTIONS)
    assert "link" not in p.tags and "iframe" not in p.tags
    # No network: every URL-bearing attribute is a data URI (images) or none at all.
    assert all(value.startswith("data:image/png;base64,") for _, _, value in p.urls)
    assert "http://" not in page.split("<main>", 1)[0] and "@import" not in page
    ids = {img.get("id") for img in p.images}
    assert {"plot-alpha", "plot-gain-n"} <= ids
    for img in p.images:
        w, h = png_size(img["src"])
        assert w > 100 and h > 100
    built = recommend(load_profile(profile), path=str(profile)).recommendation
    rec = built.model_dump(mode="json")
    if rec["decision"]["strategy"] != "none":
        assert "plot-gain-batch" in ids
        assert check_configs(p, built.engine_configs) >= 1
    shown = strategy_labels().get(rec["decision"]["strategy"], rec["decision"]["strategy"])
    assert f"<code>{shown}</code>" in page or rec["decision"]["strategy"] == "none"


def test_the_title_is_the_profiles_name_and_description(tmp_path: Path) -> None:
    """The page is titled by what the profile calls itself, not by where its file lies: the name
    (the file's stem when the profile gives none) in <title> and <h1>, the description under it."""
    page = build_page(ROOT / "profiles" / "chat-70b-h100.yaml")
    prof = load_profile(ROOT / "profiles" / "chat-70b-h100.yaml")
    head = page.split('<section id="inputs">', 1)[0]
    assert "<title>Speculative decoding plan: chat-70b-h100</title>" in head
    assert "<h1>Speculative decoding plan: chat-70b-h100</h1>" in head
    assert f"<p>{escape(' '.join(prof.description.split()))}</p>" in head
    assert "<title>Speculative decoding plan: profiles/" not in page and "<h1>Speculative decoding plan: /" not in page
    bare = tmp_path / "deep" / "folder" / "my-chat.yaml"
    bare.parent.mkdir(parents=True)
    bare.write_text("model: llama-3.1-8b-instruct\nhardware: H100\nengine: vllm\ntraffic: {task_mix: chat}\n")
    page = build_page(bare)
    assert "<title>Speculative decoding plan: my-chat</title>" in page and str(tmp_path) not in page.split("<main>")[0]


def test_the_page_rests_on_the_same_decision_as_recommend() -> None:
    """The page is rendered from the one result ``specpick recommend`` renders (the same call)."""
    import picker.recommend.report as report_module

    seen = []
    real = report_module.html_page
    prof = load_profile(CODE)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(report_module, "html_page", lambda result, title=None: seen.append(result) or real(result, title))
        build_page(CODE)
    assert seen[0].recommendation == recommend(prof, path=str(CODE)).recommendation


def test_every_inserted_string_is_escaped() -> None:
    import dataclasses

    result = recommend(load_profile(CODE), path="<b>x</b>")
    rec = result.recommendation
    rec = rec.model_copy(update={"rationale": [*rec.rationale, '<script>alert("x")</script>']})
    page = html_page(dataclasses.replace(result, recommendation=rec))
    assert '<script>alert("x")</script>' not in page and "&lt;script&gt;alert(&quot;x&quot;)" in page
    assert "<b>x</b>" not in page
    assert page.count("<script>") == 1  # the copy buttons' own script, nothing injected


def test_crossover_is_interpolated() -> None:
    assert crossover((1, 2, 3), (1.4, 1.2, 0.8)) == pytest.approx(2.5)
    assert crossover((1, 4), (2.0, 0.5), log_x=True) == pytest.approx(2 ** (2 * 2 / 3))
    assert crossover((1, 2), (1.5, 1.2)) is None


def test_with_measurements_the_page_sets_measured_against_predicted(tmp_path: Path) -> None:
    cells = [{"task": t, "strategy": s, "temperature": 0.0, "alpha": 0.7, "alpha_ci": [0.65, 0.75], "samples": 100,
              "num_draft_tokens": 4, "tau": 2.9}
             for t in ("code", "chat") for s in ("ngram", "eagle3")]
    prov = {"model": {"name": "zoo:ci/target"}, "backend": "torch", "engine": "torch reference loop",
            "hardware": {"cpu": "x", "cores": 2, "device": "cpu"}}
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"run": {"backend": "torch", "provenance": prov}, "cells": cells}))
    out = tmp_path / "page.html"
    refused = runner.invoke(app, ["report", str(CODE), "--measurements", str(summary), "--out", str(out)])
    assert refused.exit_code == 2 and "--allow-other-model" in refused.stderr and not out.exists()
    ok = runner.invoke(app, ["report", str(CODE), "--measurements", str(summary), "--allow-other-model",
                             "--out", str(out)])
    assert ok.exit_code == 0, ok.output
    page = out.read_text(encoding="utf-8")
    p = parse(page)
    assert "plot-measured" in {img.get("id") for img in p.images}
    assert page.count("measured on zoo:ci/target") >= 3  # decision, per-task rows, schedule
    assert "0.70 (0.65–0.75)" in page


def test_bad_input_is_one_line_and_writes_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    out = tmp_path / "page.html"
    result = runner.invoke(app, ["report", str(CODE), "--measurements", str(bad), "--out", str(out)])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1 and str(bad) in result.stderr
    assert not out.exists() and list(tmp_path.iterdir()) == [bad]
    missing = runner.invoke(app, ["report", str(CODE), "--out", str(tmp_path / "no" / "page.html")])
    assert missing.exit_code == 2 and "--out" in missing.stderr

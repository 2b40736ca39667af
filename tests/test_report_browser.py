"""`specpick report` in a real browser: headless Chromium over the DevTools protocol (opt-in).

    $ scripts/browser_tests.sh            # or: pytest -m browser tests/test_report_browser.py -s

Loads the page from file://, then checks: no console errors or uncaught exceptions, every plot
decoded with a natural width > 0, each copy button puts exactly its config text on the clipboard;
saves a full-page screenshot to the test's folder and prints its path.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from picker.cli.report import build_page
from picker.inputs.measurements import load_measurements
from picker.inputs.workload import load_profile
from picker.recommend.pipeline import recommend
from picker.recommend.report import config_blocks
from tests.cdp import Chromium, find_chromium

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(find_chromium() is None, reason="no chromium (apt-get install -y chromium)")]

ROOT = Path(__file__).resolve().parents[1]
CODE = ROOT / "profiles" / "code-assistant-8b-a100.yaml"


def _summary(tmp_path: Path) -> Path:
    cells = [{"task": t, "strategy": s, "temperature": temp, "alpha": 0.7, "alpha_ci": [0.65, 0.75],
              "samples": 100, "num_draft_tokens": 4, "tau": 2.9}
             for t in ("code", "chat") for s in ("ngram", "eagle3") for temp in (0.0, 1.0)]
    prov = {"model": {"name": "zoo:ci/target"}, "backend": "torch", "engine": "torch reference loop",
            "hardware": {"cpu": "x", "cores": 2, "device": "cpu"}}
    path = tmp_path / "summary.json"
    path.write_text(json.dumps({"run": {"backend": "torch", "provenance": prov}, "cells": cells}))
    return path


def test_the_report_in_headless_chromium(tmp_path: Path) -> None:
    page_path = tmp_path / "report.html"
    summary = _summary(tmp_path)
    page_path.write_text(build_page(CODE, summary, allow_other_model=True), encoding="utf-8")
    rec = recommend(load_profile(CODE), load_measurements(summary)).recommendation
    expected = [text for name, cfg in rec.engine_configs.items() for _, _, text in config_blocks(name, cfg)]
    with Chromium.start(tmp_path / "chromium-profile") as browser:
        tab = browser.open(page_path.as_uri())
        # The async clipboard from a file:// page: allowed for this test's origin-less page.
        browser.send("Browser.grantPermissions", {"permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]})
        images = browser.evaluate(tab, "Array.from(document.images).map(i => [i.id, i.complete, i.naturalWidth, "
                                       "i.naturalHeight])")
        assert {i[0] for i in images} == {"plot-alpha", "plot-gain-n", "plot-gain-batch", "plot-measured"}
        assert all(done and w > 0 and h > 0 for _, done, w, h in images), images
        script = "Array.from(document.querySelectorAll('button.copy')).map(b => b.dataset.target)"
        targets = browser.evaluate(tab, script)
        assert len(targets) == len(expected) >= 3
        copied = []
        for ident in targets:
            browser.evaluate(tab, f"document.querySelector('button[data-target=\"{ident}\"]').click()", gesture=True)
            browser.evaluate(tab, "new Promise(r => setTimeout(r, 100))")
            copied.append(browser.evaluate(tab, "navigator.clipboard.readText()", gesture=True))
            assert browser.evaluate(tab, f"document.querySelector('button[data-target=\"{ident}\"]').textContent") \
                == "Copied"
        assert copied == expected
        shot = browser.screenshot(tab, tmp_path / "report.png")
        assert browser.errors(tab) == []
    assert shot.stat().st_size > 10_000
    print(f"\nscreenshot: {shot}")

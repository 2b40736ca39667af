"""The concurrency axis of ``specpick profile``: one group of cells per requests-in-flight level,
each against plain decoding at the same level, throughput from the waves' wall clock.

Live sources are checked over real HTTP on loopback with the llama-server stand-in of
tests/test_endpoints_llamacpp.py (its documented wire format), here holding every completion for a
fixed 50 ms so that requests in flight overlap measurably. The real servers:
tests/engines/test_vllm.py and tests/engines/test_llamacpp.py.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from picker.profiler.options import parse_concurrency
from picker.profiler.records import CellKey, Record
from picker.profiler.run import records_of
from picker.profiler.stats import wave_seconds
from tests.test_endpoints_llamacpp import RATES, LlamaDouble, llama

HOLD_S = 0.05


class SlowDouble(LlamaDouble):
    """LlamaDouble that holds each completion ``HOLD_S`` and counts requests in flight."""

    def __init__(self, rates: list[float], **kw: Any) -> None:
        super().__init__(rates, **kw)
        self.in_flight, self.peaks = 0, []  # peaks: requests in flight when each one arrived
        self.gate = threading.Lock()

    def _complete(self, req: dict[str, Any]) -> dict[str, Any]:
        with self.gate:
            self.in_flight += 1
            self.peaks.append(self.in_flight)
        time.sleep(HOLD_S)
        try:
            return super()._complete(req)
        finally:
            with self.gate:
                self.in_flight -= 1


def test_parse_concurrency_rejects_bad_levels() -> None:
    import pytest

    from picker.errors import UserError

    assert parse_concurrency("8,1,2,2", default=1) == [1, 2, 8]
    for bad in ("0", "300", "two", ","):
        with pytest.raises(UserError, match="--concurrency"):
            parse_concurrency(bad, default=1)


def test_cell_ids_carry_concurrency_only_above_one() -> None:
    assert CellKey("code", "ngram", 0.0, 4).id == "code|ngram|T=0|N=4"  # records of earlier runs resume
    assert CellKey("code", "ngram", 0.0, 4, concurrency=4).id == "code|ngram|T=0|N=4|C=4"
    old = Record.from_dict({"cell": {"task": "code", "strategy": "ngram", "temperature": 0.0, "num_draft_tokens": 4},
                            "prompt_ids": ["c0"], "tokens": 3, "forwards": 2})
    assert old.cell.concurrency == 1


def test_wave_seconds_counts_overlapping_requests_once() -> None:
    key = CellKey("code", "ngram", 0.0, 4, concurrency=2)
    a = Record(key, ("a",), tokens=4, forwards=2, wall_s=1.0, extra={"wave": "w", "wave_t0": 10.0, "t1": 11.0})
    b = Record(key, ("b",), tokens=4, forwards=2, wall_s=1.5, extra={"wave": "w", "wave_t0": 10.0, "t1": 11.5})
    c = Record(key, ("c",), tokens=4, forwards=2, wall_s=0.5)  # an older record: its own seconds
    assert wave_seconds([a, b, c]) == 1.5 + 0.5


def test_levels_run_as_groups_each_against_its_own_plain_baseline(tmp_path: Path) -> None:
    with SlowDouble(RATES) as spec, SlowDouble([], types="") as plain:
        args = ["--strategies", "vanilla", "--tasks", "math", "--temperatures", "0", "--limit-per-task", "4",
                "--max-new-tokens", "12", "--no-early-stop", "--num-draft-tokens", "3", "--concurrency", "1,4",
                "--plain-url", plain.url]
        result = llama(spec.url, tmp_path, *args)
        assert result.exit_code == 0, result.output
        spec_peaks, plain_peaks = list(spec.peaks), list(plain.peaks)
        # Resuming the finished run measures nothing again, at either level.
        again = llama(spec.url, tmp_path, *args, "--resume")
        assert again.exit_code == 0, again.output
        assert len(spec.peaks) == len(spec_peaks)  # nor a warm-up: it goes out before a first timed wave
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["run"]["concurrency"] == [1, 4]
    cells = {c["concurrency"]: c for c in summary["cells"]}
    bases = {b["concurrency"]: b for b in summary["baselines"]}
    assert set(cells) == set(bases) == {1, 4}
    # Level 1 sends one request at a time; level 4 keeps four in flight (the warm-up comes first).
    assert max(spec_peaks[1:5]) == 1 and max(spec_peaks[5:]) == 4
    assert max(plain_peaks[1:5]) == 1 and max(plain_peaks[5:]) == 4
    # Four held requests at once take about one hold: throughput grows with the level, while the
    # per-request speed does not (each still waits HOLD_S).
    assert cells[4]["throughput_tokens_per_second"] > 2 * cells[1]["throughput_tokens_per_second"]
    for c in (1, 4):
        ratio = cells[c]["throughput_tokens_per_second"] / bases[c]["throughput_tokens_per_second"]
        assert abs(cells[c]["throughput_gain_vs_plain"] - ratio) < 1e-3 * ratio
    records = records_of(tmp_path)
    waves = {r.extra["wave"] for r in records if r.cell.concurrency == 4 and not r.cell.is_plain}
    assert len(waves) == 1  # four prompts, four in flight: one wave


def test_wave_rounds_keep_c_in_flight_over_several_rounds(tmp_path: Path) -> None:
    """``--wave-rounds R``: a wave is C x R prompts with C in flight throughout (a finished request
    is replaced at once), so the drain at its end weighs about 1/R; a resume must keep R."""
    with SlowDouble(RATES) as spec, SlowDouble([], types="") as plain:
        args = ["--strategies", "vanilla", "--tasks", "math", "--temperatures", "0", "--limit-per-task", "6",
                "--max-new-tokens", "12", "--no-early-stop", "--num-draft-tokens", "3", "--concurrency", "2",
                "--plain-url", plain.url, "--wave-rounds", "3"]
        result = llama(spec.url, tmp_path, *args)
        assert result.exit_code == 0, result.output
        again = llama(spec.url, tmp_path, *args[:-1], "2", "--resume")
        assert again.exit_code == 2 and "wave_rounds" in again.output
        assert "Traceback" not in again.output
        peaks = list(plain.peaks)
    assert max(peaks) == 2  # two in flight, never more (how many arrivals overlap is the threads' timing)
    records = records_of(tmp_path)
    for is_plain in (True, False):
        waves = {r.extra["wave"] for r in records if r.cell.is_plain is is_plain}
        assert len(waves) == 1, waves  # six prompts, two in flight, three rounds: one wave
    assert json.loads((tmp_path / "run.json").read_text())["wave_rounds"] == 3


def test_load_curves_find_the_crossover_and_never_extrapolate(tmp_path: Path) -> None:
    from picker.profiler.load import crossover, load_curves, plot_gain

    assert crossover([(1, 2.0), (2, 1.5), (4, 1.0)]) == 4.0
    assert crossover([(1, 1.2), (8, 0.6)]) == 2.0            # log-linear: 1.2 -> 0.6 over 3 doublings
    assert crossover([(1, 1.3), (16, 1.01)]) is None          # above 1 wherever measured
    cells = [{"task": "code", "temperature": 0.0, "strategy": "ngram", "num_draft_tokens": 4, "tree": None,
              "concurrency": c, "throughput_gain_vs_plain": g} for c, g in ((4, 1.1), (1, 1.8), (16, 0.9))]
    cells.append({**cells[0], "strategy": "vanilla", "concurrency": 1})  # one level: no curve
    (curve,) = load_curves(cells)
    assert curve["gain"] == [[1, 1.8], [4, 1.1], [16, 0.9]]
    assert 4 < curve["crossover"] < 16 and curve["crossover_note"].startswith("gain <= 1 from concurrency")
    out = tmp_path / "gain.png"
    if plot_gain({"load": [curve]}, out):  # matplotlib is the optional `plot` extra
        assert out.stat().st_size > 1000


def test_sglang_concurrency_levels_against_a_plain_server(tmp_path: Path) -> None:
    """SGLang's documented ``/generate`` wire format (tests/test_profiler_sglang_double.py): the
    plain baseline on a second server without ``--speculative-algorithm``, per level."""
    from tests.test_endpoints import profile
    from tests.test_profiler_sglang_double import SGLangDouble

    with SGLangDouble(rates=[0.9, 0.6, 0.3], steps=3, delay=HOLD_S) as spec, \
            SGLangDouble(rates=[], steps=0, algorithm=None, delay=HOLD_S) as plain:  # type: ignore[arg-type]
        result = profile(spec.url, tmp_path, "--tasks", "math", "--temperatures", "0", "--limit-per-task", "4",
                         "--max-new-tokens", "16", "--no-early-stop", "--concurrency", "1,4",
                         "--plain-url", plain.url)
        assert result.exit_code == 0, result.output
        plain_texts = [r["text"] for r in plain.log]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["run"]["source"]["plain_url"] == plain.url
    assert sorted(b["concurrency"] for b in summary["baselines"]) == [1, 4]
    assert len(plain_texts) == 1 + 8  # the untimed warm-up, then four prompts at each level
    assert {r.source for r in records_of(tmp_path) if r.cell.is_plain} == {"sglang-plain-server"}
    (curve,) = summary["load"]
    assert [c for c, _ in curve["gain"]] == [1, 4]


def test_reference_engine_profiles_and_sweeps_under_load(tmp_path: Path) -> None:
    """The torch backend serves each wave through the batched loop: at T = 0 every counter that
    depends on tokens alone (drafted, accepted, tokens) is identical at concurrency 1 and 2 (the
    output is the target's greedy output at every batch), and the summary carries the gain curve."""
    from typer.testing import CliRunner

    from picker.cli.main import app

    runner = CliRunner()
    out = tmp_path / "p"
    result = runner.invoke(app, ["profile", "--model", "zoo", "--strategies", "ngram,eagle3", "--tasks", "code",
                                 "--temperatures", "0", "--limit-per-task", "3", "--max-new-tokens", "16",
                                 "--num-draft-tokens", "3", "--concurrency", "1,2", "--no-early-stop", "--quiet",
                                 "--no-plot", "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    by = {(c["strategy"], c["concurrency"]): c for c in summary["cells"]}
    for strategy in ("ngram", "eagle3"):
        one, two = by[(strategy, 1)], by[(strategy, 2)]
        assert one["draft_tokens"] > 0 and one["accepted_tokens"] > 0
        for key in ("tokens", "draft_tokens", "accepted_tokens", "decode_steps"):
            assert one[key] == two[key], (strategy, key)
        assert two["throughput_gain_vs_plain"] is not None
    assert {r.source for r in records_of(out) if r.cell.concurrency == 2} == {"torch-batched"}
    # One prompt set at every level: the same prompt tokens prefilled, one at a time or batched.
    fed = {(r.cell.concurrency, r.prompt_ids): r.extra["prompt_tokens"] for r in records_of(out)}
    assert all(n > 0 and fed[(1, ids)] == n for (_, ids), n in fed.items() if (1, ids) in fed)
    assert len(summary["load"]) == 2
    # Three prompts served two at a time in one wave (--wave-rounds 2): the third joins when a row
    # frees, mid-wave, and still gets the target's greedy output, counter for counter.
    refill = tmp_path / "r"
    result = runner.invoke(app, ["profile", "--model", "zoo", "--strategies", "ngram,eagle3", "--tasks", "code",
                                 "--temperatures", "0", "--limit-per-task", "3", "--max-new-tokens", "16",
                                 "--num-draft-tokens", "3", "--concurrency", "2", "--wave-rounds", "2",
                                 "--no-early-stop", "--quiet", "--no-plot", "--out", str(refill)])
    assert result.exit_code == 0, result.output
    again = {c["strategy"]: c for c in json.loads((refill / "summary.json").read_text())["cells"]}
    for strategy in ("ngram", "eagle3"):
        for key in ("tokens", "draft_tokens", "accepted_tokens", "decode_steps"):
            assert again[strategy][key] == by[(strategy, 1)][key], (strategy, key)
    assert all(len({r.extra["wave"] for r in records_of(refill) if r.cell.strategy == s}) == 1
               for s in ("ngram", "eagle3"))
    sweep = tmp_path / "s"
    result = runner.invoke(app, ["sweep", "--out", str(sweep), "--strategies", "ngram", "--tasks", "code",
                                 "--temperatures", "0", "--chain-lengths", "2", "--prompts-per-task", "2",
                                 "--max-new-tokens", "12", "--no-curve", "--concurrency", "1,2", "--quiet"])
    assert result.exit_code == 0, result.output
    assert json.loads((sweep / "sweep.json").read_text())["batch"].startswith("measured at concurrency 1, 2")


def test_crossover_is_the_last_fall_through_one() -> None:
    """Measured on vLLM's CPU build (ngram, zoo ci, code, T=0): below 1 at C=1, above at 2-8, below
    at 16. The crossover is where it falls for good (between 8 and 16), not its first level, and the
    note names the low level before it; a curve that ends above 1 has none, low levels still named."""
    from picker.profiler.load import crossover, load_curves

    measured = [(1, 0.28), (2, 1.05), (4, 1.31), (8, 1.16), (16, 0.66)]
    assert crossover(measured) == 9.99  # 8 * 2**(0.16 / 0.5), log-linear between 8 and 16
    assert crossover([(1, 0.9), (4, 1.2)]) is None
    assert crossover([(1, 1.2), (2, 0.9), (4, 1.1), (8, 0.95)]) == crossover([(4, 1.1), (8, 0.95)])
    cells = [{"task": "code", "temperature": 0.0, "strategy": "ngram", "num_draft_tokens": 4, "tree": None,
              "concurrency": c, "throughput_gain_vs_plain": g} for c, g in measured]
    (curve,) = load_curves(cells)
    assert curve["crossover"] == 9.99
    assert curve["crossover_note"] == "gain <= 1 from concurrency 9.99; also <= 1 at concurrency 1"
    (rising,) = load_curves([{**cells[0], "concurrency": c, "throughput_gain_vs_plain": g}
                             for c, g in ((1, 0.9), (4, 1.2))])
    assert rising["crossover"] is None and rising["crossover_note"] == "none up to 4; also <= 1 at concurrency 1"

"""Live-endpoint profiling over real HTTP on loopback: exact SGLang arithmetic, and every fault.

The SGLang path runs against ``SGLangDouble`` (SGLang's documented format over a known
speculative process; SGLang itself needs a GPU). Faults run against real loopback servers that
misbehave: nothing listening, HTTP 500, a reply slower than the timeout, malformed JSON, no
speculative fields. Each must end in one ``error:`` line naming the endpoint, exit code 2, and
the records measured so far kept with a summary of them.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from picker.cli.main import app
from picker.inputs.measurements import load_measurements
from picker.profiler.run import records_of
from picker.tasks import builtin_prompts
from tests.test_profiler_sglang_double import Loopback, SGLangDouble, as_json, sse, vllm_reply

runner = CliRunner()
FAST = ["--retries", "1", "--backoff", "0.01", "--timeout", "5", "--quiet", "--no-plot"]


def profile(url: str, out: Path, *args: str, backend: str = "sglang") -> Any:
    return runner.invoke(app, ["profile", "--backend", backend, "--url", url, "--out", str(out), *FAST, *args])


def _expected(log: list[dict[str, Any]], texts: set[str], depth: int) -> dict[str, Any]:
    rows = [r for r in log if r["text"] in texts]
    verify = sum(r["verify_ct"] for r in rows)
    correct = sum(r["correct"] for r in rows)
    hist = [sum(r["hist"][k] for r in rows) for k in range(depth + 1)]
    reached = [sum(hist[k:]) for k in range(depth)]
    acc = [sum(hist[k + 1:]) for k in range(depth)]
    return {"alpha": round(correct / (verify * depth), 6), "tau": round(1 + correct / verify, 6),
            "per_position": [round(a / n, 6) for a, n in zip(acc, reached)], "samples": len(rows),
            "target_forwards": verify + len(rows), "tokens": sum(r["tokens"] for r in rows)}


def test_sglang_arithmetic_is_exact_and_estimates_the_known_rates(tmp_path: Path) -> None:
    rates = [0.9, 0.6, 0.3]
    with SGLangDouble(rates=rates, steps=3) as server:
        result = profile(server.url, tmp_path, "--tasks", "math,code", "--temperatures", "0",
                         "--limit-per-task", "40", "--max-new-tokens", "200", "--no-early-stop",
                         "--concurrency", "4")
        assert result.exit_code == 0, result.output
        log = server.log[1:]  # the first request is the profiler's untimed warm-up (picker.profiler.source.WARMUP)
        server_avg = server.total_accept_tokens / server.total_forwards
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["run"]["status"] == "complete"
    for cell in summary["cells"]:
        texts = {p.turns[0] for p in builtin_prompts([cell["task"]], 40)}
        want = _expected(log, texts, depth=3)
        assert (cell["strategy"], cell["num_draft_tokens"]) == ("eagle3", 3)
        assert cell["alpha_ci_method"] == "bootstrap-prompts"
        for key, value in want.items():
            assert cell[key] == value, key
        lo, hi = cell["alpha_ci"]
        assert lo < cell["alpha"] < hi
        # ~3000 verify steps per task: the conditional estimates sit near the process's rates.
        assert cell["per_position"] == pytest.approx(rates, abs=0.04)
        assert cell["alpha_iid"] == pytest.approx(sum(r * w for r, w in zip(rates, _weights(rates))), abs=0.03)
    report = summary["run"]["server_report"]
    assert report["avg_spec_accept_length"] == pytest.approx(server_avg)


def _weights(rates: list[float]) -> list[float]:
    """Share of examined positions that are position k (reach probability, normalised)."""
    reach, out = 1.0, []
    for r in rates:
        out.append(reach)
        reach *= r
    return [w / sum(out) for w in out]


@pytest.mark.parametrize("version", ["mid", "old"])
def test_older_sglang_formats(tmp_path: Path, version: str) -> None:
    with SGLangDouble(rates=[0.8, 0.5], steps=2, version=version) as server:
        result = profile(server.url, tmp_path, "--tasks", "math", "--temperatures", "0.7", "--limit-per-task", "6",
                         "--max-new-tokens", "30", "--no-early-stop")
        assert result.exit_code == 0, result.output
        log = server.log[1:]  # the first request is the profiler's untimed warm-up (picker.profiler.source.WARMUP)
    cell = json.loads((tmp_path / "summary.json").read_text())["cells"][0]
    want = _expected(log, {r["text"] for r in log}, depth=2)
    assert all(r["temperature"] == 0.7 for r in log)
    if version == "mid":
        assert (cell["alpha"], cell["per_position"]) == (want["alpha"], want["per_position"])
    else:  # only spec_verify_ct: accepted = completion_tokens - spec_verify_ct, no per-position
        tokens = sum(r["tokens"] for r in log)
        verify = sum(r["verify_ct"] for r in log)
        assert cell["alpha"] == round((tokens - verify) / (2 * verify), 6) and cell["per_position"] is None


def test_spec_bench_file_runs_category_by_category(tmp_path: Path) -> None:
    questions = tmp_path / "question.jsonl"
    rows = [{"question_id": i, "category": cat, "turns": [f"{cat} question {i}?", f"follow-up {i}?"]}
            for i, cat in enumerate(["writing", "coding", "writing", "math_reasoning", "coding", "qa"] * 2)]
    questions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with SGLangDouble(rates=[0.7, 0.4], steps=2) as server:
        result = profile(server.url, tmp_path / "run", "--prompts", str(questions), "--category-map",
                         "qa=rag", "--temperatures", "0", "--max-new-tokens", "20", "--no-early-stop")
        assert result.exit_code == 0, result.output
        log = server.log[1:]  # the first request is the profiler's untimed warm-up (picker.profiler.source.WARMUP)
    cells = json.loads((tmp_path / "run" / "summary.json").read_text())["cells"]
    assert {(c["task"], c["samples"]) for c in cells} == {("creative", 4), ("code", 4), ("math", 2), ("rag", 2)}
    # Turn 2 is sent after turn 1's generation, inside the conversation.
    second = [r["text"] for r in log if "follow-up 0?" in r["text"]]
    assert len(second) == 1 and second[0].startswith("User: writing question 0?\nAssistant: tok")
    # The cells feed the policy.
    assert {c.task for c in load_measurements(tmp_path / "run" / "summary.json").cells} == {"creative", "code", "math",
                                                                                           "rag"}


def test_workload_profile_picks_tasks_and_temperatures(tmp_path: Path) -> None:
    profile_yaml = Path(__file__).resolve().parents[1] / "profiles" / "chat-70b-h100.yaml"
    with SGLangDouble(rates=[0.5], steps=1) as server:
        result = profile(server.url, tmp_path, "--workload", str(profile_yaml), "--limit-per-task", "2",
                         "--max-new-tokens", "6")
    assert result.exit_code == 0, result.output
    assert "no built-in prompts for translation" in result.stderr
    cells = json.loads((tmp_path / "summary.json").read_text())["cells"]
    assert {c["task"] for c in cells} == {"chat", "code", "math", "rag", "creative"}
    assert {c["temperature"] for c in cells} == {0.0, 0.7, 1.0}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _one_error_line(result: Any, *needles: str) -> str:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: http://127.0.0.1:"), result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("backend", ["sglang", "vllm"])
def test_connection_refused(tmp_path: Path, backend: str) -> None:
    port = _closed_port()
    result = profile(f"http://127.0.0.1:{port}", tmp_path, "--strategies", "ngram", backend=backend)
    _one_error_line(result, f":{port}/", "connection refused", "after 2 attempts")


def _sglang_with(generate: Any) -> Loopback:
    """Server info as SGLang documents it; ``/generate`` answered by ``generate(body)``."""
    info = {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
            "speculative_num_draft_tokens": 4, "internal_states": [{}]}

    def handle(method: str, path: str, body: bytes) -> tuple[int, bytes, str]:
        if path == "/get_server_info":
            return as_json(info)
        return generate(body)

    return Loopback(handle)


def _slow(body: bytes) -> tuple[int, bytes, str]:
    time.sleep(6.0)  # well past the 2 s timeout, even when a loaded machine delays the client
    return sse({"text": "x", "meta_info": {"completion_tokens": 1, "spec_verify_ct": 1}})


@pytest.mark.parametrize(("generate", "needles"), [
    (lambda body: (500, b"boom", "text/plain"), ["/generate", "HTTP 500"]),
    (_slow, ["/generate", "timed out after 2 s"]),
    (lambda body: sse(b'data: {"text": "x", "meta_info": {\n\n'), ["/generate", "malformed JSON"]),
    (lambda body: as_json({"text": "x", "meta_info": {}}), ["/generate", "not server-sent events"]),
    (lambda body: sse({"text": "x", "meta_info": {"completion_tokens": 5}}), ["/generate", "spec_verify_ct"]),
    (lambda body: sse({"text": "x", "meta_info": {"completion_tokens": 5, "spec_verify_ct": "2"}}),
     ["spec_verify_ct", "non-negative integer"]),
])
def test_sglang_faults_end_in_one_line_and_keep_a_summary(tmp_path: Path, generate: Any, needles: list[str]) -> None:
    with _sglang_with(generate) as server:
        # 2 s, not less: on a loaded 2-core machine even /get_server_info can take half a second.
        result = profile(server.url, tmp_path, "--tasks", "math", "--limit-per-task", "3", "--timeout", "2")
    line = _one_error_line(result, *needles)
    assert "partial summary kept" in line
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["run"]["status"].startswith("failed: http://127.0.0.1:")


def test_sglang_without_speculation_is_refused(tmp_path: Path) -> None:
    with Loopback(lambda m, p, b: as_json({"speculative_algorithm": None})) as server:
        result = profile(server.url, tmp_path)
    _one_error_line(result, "/get_server_info", "without speculative decoding")


def test_failure_mid_run_keeps_every_finished_record(tmp_path: Path) -> None:
    with SGLangDouble(rates=[0.8], steps=1, fail_after=6) as server:  # 5 timed after the warm-up
        result = profile(server.url, tmp_path, "--tasks", "math", "--limit-per-task", "12", "--concurrency", "1",
                         "--no-early-stop")
    _one_error_line(result, "HTTP 500", "partial summary kept")
    assert len(records_of(tmp_path)) == 5
    cell = json.loads((tmp_path / "summary.json").read_text())["cells"][0]
    assert cell["samples"] == 5


def _vllm_with(metrics: str, completions: Any) -> Loopback:
    def handle(method: str, path: str, body: bytes) -> tuple[int, bytes, str]:
        if path == "/v1/models":
            return as_json({"data": [{"id": "zoo"}]})
        if path == "/metrics":
            return 200, metrics.encode(), "text/plain"
        return completions(body)

    return Loopback(handle)


GOOD_METRICS = "\n".join([
    "# TYPE vllm:spec_decode_num_drafts_total counter",
    'vllm:spec_decode_num_drafts_total{engine="0",model_name="zoo"} 0.0',
    'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="zoo"} 0.0',
    'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="zoo"} 0.0',
    'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="zoo",position="0"} 0.0',
    'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="zoo",position="1"} 0.0',
])


@pytest.mark.parametrize(("metrics", "completions", "needles"), [
    ("vllm:num_requests_running 0\n", None, ["/metrics", "vllm:spec_decode_num_drafts_total"]),
    (GOOD_METRICS, lambda body: (500, b"x", "text/plain"), ["/v1/completions", "HTTP 500"]),
    (GOOD_METRICS, lambda body: (200, b"<html>", "text/html"), ["/v1/completions", "not server-sent events"]),
    (GOOD_METRICS, lambda body: sse(b"data: <html>\n\n"), ["/v1/completions", "malformed JSON"]),
    (GOOD_METRICS, lambda body: sse({"choices": []}), ["/v1/completions", "usage.completion_tokens"]),
])
def test_vllm_faults(tmp_path: Path, metrics: str, completions: Any, needles: list[str]) -> None:
    with _vllm_with(metrics, completions) as server:
        result = profile(server.url, tmp_path, "--strategies", "ngram", "--tasks", "math", "--limit-per-task", "2",
                         backend="vllm")
    _one_error_line(result, *needles)


def test_ambiguous_sglang_algorithm_needs_the_strategy_named(tmp_path: Path) -> None:
    with SGLangDouble(rates=[0.5], steps=1, algorithm="NGRAM") as server:
        result = profile(server.url, tmp_path, "--tasks", "math")
        assert result.exit_code == 2 and "could be lookahead or ngram" in result.stderr
        named = profile(server.url, tmp_path / "named", "--tasks", "math", "--strategies", "ngram",
                        "--limit-per-task", "2", "--max-new-tokens", "8")
    assert named.exit_code == 0, named.output


def test_vllm_needs_the_strategy_named(tmp_path: Path) -> None:
    with _vllm_with(GOOD_METRICS, lambda body: vllm_reply(4)) as server:
        result = profile(server.url, tmp_path, "--tasks", "math", backend="vllm")
    assert result.exit_code == 2 and "--strategies" in result.stderr


def test_plain_url_is_for_live_backends_and_must_answer(tmp_path: Path) -> None:
    """``--plain-url`` times plain decoding on a second live server: refused for the torch backend and
    for a "plain" server that speculates, and a plain server that does not answer ends in one line
    naming it."""
    result = profile("http://127.0.0.1:1", tmp_path / "t", "--plain-url", "http://127.0.0.1:1", backend="torch")
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "--plain-url is for live backends" in result.stderr
    with SGLangDouble(rates=[0.5], steps=1) as server:
        result = profile(server.url, tmp_path, "--plain-url", server.url, "--tasks", "math")
    _one_error_line(result, "/get_server_info", "the plain server speculates (EAGLE3)")
    port = _closed_port()
    with _vllm_with(GOOD_METRICS, lambda body: vllm_reply(4)) as server:
        result = profile(server.url, tmp_path / "v", "--strategies", "ngram", "--tasks", "math",
                         "--plain-url", f"http://127.0.0.1:{port}", backend="vllm")
    _one_error_line(result, f":{port}/v1/models", "connection refused")


def test_plain_url_baseline_reaches_the_summary(tmp_path: Path) -> None:
    """Loopback stand-ins in vLLM's documented formats (``/v1/models``, ``/v1/completions``,
    ``/metrics``): the plain server's waves become the baseline of ``speedup_vs_plain``; a source
    without step timings reports no step-cost ratios (the real-server run: tests/engines)."""
    with _vllm_with(GOOD_METRICS, lambda body: vllm_reply(8)) as spec, \
            _vllm_with("", lambda body: vllm_reply(8)) as plain:
        result = profile(spec.url, tmp_path, "--strategies", "ngram", "--tasks", "math", "--limit-per-task", "2",
                         "--temperatures", "0", "--no-early-stop", "--concurrency", "1", "--plain-url", plain.url,
                         backend="vllm")
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [(b["task"], b["tokens"]) for b in summary["baselines"]] == [("math", 16)]
    (cell,) = summary["cells"]
    assert cell["speedup_vs_plain"] is not None and cell["v_vs_plain_forward"] is None


def test_sglang_plain_url_baseline_reaches_the_summary(tmp_path: Path) -> None:
    """SGLang too times plain decoding on a second server (the plan's measure command asks for it):
    the plain double (launched without ``--speculative-algorithm``: one token a forward, no ``spec_*``
    fields) gets the same prompts, and its tokens become the baseline of ``speedup_vs_plain``."""
    with SGLangDouble(rates=[0.9, 0.7], steps=2, step_delay=0.002) as spec, \
            SGLangDouble(rates=[], steps=0, algorithm=None, step_delay=0.002) as plain:
        result = profile(spec.url, tmp_path, "--tasks", "math", "--limit-per-task", "2", "--temperatures", "0",
                         "--no-early-stop", "--concurrency", "1", "--max-new-tokens", "16", "--plain-url", plain.url)
        plain_texts = [r["text"] for r in plain.log]
        spec_texts = [r["text"] for r in spec.log]
    assert result.exit_code == 0, result.output
    assert plain_texts[1:] and sorted(plain_texts[1:]) == sorted(spec_texts[1:])  # after each one's warm-up
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [(b["task"], b["tokens"]) for b in summary["baselines"]] == [("math", 32)]
    (cell,) = summary["cells"]
    assert cell["speedup_vs_plain"] is not None


def test_vllm_wave_span_is_its_requests_not_the_counter_reads(tmp_path: Path) -> None:
    """Throughput is tokens over the wave's span; for vLLM that span runs from the first request sent
    to the last answered. The ``/metrics`` reads around a speculative wave (one before, two or more
    after) must stay outside it: a plain wave has none, so inside they would bill speculation alone
    (on the zoo they took 0.08-0.14 s of a 0.2 s wave). Here a read takes 0.3 s, a completion 0.05 s."""
    hold, read = 0.05, 0.3

    def slow_metrics(metrics: str) -> Any:
        def handle(method: str, path: str, body: bytes) -> tuple[int, bytes, str]:
            if path == "/v1/models":
                return as_json({"data": [{"id": "zoo"}]})
            if path == "/metrics":
                time.sleep(read)
                return 200, metrics.encode(), "text/plain"
            time.sleep(hold)
            return vllm_reply(8)
        return Loopback(handle)

    with slow_metrics(GOOD_METRICS) as spec, slow_metrics("") as plain:
        result = profile(spec.url, tmp_path, "--strategies", "ngram", "--tasks", "math", "--limit-per-task", "4",
                         "--temperatures", "0", "--no-early-stop", "--concurrency", "2", "--plain-url", plain.url,
                         backend="vllm")
    assert result.exit_code == 0, result.output
    records = records_of(tmp_path)
    assert len(records) == 4  # two waves of two, each on both servers
    for r in records:
        span = r.extra["t1"] - r.extra["wave_t0"]
        assert hold <= span < hold + read / 2, (r.cell.strategy, span)
    (cell,) = json.loads((tmp_path / "summary.json").read_text())["cells"]
    # Both servers answer alike, so speculation's throughput is plain's up to timer noise.
    assert 0.6 < cell["throughput_gain_vs_plain"] < 1.6

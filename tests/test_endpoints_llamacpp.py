"""The llama.cpp live backend over real HTTP on loopback: exact arithmetic, and every fault.

``LlamaDouble`` is a loopback server that speaks llama-server's documented format (llama.cpp
vendored in llama-cpp-python 0.3.36: ``tools/server/README.md`` for ``POST /completion``,
``GET /props`` and ``GET /slots``; ``server_slot_stats::to_json`` for ``timings.draft_n`` /
``draft_n_accepted``, left out of a response that drafted nothing; ``server_slot::to_json`` for a
slot's ``speculative`` flag and its last task's ``params["speculative.types"]``;
``server_task_result_metrics::to_metrics`` for the ``llamacpp:spec_decode_*`` counters of
``GET /metrics``, answered only with ``--metrics``). As the real server does, ``/props`` says
``speculative.types: none`` whatever runs.
Behind it runs a chain process with known rates, as ``--spec-synth-rates`` forces them: position
k is accepted with unconditional probability ``rates[k]`` (so conditionally rates[k]/rates[k-1]),
drafts are cut to the tokens left, like the server's ``get_n_draft_max``. Asked to stream, it
answers as the server does (``send_partial_response``): one ``data:`` event per token, the tokens of
one step back to back (now and then one held back, riding with the next: a token ending inside a
UTF-8 character), each with the slot's ``timings`` when ``timings_per_token`` is set
(``predicted_ms`` moving once per step), then the final event (``stop: true``, ``timings``,
``tokens_predicted``). The real server is checked the same way in ``tests/engines/test_llamacpp.py``.
"""

from __future__ import annotations

import json
import random
import threading
import urllib.request
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from picker.profiler.run import records_of
from picker.profiler.vllm import GAP_S
from tests.test_endpoints import _closed_port, _one_error_line, profile
from tests.test_profiler_sglang_double import Loopback, as_events, as_json, sse

RATES = [0.9, 0.6, 0.3]


class LlamaDouble(Loopback):
    """llama-server's ``/props``, ``/completion`` and ``/metrics`` over a known chain process.

    ``types``: the server's ``--spec-type`` ("" for none); ``slots``: whether ``/slots`` answers
    (off: ``--no-slots``); ``fail_after``: HTTP 500 to every ``/completion`` after that many.
    """

    def __init__(self, rates: list[float], *, types: str = "draft-simple", slots: bool = True, metrics: bool = True,
                 fail_after: int | None = None, step_s: float = 0.0) -> None:
        super().__init__(self._handle)
        self.step_s = step_s  # seconds each streamed step takes
        self.rates, self.types, self.slots, self.metrics = list(rates), types, slots, metrics
        self.fail_after = fail_after
        self.log: list[dict[str, Any]] = []  # the truth per request
        self.lock = threading.Lock()
        self.counters = {"drafts": 0, "draft_tokens": 0, "accepted": 0}
        self.per_pos = [0] * len(rates)
        self.reached = [0] * len(rates)

    def _handle(self, method: str, path: str, body: bytes) -> tuple[int, bytes, str]:
        if path == "/props":
            params = {"temperature": 0.8, "n_predict": -1, "speculative.types": "none"}
            return as_json({"default_generation_settings": {"params": params, "n_ctx": 1024}, "total_slots": 4,
                            "model_path": "/models/zoo-ci-target.gguf", "endpoint_slots": self.slots,
                            "endpoint_metrics": self.metrics, "build_info": "b0-double"})
        if path == "/slots":
            ran = {"id_task": 0, "params": {"speculative.types": f"none,{self.types}"}} if self.log else {}
            return as_json([{"id": i, "n_ctx": 1024, "speculative": bool(self.types), "is_processing": False,
                             **(ran if i == 0 else {})} for i in range(4)])
        if path == "/metrics":
            if not self.metrics:
                return as_json({"error": {"code": 501, "message": "Start it with `--metrics`"}}, 501)
            return 200, self._prometheus().encode(), "text/plain; version=0.0.4"
        if method == "POST" and path == "/completion":
            with self.lock:
                if self.fail_after is not None and len(self.log) >= self.fail_after:
                    return 500, b'{"error": {"code": 500, "message": "boom"}}', "application/json"
            req = json.loads(body)
            reply, steps = self._complete(req)
            return as_events(self._events(req, reply, steps), done=False) if req.get("stream") else as_json(reply)
        return 404, b"not found", "text/plain"

    def _events(self, req: dict[str, Any], reply: dict[str, Any], steps: list[int]) -> list[tuple[float, Any]]:
        """The streamed form of ``reply``: an event per token, the step's tokens sharing predicted_ms."""
        events: list[tuple[float, Any]] = []
        done = sent = 0
        for i, n in enumerate(steps):
            wait = self.step_s  # the step's time, before its first event
            for k in range(n):
                done += 1
                if k < n - 1 and done % 5 == 2:
                    continue  # held back as the server holds a token that ends inside a UTF-8 character
                # A held-back token's text rides with the next event's (its id does not).
                event: dict[str, Any] = {"index": 0, "content": " tok" * (done - sent), "tokens": [7],
                                         "stop": False, "id_slot": 0, "tokens_predicted": done,
                                         "tokens_evaluated": 12}
                sent = done
                if req.get("timings_per_token"):
                    event["timings"] = {"prompt_n": 12, "prompt_ms": 1.0, "predicted_n": done,
                                        "predicted_ms": 0.001 + 5.0 * i}
                events.append((wait, event))
                wait = 0.0
        events.append((0.0, {**reply, "content": ""}))
        return events

    def _complete(self, req: dict[str, Any]) -> tuple[dict[str, Any], list[int]]:
        n_predict, rng = int(req["n_predict"]), random.Random(req["seed"])
        tokens, drafted, accepted, steps, verify = 1, 0, 0, 0, 0  # the prefill emits the first token
        emitted = [1]
        reached, per_pos = [0] * len(self.rates), [0] * len(self.rates)
        while tokens < n_predict:
            n = min(len(self.rates), n_predict - tokens - 1)  # the server drafts only what fits
            k, prev = 0, 1.0
            while k < n and rng.random() < self.rates[k] / prev:
                prev = self.rates[k]
                k += 1
            for j in range(min(k + 1, n)):
                reached[j] += 1
            for j in range(k):
                per_pos[j] += 1
            steps, verify = steps + 1, verify + (n > 0)
            drafted, accepted, tokens = drafted + n, accepted + k, tokens + k + 1
            emitted.append(k + 1)
        with self.lock:
            self.log.append({"prompt": req["prompt"], "temperature": req["temperature"], "seed": req["seed"],
                             "top_k": req.get("top_k"), "tokens": tokens, "drafted": drafted,
                             "accepted": accepted, "steps": steps, "emitted": emitted, "per_pos": per_pos})
            self.counters["drafts"] += verify
            self.counters["draft_tokens"] += drafted
            self.counters["accepted"] += accepted
            self.per_pos = [a + b for a, b in zip(self.per_pos, per_pos)]
            self.reached = [a + b for a, b in zip(self.reached, reached)]
        timings: dict[str, Any] = {"prompt_n": 12, "prompt_ms": 1.0, "predicted_n": tokens, "predicted_ms": 5.0}
        if drafted:
            timings.update(draft_n=drafted, draft_n_accepted=accepted)
        return {"index": 0, "content": " tok" * tokens, "tokens": [], "id_slot": 0, "stop": True,
                "model": "zoo", "tokens_predicted": tokens, "tokens_evaluated": 12, "stop_type": "limit",
                "stopping_word": "", "truncated": False, "timings": timings}, emitted

    def _prometheus(self) -> str:
        with self.lock:
            lines = [f"llamacpp:spec_decode_num_drafts_total {self.counters['drafts']}",
                     f"llamacpp:spec_decode_num_draft_tokens_total {self.counters['draft_tokens']}",
                     f"llamacpp:spec_decode_num_accepted_tokens_total {self.counters['accepted']}",
                     "llamacpp:n_decode_total 7"]
            lines += [f'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="{k}"}} {v}'
                      for k, v in enumerate(self.per_pos)] if self.counters["drafts"] else []
        return "".join(f"# TYPE {line.split('{')[0].split(' ')[0]} counter\n{line}\n" for line in lines)


def llama(url: str, out: Path, *args: str) -> Any:
    """``specpick profile --backend llamacpp``; a generous timeout unless ``args`` sets one (busy machines)."""
    return profile(url, out, "--timeout", "30", *args, backend="llamacpp")


def test_arithmetic_is_exact_and_the_server_counters_agree(tmp_path: Path) -> None:
    with LlamaDouble(RATES) as server:
        result = llama(server.url, tmp_path, "--strategies", "vanilla", "--tasks", "math", "--temperatures", "0,0.7",
                       "--limit-per-task", "24", "--max-new-tokens", "120", "--no-early-stop",
                       "--num-draft-tokens", "3")
        assert result.exit_code == 0, result.output
        # The first request is the profiler's untimed warm-up (picker.profiler.source.WARMUP): the server
        # counts it; the profiler's report, differenced from a scrape taken after it, does not.
        warm, log = server.log[0], server.log[1:]
        counters, reached = dict(server.counters), server.reached
        per_pos = [a - b for a, b in zip(server.per_pos, warm["per_pos"])]
        counters["draft_tokens"] -= warm["drafted"]
        counters["accepted"] -= warm["accepted"]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["run"]["status"] == "complete"
    assert len(summary["cells"]) == 2
    for cell in summary["cells"]:
        rows = [r for r in log if r["temperature"] == cell["temperature"]]
        drafted, accepted = sum(r["drafted"] for r in rows), sum(r["accepted"] for r in rows)
        assert (cell["strategy"], cell["num_draft_tokens"], cell["samples"]) == ("vanilla", 3, 24)
        assert cell["alpha"] == round(accepted / drafted, 6)
        assert cell["tokens"] == sum(r["tokens"] for r in rows)
        assert cell["target_forwards"] == sum(r["steps"] for r in rows) + len(rows)
        assert cell["per_position"] is None  # llama-server reports no positions per response
    # Plain temperature sampling; a seed per prompt (the same in every cell, so cells compare like for like).
    assert all(r["top_k"] == 0 for r in log) and len({(r["temperature"], r["seed"]) for r in log}) == len(log)
    report = summary["run"]["server_report"]
    assert (report["num_draft_tokens"], report["num_accepted_tokens"]) == (counters["draft_tokens"],
                                                                           counters["accepted"])
    assert report["accepted_per_pos"] == per_pos
    assert report["per_position_unconditional"] == pytest.approx(RATES, abs=0.05)
    conditional = [RATES[0]] + [b / a for a, b in pairwise(RATES)]
    assert report["per_position"] == pytest.approx(conditional, abs=0.06)
    assert [a / n for a, n in zip(per_pos, reached)] == pytest.approx(conditional, abs=0.06)


def test_ngram_server_is_detected_and_draftless_responses_count_zero(tmp_path: Path) -> None:
    args = ("--tasks", "math", "--temperatures", "0", "--limit-per-task", "3", "--max-new-tokens", "2",
            "--num-draft-tokens", "1")
    with LlamaDouble([0.0], types="ngram-simple", metrics=False) as server:
        fresh = llama(server.url, tmp_path / "fresh", *args)  # no request served yet: /slots cannot tell
        assert fresh.exit_code == 2 and "--strategies" in fresh.stderr, fresh.output
        urllib.request.urlopen(server.url + "/completion", json.dumps({"prompt": "x", "n_predict": 1,
                                                                       "temperature": 0, "seed": 1}).encode())
        result = llama(server.url, tmp_path, *args)  # now its slot shows none,ngram-simple
        assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "summary.json").read_text())
    cell = summary["cells"][0]
    assert (cell["strategy"], cell["draft_tokens"], cell["alpha"]) == ("ngram", 0, 0.0)
    assert "--metrics" in summary["run"]["server_report"]["note"]


def test_connection_refused(tmp_path: Path) -> None:
    port = _closed_port()
    _one_error_line(llama(f"http://127.0.0.1:{port}", tmp_path), f":{port}/props", "connection refused",
                    "after 2 attempts")


def _completion(reply: Any, slots: bool) -> Loopback:
    """``/props`` and ``/slots`` as llama-server documents them (draft-simple, no --metrics); ``/completion``
    answered by ``reply``."""
    double = LlamaDouble(RATES, slots=slots, metrics=False)

    def handle(method: str, path: str, body: bytes) -> tuple[int, bytes, str]:
        return reply(body) if path == "/completion" else double._handle(method, path, body)

    return Loopback(handle)


def _streamed(final: dict[str, Any]) -> tuple[int, bytes, str]:
    """``final`` as the end of a stream: one event per token it counts, then itself with ``stop: true``."""
    tokens = final.get("tokens_predicted", 0)
    events = [{"content": " x", "tokens": [7], "stop": False} for _ in range(tokens if isinstance(tokens, int) else 0)]
    return sse(*events, {**final, "stop": True})


def _slow(body: bytes) -> tuple[int, bytes, str]:
    import time

    time.sleep(4.0)
    return _streamed({"content": "x", "tokens_predicted": 1, "timings": {}})


@pytest.mark.parametrize(("reply", "slots", "needles"), [
    (lambda body: (500, b'{"error": {"message": "boom"}}', "application/json"), True,
     ["/completion", "HTTP 500", "boom"]),
    (_slow, True, ["/completion", "timed out after 1.5 s"]),
    (lambda body: sse(b'data: {"content": "x", "timings": {\n\n'), True, ["/completion", "malformed JSON"]),
    (lambda body: as_json({"content": "x", "tokens_predicted": 1, "timings": {}}), True,
     ["/completion", "not server-sent events"]),
    (lambda body: sse({"content": "x", "tokens": [7], "stop": False}), True,
     ["/completion", "without its final event"]),
    (lambda body: sse({"content": "x", "tokens": [7], "tokens_predicted": 3},
                      {"content": "", "stop": True, "tokens_predicted": 2, "timings": {}}),
     True, ["/completion", "carried 3 tokens"]),
    # Started with --no-slots, the server does not say whether it speculates: no draft_n is an error.
    (lambda body: _streamed({"content": "x", "tokens_predicted": 4, "timings": {"predicted_n": 4}}), False,
     ["/completion", "timings has no draft_n", "--spec-type"]),
    (lambda body: _streamed({"content": "x", "tokens_predicted": 4, "timings": {"draft_n_accepted": 1}}), True,
     ["/completion", "timings has no draft_n"]),
    (lambda body: _streamed({"content": "x", "tokens_predicted": 4,
                             "timings": {"draft_n": "6", "draft_n_accepted": 1}}),
     True, ["timings.draft_n", "non-negative integer"]),
    (lambda body: _streamed({"content": "x", "tokens_predicted": 4}), True, ["/completion", "'timings'"]),
])
def test_faults_end_in_one_line_and_keep_a_summary(tmp_path: Path, reply: Any, slots: bool,
                                                   needles: list[str]) -> None:
    # Only the slow reply gets a short timeout: on a busy machine a prompt reply can take 0.5 s.
    timeout = "1.5" if reply is _slow else "30"
    with _completion(reply, slots) as server:
        result = llama(server.url, tmp_path, "--strategies", "vanilla", "--tasks", "math", "--limit-per-task", "3",
                       "--timeout", timeout)
    line = _one_error_line(result, *needles)
    assert "partial summary kept" in line
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["run"]["status"].startswith("failed: http://127.0.0.1:")


def test_server_without_speculation_is_refused(tmp_path: Path) -> None:
    with LlamaDouble(RATES, types="") as server:
        result = llama(server.url, tmp_path)
    _one_error_line(result, "/slots", "without speculative decoding")


def test_failure_mid_run_keeps_every_finished_record(tmp_path: Path) -> None:
    with LlamaDouble(RATES, fail_after=6) as server:  # 5 timed after the warm-up
        result = llama(server.url, tmp_path, "--strategies", "vanilla", "--tasks", "math", "--limit-per-task", "12",
                       "--concurrency", "1", "--no-early-stop", "--max-new-tokens", "16")
    _one_error_line(result, "HTTP 500", "partial summary kept")
    assert len(records_of(tmp_path)) == 5
    assert json.loads((tmp_path / "summary.json").read_text())["cells"][0]["samples"] == 5


def test_plain_url_times_the_baseline_on_a_server_without_speculation(tmp_path: Path) -> None:
    """``--plain-url``: plain cells go to the second server (same prompts, same seeds), become the
    baseline of ``speedup_vs_plain``, and stay out of the speculative server's counters. The real
    servers: tests/engines/test_llamacpp.py."""
    with LlamaDouble(RATES) as spec, LlamaDouble([], types="") as plain:
        result = llama(spec.url, tmp_path, "--strategies", "vanilla", "--tasks", "math", "--temperatures", "0",
                       "--limit-per-task", "3", "--max-new-tokens", "40", "--no-early-stop", "--num-draft-tokens",
                       "3", "--concurrency", "1", "--plain-url", plain.url)
        assert result.exit_code == 0, result.output
        spec_log, plain_log, counters = list(spec.log), list(plain.log), dict(spec.counters)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["run"]["source"]["plain_url"] == plain.url
    # One untimed warm-up per server, then the same prompts with the same seeds on both.
    assert len(spec_log) == len(plain_log) == 4
    assert [(r["prompt"], r["seed"]) for r in spec_log[1:]] == [(r["prompt"], r["seed"]) for r in plain_log[1:]]
    assert all(r["drafted"] == 0 for r in plain_log)
    records = records_of(tmp_path)
    assert {r.source for r in records if r.cell.is_plain} == {"llamacpp-plain-server"}
    plain_tokens = sum(r["tokens"] for r in plain_log[1:])
    assert [(b["task"], b["tokens"]) for b in summary["baselines"]] == [("math", plain_tokens)]
    (cell,) = summary["cells"]
    assert cell["speedup_vs_plain"] is not None and cell["speedup_vs_plain"] > 0
    report = summary["run"]["server_report"]  # differenced from the first timed request: no warm-up
    assert (report["num_draft_tokens"], report["num_accepted_tokens"]) == (cell["draft_tokens"],
                                                                           cell["accepted_tokens"])
    assert report["num_draft_tokens"] == counters["draft_tokens"] - spec_log[0]["drafted"]
    # Each wave's span starts after the quiet gap between the two servers, not before it.
    for r in records:
        assert r.extra["t1"] - r.extra["wave_t0"] < GAP_S, (r.cell.id, r.extra)


def test_plain_url_must_not_speculate(tmp_path: Path) -> None:
    with LlamaDouble(RATES) as spec, LlamaDouble(RATES) as other:
        result = llama(spec.url, tmp_path, "--strategies", "vanilla", "--tasks", "math", "--plain-url", other.url)
    _one_error_line(result, f"{other.url}/slots", "plain server can speculate")


def test_recommend_uses_llamacpps_step_cost_from_a_plain_baseline(tmp_path: Path) -> None:
    """Measurements from ``--backend llamacpp`` count as the llama_cpp engine's own (backend and
    engine names differ): with a plain baseline the evidence index derives the step ratio from them."""
    from picker.engine.plugins import load_strategies
    from picker.inputs.measurements import load_measurements
    from picker.inputs.workload import load_profile
    from picker.recommend.evidence_index import evidence, index_evidence
    from tests.engines.support import ROOT

    with LlamaDouble(RATES) as spec, LlamaDouble([], types="") as plain:
        result = llama(spec.url, tmp_path, "--strategies", "vanilla", "--tasks", "creative", "--temperatures", "1",
                       "--limit-per-task", "2", "--max-new-tokens", "24", "--no-early-stop", "--num-draft-tokens",
                       "3", "--plain-url", plain.url)
    assert result.exit_code == 0, result.output
    shipped = load_profile(ROOT / "profiles" / "creative-writing.yaml")
    assert shipped.engine.name == "llama_cpp"
    meas = load_measurements(tmp_path / "summary.json")
    # The double serves another model than the shipped profile's: its costs are not the deployment's
    # (picker.inputs.provenance). A profile of the served model and build takes them.
    assert not index_evidence(shipped, meas).measured_costs
    profile = shipped.model_copy(update={
        "model": shipped.model.model_copy(update={"name": "zoo-ci-target"}),
        "engine": shipped.engine.model_copy(update={"version": "b0-double"})})
    index = index_evidence(profile, meas)
    assert index.measured_costs
    ev = evidence(index, load_strategies()["vanilla"], "creative", 1.0)
    assert ev.source == "measured" and ev.cost is not None and ev.cost.step_points
    assert ev.cost.step_points[0][0] == 3


def test_streamed_chunks_are_the_servers_steps(tmp_path: Path) -> None:
    """One event per token, a step's tokens back to back: merged by their shared ``predicted_ms`` into one
    chunk per step, so the record's chunks are the double's steps and add up to its tokens exactly."""
    with LlamaDouble(RATES, step_s=0.004) as server:
        result = llama(server.url, tmp_path, "--strategies", "vanilla", "--tasks", "math", "--temperatures", "0",
                       "--limit-per-task", "4", "--max-new-tokens", "40", "--no-early-stop", "--num-draft-tokens",
                       "3", "--concurrency", "2")
        assert result.exit_code == 0, result.output
        log = {r["seed"]: r for r in server.log}
    from picker.profiler.llamacpp import request_seed

    for record in records_of(tmp_path):
        (timing,) = record.timings
        truth = log[request_seed(0, record.prompt_ids[0], 0)]
        assert list(timing.chunks) == truth["emitted"] and timing.tokens == record.tokens == truth["tokens"]
        # A step apart, not two events of one step (the median: a client thread descheduled on a busy
        # machine stamps one arrival late, and the gap after it looks short).
        assert sorted(timing.gaps_s)[len(timing.gaps_s) // 2] >= 0.003
        assert timing.engine == {"prompt_ms": 1.0, "predicted_ms": 5.0, "predicted_n": float(truth["tokens"]),
                                 "prompt_n": 12.0}
    (cell,) = json.loads((tmp_path / "summary.json").read_text())["cells"]
    assert cell["engine_clock"]["requests"] == 4 and cell["itl_ms_p50"] >= 3.0

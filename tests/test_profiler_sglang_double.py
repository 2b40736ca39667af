"""A loopback test double of an SGLang server, and the checks that it speaks SGLang's documented format.

SGLang cannot run without a GPU, so the profiler's SGLang path is tested against this double: a
real HTTP server on 127.0.0.1 (``http.server`` in a thread) that answers ``POST /generate`` and
``GET /get_server_info`` in the format SGLang documents (``shared/research/sglang.md`` §2: the
finished response's ``meta_info`` with ``completion_tokens``, ``spec_verify_ct``,
``spec_num_correct_drafts`` / ``spec_accept_token_num``, ``spec_correct_drafts_histogram`` /
``spec_accept_histogram``, ``spec_accept_length``; server args at the top level of
``/get_server_info`` and ``internal_states[0].avg_spec_accept_length``).

Behind the format runs a speculative process whose every count is known: each verify step of a
chain of ``steps`` drafts accepts position k with probability ``rates[k]`` given all earlier
positions were accepted (seeded per request), then emits the accepted drafts plus one bonus
token, until ``max_new_tokens``. The double logs the exact counts of every request, so tests can
check the profiler's arithmetic to the last token and its estimates against ``rates``.
With ``"stream": true`` it answers as SGLang streams (``data: {...}`` server-sent events, one per
verify step, ``text`` and ``meta_info.completion_tokens`` cumulative, the full ``meta_info`` on the
last, then ``data: [DONE]``), ``step_delay`` seconds apart.

    >>> with SGLangDouble(rates=[1.0, 0.0], steps=2) as server:
    ...     import json, urllib.request
    ...     body = json.dumps({"text": "hi", "sampling_params": {"max_new_tokens": 7}}).encode()
    ...     reply = json.load(urllib.request.urlopen(server.url + "/generate", body))
    >>> reply["meta_info"]["spec_verify_ct"], reply["meta_info"]["spec_num_correct_drafts"]
    (3, 3)
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
import zlib
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

# (method, path, body) -> (status, body, type); a body that is an iterator of bytes is streamed as it comes
Handler = Callable[[str, str, bytes], tuple[int, Any, str]]


class Loopback:
    """``handler`` behind a threaded HTTP server on 127.0.0.1 (an ephemeral port); a context manager."""

    def __init__(self, handler: Handler) -> None:
        outer = self

        class _H(BaseHTTPRequestHandler):
            def _serve(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                try:
                    status, payload, ctype = outer.handler(method, self.path, body)
                except ConnectionError:
                    return
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                streamed = not isinstance(payload, bytes)
                if not streamed:
                    self.send_header("Content-Length", str(len(payload)))
                self.end_headers()  # a streamed body (HTTP/1.0) ends when the connection closes
                try:
                    for piece in payload if streamed else [payload]:
                        self.wfile.write(piece)
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout test)
                    pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                self._serve("GET")

            def do_POST(self) -> None:  # noqa: N802
                self._serve("POST")

            def log_message(self, *args: Any) -> None:  # keep test output clean
                return

        self.handler = handler
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _H)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Loopback:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def as_json(obj: Any, status: int = 200) -> tuple[int, bytes, str]:
    return status, json.dumps(obj).encode(), "application/json"


def sse(*events: Any) -> tuple[int, bytes, str]:
    """Server-sent events at once: ``data: JSON`` each (bytes are sent as they are), then ``[DONE]``."""
    body = b"".join(e if isinstance(e, bytes) else f"data: {json.dumps(e)}\n\n".encode() for e in events)
    return 200, body + b"data: [DONE]\n\n", "text/event-stream"


def vllm_reply(tokens: int, per_chunk: int = 2) -> tuple[int, bytes, str]:
    """A streamed ``/v1/completions`` answer as vLLM sends it with ``continuous_usage_stats``: chunks
    of ``per_chunk`` tokens with the running usage, then the usage alone."""
    events, done = [], 0
    while done < tokens:
        n = min(per_chunk, tokens - done)
        done += n
        events.append({"choices": [{"index": 0, "text": " x" * n}], "usage": {"completion_tokens": done}})
    return sse(*events, {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": tokens}})


def as_events(events: list[tuple[float, Any]], done: bool = True) -> tuple[int, Any, str]:
    """Server-sent events, each ``data: JSON`` after waiting its delay (seconds), then ``[DONE]``."""
    def body() -> Any:
        for delay, event in events:
            time.sleep(delay)
            yield f"data: {json.dumps(event)}\n\n".encode()
        if done:
            yield b"data: [DONE]\n\n"

    return 200, body(), "text/event-stream"


class SGLangDouble(Loopback):
    """SGLang's documented ``/generate`` + ``/get_server_info`` over a known speculative process.

    ``version``: ``newest`` (spec_num_correct_drafts + spec_correct_drafts_histogram), ``mid``
    (spec_accept_token_num + spec_accept_histogram) or ``old`` (spec_verify_ct only).
    ``algorithm=None``: a plain server (no speculation: one token a forward, no ``spec_*`` fields).
    ``fail_after``: answer HTTP 500 to every ``/generate`` after that many requests; ``delay``:
    seconds each ``/generate`` takes (so a test can kill a run in the middle).
    """

    def __init__(self, rates: list[float], steps: int, *, version: str = "newest", algorithm: str | None = "EAGLE3",
                 seed: int = 0, fail_after: int | None = None, topk: int = 1, delay: float = 0.0,
                 step_delay: float = 0.0) -> None:
        super().__init__(self._handle)
        self.step_delay = step_delay
        self.rates, self.steps, self.version, self.algorithm = list(rates), steps, version, algorithm
        self.seed, self.fail_after, self.topk, self.delay = seed, fail_after, topk, delay
        self.log: list[dict[str, Any]] = []  # the truth per request: verify_ct, correct, hist, tokens
        self.lock = threading.Lock()
        self.total_accept_tokens = 0  # cumulative, as SGLang's scheduler keeps them
        self.total_forwards = 0

    def _handle(self, method: str, path: str, body: bytes) -> tuple[int, bytes, str]:
        if method == "GET" and path in ("/get_server_info", "/server_info"):
            return as_json(self._server_info())
        if method == "POST" and path == "/generate":
            with self.lock:
                if self.fail_after is not None and len(self.log) >= self.fail_after:
                    return 500, b"Internal Server Error", "text/plain"
            time.sleep(self.delay)
            req = json.loads(body)
            reply, steps = self._generate(req)
            if not req.get("stream"):
                return as_json(reply)
            meta, events, done = reply["meta_info"], [], 0
            for n in steps:  # one event per forward, counts cumulative; the full meta_info on the last
                done += n
                last = done == meta["completion_tokens"]
                events.append((self.step_delay, {"text": " tok" * done, "meta_info": meta if last else {
                    "id": meta["id"], "completion_tokens": done, "finish_reason": None}}))
            return as_events(events)
        return 404, b"not found", "text/plain"

    def _server_info(self) -> dict[str, Any]:
        state: dict[str, Any] = {"memory_usage": {}}
        with self.lock:
            if self.total_forwards:
                state["avg_spec_accept_length"] = self.total_accept_tokens / self.total_forwards
        return {"model_path": "/models/double", "speculative_algorithm": self.algorithm,
                "speculative_num_steps": self.steps, "speculative_eagle_topk": self.topk,
                "speculative_num_draft_tokens": self.steps + 1 if self.topk == 1 else 16,
                "internal_states": [state], "version": "0.5.23-double"}

    def _generate(self, req: dict[str, Any]) -> tuple[dict[str, Any], list[int]]:
        ids = req.get("input_ids")  # /generate takes the prompt as text or as input_ids
        text = req["text"] if ids is None else " ".join(map(str, ids))
        params = req.get("sampling_params", {})
        max_new = int(params.get("max_new_tokens", 128))
        rng = np.random.default_rng([self.seed, zlib.crc32(text.encode())])
        hist = [0] * (self.steps + 1)
        tokens, verify_ct, correct = 1, 0, 0  # the prefill emits the first token
        steps = [1]  # tokens each forward emitted
        while tokens < max_new:
            k = 0
            while k < self.steps and rng.random() < self.rates[k]:
                k += 1
            verify_ct += 1
            hist[k] += 1
            correct += k
            steps.append(min(k + 1, max_new - tokens))
            tokens += steps[-1]  # the output is cut at max_new; counters are not
        with self.lock:
            self.log.append({"text": text, "input_ids": ids, "verify_ct": verify_ct, "correct": correct, "hist": hist,
                             "tokens": tokens, "temperature": params.get("temperature"), "steps": steps})
            self.total_accept_tokens += correct + verify_ct
            self.total_forwards += verify_ct
        meta: dict[str, Any] = {"id": f"req-{len(self.log)}", "prompt_tokens": len(text.split()),
                                "completion_tokens": tokens, "finish_reason": {"type": "length", "length": max_new},
                                **({"spec_verify_ct": verify_ct} if self.algorithm is not None else {})}
        if self.algorithm is None:  # a server launched without --speculative-algorithm reports no spec_*
            pass
        elif self.version == "newest":
            meta.update(spec_num_correct_drafts=correct, spec_accepted_drafts=correct,
                        spec_num_proposed_drafts=verify_ct * self.steps,
                        spec_accept_rate=correct / max(1, verify_ct * self.steps),
                        spec_accept_length=tokens / verify_ct, spec_correct_drafts_histogram=hist,
                        spec_accept_histogram=hist)
        elif self.version == "mid":
            meta.update(spec_accept_token_num=correct, spec_draft_token_num=verify_ct * self.steps,
                        spec_accept_length=tokens / verify_ct, spec_accept_histogram=hist)
        return {"text": " tok" * tokens, "meta_info": meta}, steps


def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as resp:
        return json.load(resp)


def test_double_follows_the_documented_newest_format() -> None:
    with SGLangDouble(rates=[0.9, 0.6, 0.3], steps=3) as server:
        meta = _post(server.url + "/generate", {"text": "x", "sampling_params": {"max_new_tokens": 50}})["meta_info"]
        info = json.load(urllib.request.urlopen(server.url + "/get_server_info"))
    # spec_accept_length = completion_tokens / spec_verify_ct; proposed = verify_ct * (draft tokens - 1)
    assert meta["spec_accept_length"] == meta["completion_tokens"] / meta["spec_verify_ct"]
    assert meta["spec_num_proposed_drafts"] == meta["spec_verify_ct"] * (info["speculative_num_draft_tokens"] - 1)
    assert sum(meta["spec_correct_drafts_histogram"]) == meta["spec_verify_ct"]
    assert sum(k * n for k, n in enumerate(meta["spec_correct_drafts_histogram"])) == meta["spec_num_correct_drafts"]
    assert info["internal_states"][0]["avg_spec_accept_length"] > 1.0


def test_double_old_format_has_only_verify_count() -> None:
    with SGLangDouble(rates=[0.5], steps=1, version="old") as server:
        meta = _post(server.url + "/generate", {"text": "x", "sampling_params": {"max_new_tokens": 20}})["meta_info"]
    assert "spec_verify_ct" in meta and not any(k.startswith("spec_accept") or "correct" in k for k in meta)


def test_streamed_generate_is_one_event_per_forward(tmp_path: Any) -> None:
    """The profiler's SGLang path streams: each record's chunks are the double's forwards, their
    tokens its completion_tokens, a step apart."""
    from typer.testing import CliRunner

    from picker.cli.main import app
    from picker.profiler.run import records_of

    with SGLangDouble(rates=[0.8, 0.5], steps=2, step_delay=0.003) as server:
        result = CliRunner().invoke(app, ["profile", "--backend", "sglang", "--url", server.url, "--out", str(tmp_path),
                                          "--tasks", "math", "--temperatures", "0", "--limit-per-task", "4",
                                          "--max-new-tokens", "20", "--no-early-stop", "--quiet", "--no-plot"])
        assert result.exit_code == 0, result.output
        truth = {r["text"]: r for r in server.log}
    records = records_of(tmp_path)
    assert len(records) == 4
    for record in records:
        (timing,) = record.timings
        assert list(timing.chunks) in [r["steps"] for r in truth.values()] and timing.tokens == record.tokens
        # A step apart (the median: on a busy machine one arrival stamped late makes the next gap look short).
        assert sorted(timing.gaps_s)[len(timing.gaps_s) // 2] >= 0.002

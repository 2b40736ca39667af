"""Streamed responses turned into a request's clock: one chunk per engine step, its tokens counted.

Each engine streams server-sent events its own way; each parser reads ``(arrival time, event)``
pairs (``picker.profiler.http.HttpClient.post_stream``) and returns the text, the final event's
fields and the *emissions*: (arrival time, tokens) per chunk, where a chunk is what the engine
emitted at once -- a speculative step's accepted tokens are one chunk, one inter-token gap.

- vLLM ``/v1/completions`` (``stream_options.include_usage`` and ``continuous_usage_stats``): one
  event per engine step per request; tokens = the step's ``usage.completion_tokens`` increase;
  the last event carries the request's usage and no choices.
- SGLang ``/generate``: one event per step, ``meta_info.completion_tokens`` cumulative (tokens =
  its increase), ``text`` cumulative; ``data: [DONE]`` ends it; the last event's ``meta_info``
  carries the speculative counters.
- llama.cpp ``/completion``: one event per *token*, also for the tokens of one speculative step,
  which the server sends back to back -- except a token that ends inside a UTF-8 character, which
  is held back and rides with the next one (``process_token``): an event's tokens are its increase
  of ``tokens_predicted`` (cumulative), not its ``tokens`` list. With ``timings_per_token`` every
  event carries the slot's ``timings``, whose ``predicted_ms`` moves once per decode step
  (``server_slot_stats::update_gen_last``): events that share it are one step, merged into one
  chunk at the first one's arrival. The last event (``stop: true``) carries ``timings`` and the
  total ``tokens_predicted``; tokens held back to the end count in the last chunk.

    >>> t = {"prompt_ms": 90.0, "predicted_ms": 200.0}
    >>> events = [(0.10, {"content": "a", "tokens": [5], "tokens_predicted": 1,
    ...                   "timings": {"prompt_ms": 90.0, "predicted_ms": 0.001}}),
    ...           (0.30, {"content": "b", "tokens": [6], "tokens_predicted": 2, "timings": t}),
    ...           (0.30, {"content": "c", "tokens": [7], "tokens_predicted": 3, "timings": t}),
    ...           (0.31, {"content": "", "tokens": [], "stop": True, "tokens_predicted": 3,
    ...                   "timings": {"prompt_ms": 90.0, "predicted_ms": 200.0}})]
    >>> text, final, emissions = llamacpp_stream(events, url="u")
    >>> text, emissions, final["tokens_predicted"]
    ('abc', [(0.1, 1), (0.3, 2)], 3)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from picker.profiler.http import EndpointError

Emissions = list[tuple[float, int]]


def _dict(event: Any, url: str) -> dict[str, Any]:
    if not isinstance(event, dict):
        raise EndpointError(url, f"streamed event is not a JSON object ({str(event)[:60]!r})")
    return event


def vllm_stream(events: Iterable[tuple[float, Any]], *, url: str) -> tuple[str, dict[str, Any], Emissions]:
    """(text, the final usage, emissions) of a streamed ``/v1/completions`` request."""
    text: list[str] = []
    emissions: Emissions = []
    usage: dict[str, Any] = {}
    seen = 0
    for arrived, raw in events:
        event = _dict(raw, url)
        if isinstance(event.get("usage"), dict):
            usage = event["usage"]
        for choice in event.get("choices") or []:
            text.append(str(choice.get("text") or ""))
        now = usage.get("completion_tokens") if usage else None
        if isinstance(now, int) and now > seen and event.get("choices"):
            emissions.append((arrived, now - seen))
            seen = now
    if not isinstance(usage.get("completion_tokens"), int):
        raise EndpointError(url, "the stream carried no usage.completion_tokens (stream_options.include_usage)")
    if seen != usage["completion_tokens"]:
        raise EndpointError(url, f"streamed chunks carried {seen} tokens, usage says {usage['completion_tokens']}")
    return "".join(text), usage, emissions


def sglang_stream(events: Iterable[tuple[float, Any]], *, url: str) -> tuple[str, dict[str, Any], Emissions]:
    """(text, the last ``meta_info``, emissions) of a streamed ``/generate`` request."""
    text = ""
    meta: dict[str, Any] = {}
    emissions: Emissions = []
    seen = 0
    for arrived, raw in events:
        event = _dict(raw, url)
        meta = event.get("meta_info") if isinstance(event.get("meta_info"), dict) else meta
        if isinstance(event.get("text"), str):
            text = event["text"]  # cumulative (SGLang's default stream output)
        now = meta.get("completion_tokens")
        if isinstance(now, int) and now > seen:
            emissions.append((arrived, now - seen))
            seen = now
    if not meta:
        raise EndpointError(url, "the stream carried no meta_info")
    return text, meta, emissions


def llamacpp_stream(events: Iterable[tuple[float, Any]], *, url: str) -> tuple[str, dict[str, Any], Emissions]:
    """(text, the final event, emissions: one per decode step) of a streamed ``/completion`` request."""
    text: list[str] = []
    emissions: Emissions = []
    final: dict[str, Any] = {}
    step: Any = object()  # the predicted_ms of the chunk being built
    seen = 0
    for arrived, raw in events:
        event = _dict(raw, url)
        if event.get("stop"):
            final = event
            continue
        text.append(str(event.get("content") or ""))
        now = event.get("tokens_predicted")
        tokens = event.get("tokens") if isinstance(event.get("tokens"), list) else []
        new = now - seen if isinstance(now, int) else len(tokens)  # older servers: the ids it carries
        if new <= 0:
            continue  # the begin / progress events
        seen += new
        timings = event.get("timings") if isinstance(event.get("timings"), dict) else {}
        at = timings.get("predicted_ms", arrived)  # without per-token timings: one chunk per event
        if emissions and at == step:
            emissions[-1] = (emissions[-1][0], emissions[-1][1] + new)
        else:
            emissions.append((arrived, new))
            step = at
    if not final:
        raise EndpointError(url, "the stream ended without its final event (stop: true)")
    total = final.get("tokens_predicted")
    if not isinstance(total, int) or total < seen:
        raise EndpointError(url, f"streamed events carried {seen} tokens, tokens_predicted says {total!r}")
    if total > seen:  # held back to the end (an unfinished UTF-8 character): the last step's
        emissions[-1:] = [(emissions[-1][0], emissions[-1][1] + total - seen)] if emissions else [(0.0, total)]
    return "".join(text), {**final, "content": "".join(text)}, emissions

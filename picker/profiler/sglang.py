"""Profile a live SGLang server: per-request ``meta_info`` speculative counters from ``/generate``.

SGLang fills these on the finished response (``research/sglang.md`` §2): ``spec_verify_ct``
(always, with speculation on), ``completion_tokens``, and depending on the version
``spec_num_correct_drafts`` (newest; ``spec_accepted_drafts`` its alias), ``spec_accept_token_num``
(mid), a histogram of drafts accepted per verify (``spec_correct_drafts_histogram`` /
``spec_accept_histogram``) and ``spec_accept_length`` = completion_tokens / spec_verify_ct. We use
raw counters, never ``spec_accept_rate`` (its definition changed between versions).

Draft shape from ``/get_server_info`` (SGLang returns its server args at the top level):
``speculative_num_steps`` (chain depth γ), ``speculative_eagle_topk``, ``speculative_num_draft_tokens``.
Per request: drafted = spec_verify_ct · γ (the positions a verify can accept along one path; for
a chain exactly the proposed drafts), accepted = correct drafts, forwards = spec_verify_ct + 1
(the prefill emits the first token). Without a correct-draft count, accepted = completion_tokens −
spec_verify_ct (SGLang's own accept-length convention) and the record says so.

    >>> fields = parse_meta({"completion_tokens": 10, "spec_verify_ct": 4,
    ...                      "spec_num_correct_drafts": 6, "spec_correct_drafts_histogram": [1, 1, 1, 1]},
    ...                     url="http://x/generate", depth=3)
    >>> fields["accepted"], fields["drafted"], fields["pos_reached"], fields["pos_accepted"]
    (6, 12, [4, 3, 2], [3, 2, 1])
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

from picker.errors import UserError
from picker.profiler.http import EndpointError, HttpClient
from picker.profiler.latency import Timing, from_emissions
from picker.profiler.prompt_format import PromptRenderer
from picker.profiler.records import CellKey, Record, positions_from_histogram
from picker.profiler.source import WARMUP, DraftConfig, GenParams, dispatch, single_strategy
from picker.profiler.streaming import sglang_stream
from picker.tasks import Prompt

_CORRECT_KEYS = ("spec_num_correct_drafts", "spec_accepted_drafts", "spec_accept_token_num")
_HIST_KEYS = ("spec_correct_drafts_histogram", "spec_accept_histogram")


def _count(meta: dict[str, Any], key: str, url: str) -> int:
    value = meta.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise EndpointError(url, f"meta_info.{key} is not a non-negative integer ({value!r})")
    return value


def parse_meta(meta: Any, *, url: str, depth: int) -> dict[str, Any]:
    """Counters of one finished ``/generate`` response; missing speculative fields are errors."""
    if not isinstance(meta, dict):
        raise EndpointError(url, "response has no meta_info object")
    if "spec_verify_ct" not in meta:
        raise EndpointError(url, "response meta_info has no spec_verify_ct: is speculative decoding on "
                                 "(--speculative-algorithm)?")
    verify = _count(meta, "spec_verify_ct", url)
    completion = _count(meta, "completion_tokens", url)
    hist_key = next((k for k in _HIST_KEYS if k in meta), None)
    hist: list[int] | None = None
    if hist_key is not None:
        raw = meta[hist_key]
        if not isinstance(raw, list) or not all(isinstance(x, int) and x >= 0 for x in raw):
            raise EndpointError(url, f"meta_info.{hist_key} is not a list of counts")
        hist = list(raw) + [0] * max(0, depth + 1 - len(raw))
    key = next((k for k in _CORRECT_KEYS if k in meta), None)
    if key is not None:
        accepted, how = _count(meta, key, url), key
    elif hist is not None:
        accepted, how = sum(k * n for k, n in enumerate(hist)), hist_key or ""
    else:
        accepted, how = max(0, completion - verify), "completion_tokens-spec_verify_ct"
    reached, acc = positions_from_histogram(hist[: depth + 1]) if hist is not None and depth else ([], [])
    return {"tokens": completion, "steps": verify, "draft_steps": verify, "forwards": verify + 1,
            "drafted": verify * depth,
            "accepted": accepted, "pos_reached": reached, "pos_accepted": acc,
            "accept_hist": hist or [], "accepted_from": how}


class SGLangSource:
    """Sends prompts to ``URL/generate``; one record per prompt (all its turns). With ``plain_url``
    (the same model served without ``--speculative-algorithm``) it times plain decoding there, the
    baseline of each cell's gain at the same concurrency: SGLang cannot turn speculation off per
    request."""

    name = "sglang"

    def __init__(self, url: str, client: HttpClient, concurrency: int = 4, plain_url: str | None = None,
                 renderer: PromptRenderer | None = None) -> None:
        self.url = url.rstrip("/")
        self.client = client
        self.renderer = renderer or PromptRenderer(None)  # raw text unless a local tokenizer renders the template
        self.concurrency = concurrency
        self.info = self._server_info()
        self.plain_url = plain_url.rstrip("/") if plain_url else None
        self.plain = self.plain_url is not None
        self._warm = False  # the servers had their untimed request (source.WARMUP)
        if self.plain_url is not None:
            info = self.client.get_json(f"{self.plain_url}/get_server_info")
            if not isinstance(info, dict) or info.get("speculative_algorithm"):
                algo = info.get("speculative_algorithm") if isinstance(info, dict) else None
                raise EndpointError(f"{self.plain_url}/get_server_info",
                                    f"the plain server speculates ({algo}): start it without --speculative-algorithm")

    def _server_info(self) -> dict[str, Any]:
        url = f"{self.url}/get_server_info"
        info = self.client.get_json(url)
        if not isinstance(info, dict):
            raise EndpointError(url, "server info is not a JSON object")
        if not info.get("speculative_algorithm"):
            raise EndpointError(url, "speculative_algorithm is not set: the server runs without "
                                     "speculative decoding")
        for key in ("speculative_num_steps", "speculative_num_draft_tokens"):
            if not isinstance(info.get(key), int) or info[key] < 1:
                raise EndpointError(url, f"{key} missing or not a positive integer ({info.get(key)!r})")
        return info

    def report(self) -> dict[str, Any]:
        """SGLang's own server-wide accept length, to set beside the per-request numbers."""
        return {"avg_spec_accept_length": self.accept_length(),
                "note": "SGLang internal_states[0]; cumulative since server start (all traffic), bonus included"}

    def accept_length(self) -> float | None:
        """Server-wide ``avg_spec_accept_length`` (cumulative since start): a cross-check only."""
        info = self.client.get_json(f"{self.url}/get_server_info")
        states = info.get("internal_states") if isinstance(info, dict) else None
        for state in (states or [])[:1]:
            if isinstance(state, dict) and isinstance(state.get("avg_spec_accept_length"), (int, float)):
                return float(state["avg_spec_accept_length"])
        top = info.get("avg_spec_accept_length") if isinstance(info, dict) else None  # older servers
        return float(top) if isinstance(top, (int, float)) else None

    def close(self) -> None:
        """Nothing to release: every request opens and closes its own connection."""

    def provenance(self) -> dict[str, Any]:
        """Model and draft paths, version and dtype as ``/get_server_info`` reports them."""
        info = self.info
        draft = info.get("speculative_draft_model_path")
        tp = info.get("tp_size")
        return {"model": {"name": str(info.get("model_path") or self.url)},
                "drafts": {"draft": {"name": str(draft)}} if draft else {},
                "engine": "sglang", "engine_version": info.get("version"),
                "hardware": {"device": "server", "gpu_count": tp if isinstance(tp, int) else None},
                "dtype": info.get("dtype")}

    def describe(self) -> dict[str, Any]:
        keys = ("speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
                "speculative_num_draft_tokens", "model_path", "version")
        out = {"backend": "sglang", "url": self.url, **{k: self.info.get(k) for k in keys},
               "prompt_format": self.renderer.format, "warmup": WARMUP}
        return {**out, "plain_url": self.plain_url} if self.plain_url else out

    def configs(self, strategies: Sequence[str], num_draft_tokens: Sequence[int]) -> list[DraftConfig]:
        from picker.engine.plugins import load_strategies

        algo = str(self.info["speculative_algorithm"]).upper()
        # Declared engine names (capabilities), not our strategy names, tell what the server runs.
        matches = sorted(p.name for p in load_strategies().values()
                         if (p.capabilities.engines.get("sglang") or "").upper() == algo)
        if not strategies and len(matches) > 1:
            raise UserError(f"the server's {algo} could be {' or '.join(matches)}; name it with --strategies",
                            field="--strategies")
        strategy = single_strategy(strategies, "sglang", matches[0] if matches else None)
        steps, topk = int(self.info["speculative_num_steps"]), int(self.info.get("speculative_eagle_topk") or 1)
        tokens = int(self.info["speculative_num_draft_tokens"])
        tree = f"depth={steps},topk={topk},tokens={tokens}" if topk > 1 else None
        return [DraftConfig(strategy, steps if tree is None else tokens - 1, tree)]

    def measure(self, cell: CellKey, prompts: Sequence[Prompt], params: GenParams) -> Iterator[Record]:
        if not self._warm:
            for base in (self.url, self.plain_url):
                if base is not None:
                    list(self.client.post_stream(f"{base}/generate", self._body(prompts[0], 0, [], 0.0, params)))
            self._warm = True
        if cell.is_plain:
            return dispatch(cell, prompts, params, lambda p: self._plain_one(cell, p, params))
        depth = int(self.info["speculative_num_steps"])
        return dispatch(cell, prompts, params, lambda p: self._one(cell, p, params, depth))

    def _body(self, prompt: Prompt, turn: int, history: Sequence[str], temperature: float,
              params: GenParams) -> dict[str, Any]:
        """A streamed ``/generate`` body: ``text``, or ``input_ids`` for the chat template's ids."""
        sent = self.renderer.payload(prompt, turn, history)
        sampling = {"temperature": temperature, "max_new_tokens": params.max_new_tokens,
                    **({"ignore_eos": True} if params.ignore_eos else {})}
        return {"input_ids" if isinstance(sent, list) else "text": sent, "sampling_params": sampling}

    def _stream(self, url: str, body: dict[str, Any], timings: list[Timing]) -> dict[str, Any]:
        """One streamed ``/generate``: its final ``{"text", "meta_info"}``; its timing joins ``timings``."""
        sent = time.perf_counter()
        text, meta, emissions = sglang_stream(self.client.post_stream(url, body), url=url)
        timing = from_emissions(sent, emissions)
        timings += [timing] if timing is not None else []
        completion = meta.get("completion_tokens")
        if timing is not None and completion != timing.tokens:
            raise EndpointError(url, f"streamed events carried {timing.tokens} tokens, completion_tokens says "
                                     f"{completion!r}")
        return {"text": text, "meta_info": meta}

    def _plain_one(self, cell: CellKey, prompt: Prompt, params: GenParams) -> Record:
        """The prompt on the plain server: one forward per token (each turn's prefill emits its first)."""
        assert self.plain_url is not None
        url = f"{self.plain_url}/generate"
        history: list[str] = []
        tokens = 0
        timings: list[Timing] = []
        start = time.perf_counter()
        for turn in range(len(prompt.turns)):
            body = self._body(prompt, turn, history, cell.temperature, params)
            resp = self._stream(url, body, timings)
            meta = resp.get("meta_info") if isinstance(resp, dict) else None
            if not isinstance(resp, dict) or not isinstance(resp.get("text"), str) or not isinstance(meta, dict):
                raise EndpointError(url, "response has no 'text' string and meta_info object")
            history.append(resp["text"])
            tokens += _count(meta, "completion_tokens", url)
        turns = len(prompt.turns)
        return Record(cell=cell, prompt_ids=(prompt.id,), tokens=tokens, forwards=tokens,
                      steps=max(tokens - turns, 0), wall_s=time.perf_counter() - start,
                      source="sglang-plain-server", timings=tuple(timings),
                      extra={"turns": turns, "prompt_format": self.renderer.format})

    def _one(self, cell: CellKey, prompt: Prompt, params: GenParams, depth: int) -> Record:
        url = f"{self.url}/generate"
        history: list[str] = []
        totals: dict[str, Any] = {}
        timings: list[Timing] = []
        start = time.perf_counter()
        for turn in range(len(prompt.turns)):
            body = self._body(prompt, turn, history, cell.temperature, params)
            resp = self._stream(url, body, timings)
            if not isinstance(resp, dict) or not isinstance(resp.get("text"), str):
                raise EndpointError(url, "response has no 'text' string")
            history.append(resp["text"])
            _add(totals, parse_meta(resp.get("meta_info"), url=url, depth=depth))
        return Record(
            cell=cell, prompt_ids=(prompt.id,), tokens=totals["tokens"], forwards=totals["forwards"],
            steps=totals["steps"], draft_steps=totals["draft_steps"], drafted=totals["drafted"],
            accepted=totals["accepted"],
            pos_reached=tuple(totals["pos_reached"]), pos_accepted=tuple(totals["pos_accepted"]),
            accept_hist=tuple(totals["accept_hist"]), wall_s=time.perf_counter() - start, timings=tuple(timings),
            source="sglang-meta_info", extra={"accepted_from": totals["accepted_from"], "turns": len(prompt.turns),
                                              "prompt_format": self.renderer.format},
        )


def _add(totals: dict[str, Any], fields: dict[str, Any]) -> None:
    """Sum counters across turns; lists element-wise (a turn without a histogram empties them)."""
    if not totals:
        totals.update(fields)
        return
    for key, value in fields.items():
        if isinstance(value, int):
            totals[key] += value
        elif isinstance(value, list):
            prev = totals[key]
            totals[key] = [a + b for a, b in zip(prev, value)] if prev and value else []

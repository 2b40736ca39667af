"""Profile a live llama.cpp ``llama-server``: per-response ``timings`` from its native ``/completion``.

What the server reports (llama.cpp vendored in llama-cpp-python 0.3.36, ``tools/server``):

- each ``/completion`` response: ``tokens_predicted`` and, in ``timings``, ``draft_n`` (draft
  tokens proposed for this request) and ``draft_n_accepted`` (those accepted). Both are left out
  of a response that drafted nothing (``server_slot_stats::to_json``), so once ``GET /slots`` says
  a slot can speculate (``"speculative": true``) a response without them drafted nothing; where
  the server does not say (started with ``--no-slots``) it is an error.
- which algorithm: ``/slots`` shows a slot's last task's ``params["speculative.types"]`` (e.g.
  ``none,draft-simple``), so only once the server has served a request; before that, name the
  strategy (``--strategies``). ``/props`` carries the same key but always ``none`` (it prints a
  fresh task's defaults, not the server's).
- nothing per draft position per request: the server counts positions only server-wide, in
  ``/metrics`` (started with ``--metrics``): ``llamacpp:spec_decode_num_drafts_total`` (verify
  steps), ``..._num_draft_tokens_total``, ``..._num_accepted_tokens_total`` and
  ``..._num_accepted_tokens_per_pos_total{position="k"}`` (steps whose position k was accepted,
  unconditional). So records carry no per-position counts; :meth:`LlamaCppSource.report` sets the
  counters' deltas over the run beside the per-response numbers (``run.server_report``).

At T > 0 llama.cpp verifies by sampling the target's token and keeping the draft token only if it
is that token (``common_sampler_sample_and_accept_n``), not by speculative sampling's min(1, q/p):
its α at T > 0 is below what an engine with rejection sampling measures on the same models.

Per turn: decode steps = tokens_predicted − draft_n_accepted − 1 (the prefill emits the first
token; every later forward emits its accepted drafts plus one; the server cuts each draft to the
tokens left, so none is lost at ``n_predict``). The response does not say which steps drafted,
so ``draft_steps`` is left unknown (all steps) and ``tau`` is then a lower bound.

A server started with speculation speculates on every request, so plain decoding -- the baseline of
``speedup_vs_plain``, from which the policy derives llama.cpp's own step cost
(``policies.cell_evidence.live_step_ratio``) -- is timed on a second ``llama-server`` of the same target
without ``--spec-type`` / ``-md`` (``plain_url``; its ``/slots`` must say no slot speculates), on the
same prompts. As with vLLM, each cell waits ``gap_s`` first when two servers share the machine.

    >>> resp = {"content": " world", "tokens_predicted": 9,
    ...         "timings": {"predicted_n": 9, "draft_n": 12, "draft_n_accepted": 5}}
    >>> parse_completion(resp, url="http://x/completion", speculative=True)
    {'text': ' world', 'tokens': 9, 'drafted': 12, 'accepted': 5, 'steps': 3}
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

from picker.errors import UserError
from picker.profiler.http import EndpointError, HttpClient
from picker.profiler.latency import Timing, from_emissions
from picker.profiler.prompt_format import PromptRenderer
from picker.profiler.records import CellKey, Record
from picker.profiler.source import WARMUP, DraftConfig, GenParams, dispatch, single_strategy
from picker.profiler.streaming import llamacpp_stream
from picker.profiler.vllm import GAP_S, Metrics, parse_prometheus
from picker.tasks import Prompt

ENGINE = "llama_cpp"  # the key strategies declare their llama.cpp name under (Capabilities.engines)
DRAFTS = "llamacpp:spec_decode_num_drafts_total"
DRAFT_TOKENS = "llamacpp:spec_decode_num_draft_tokens_total"
ACCEPTED = "llamacpp:spec_decode_num_accepted_tokens_total"
PER_POS = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"
PREDICTED = "llamacpp:tokens_predicted_total"
TYPES_KEY = "speculative.types"
LLAMA_DEFAULT_SEED = 0xFFFFFFFF  # llama.cpp reads this seed as "pick one at random"


def _count(obj: dict[str, Any], key: str, where: str, url: str) -> int:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise EndpointError(url, f"{where}{key} is not a non-negative integer ({value!r})")
    return value


def parse_completion(resp: Any, *, url: str, speculative: bool, plain: bool = False) -> dict[str, Any]:
    """Text and counters of one non-streamed ``/completion`` response.

    ``speculative``: ``/slots`` confirmed speculation, so absent draft counts mean zero drafts.
    ``plain``: the response comes from the server without speculation; a draft count is an error.
    """
    if not isinstance(resp, dict) or not isinstance(resp.get("content"), str):
        raise EndpointError(url, "response has no 'content' string")
    timings = resp.get("timings")
    if not isinstance(timings, dict):
        raise EndpointError(url, "response has no 'timings' object")
    tokens = _count(resp, "tokens_predicted", "", url)
    has = ("draft_n" in timings, "draft_n_accepted" in timings)
    if plain and any(has):
        raise EndpointError(url, "the plain server drafted (timings has draft_n): start it without "
                                 "--spec-type / -md")
    if has == (False, False) and (speculative or plain):
        drafted = accepted = 0
    elif not all(has):
        missing = "draft_n" if not has[0] else "draft_n_accepted"
        raise EndpointError(url, f"timings has no {missing}: is speculative decoding on (--spec-type, -md)?")
    else:
        drafted = _count(timings, "draft_n", "timings.", url)
        accepted = _count(timings, "draft_n_accepted", "timings.", url)
    if accepted > drafted or accepted >= max(tokens, 1):
        raise EndpointError(url, f"timings.draft_n_accepted={accepted} does not fit draft_n={drafted}, "
                                 f"tokens_predicted={tokens}")
    return {"text": resp["content"], "tokens": tokens, "drafted": drafted, "accepted": accepted,
            "steps": max(tokens - accepted - 1, 0)}


def engine_clock(final: dict[str, Any]) -> dict[str, float]:
    """The server's own clock for one request (``timings``): prompt_ms (start of prompt processing to
    the first token), predicted_ms (first token to last), predicted_n (tokens), and prompt_n /
    cache_n (prompt tokens processed / taken from the server's prompt caches, which a repeated prompt
    hits: a prefill the other server of a comparison may have paid)."""
    t = final.get("timings") if isinstance(final.get("timings"), dict) else {}
    keys = ("prompt_ms", "predicted_ms", "predicted_n", "prompt_n", "cache_n")
    return {k: float(t[k]) for k in keys if isinstance(t.get(k), (int, float))}


def _per_position(metrics: Metrics) -> list[float]:
    """The per-position counter's series in position order (``parse_prometheus`` keeps that label)."""
    by_pos = {int(labels[0][1]): v for (name, labels), v in metrics.items() if name == PER_POS and labels}
    return [by_pos[k] for k in sorted(by_pos)]


def estimated_draft_steps(steps: int, drafted: int, num_draft_tokens: int) -> int:
    """Steps that drafted, from llama.cpp's drafted-token count: ceil(drafted / N), at most ``steps``.

        >>> estimated_draft_steps(446, 329, 4), estimated_draft_steps(10, 0, 4), estimated_draft_steps(5, 40, 4)
        (83, 0, 5)
    """
    return min(steps, -(-drafted // max(num_draft_tokens, 1)))


def request_seed(seed: int, prompt_id: str, turn: int) -> int:
    """A seed per (run seed, prompt, turn), reproducible: prompts do not share one random stream
    (as one seed for all would make them; ``--spec-synth-rates`` draws from it too), and every cell
    sends a prompt with the same seed, so cells compare like for like."""
    return zlib.crc32(f"{seed}|{prompt_id}|{turn}".encode()) % LLAMA_DEFAULT_SEED


class LlamaCppSource:
    """Sends prompts to ``URL/completion``; one record per prompt (all its turns)."""

    name = "llamacpp"

    def __init__(self, url: str, client: HttpClient, concurrency: int = 4, plain_url: str | None = None,
                 gap_s: float = GAP_S, renderer: PromptRenderer | None = None) -> None:
        self.url = url.rstrip("/")
        self.client = client
        # Raw text unless a local tokenizer renders the chat template (then its ids are sent).
        self.renderer = renderer or PromptRenderer(None)
        self.concurrency = concurrency
        self.props = self._props(self.url)
        self.speculative, self.types = self._slots(self.url) if self.props.get("endpoint_slots") else (None, [])
        if self.speculative is False:
            raise EndpointError(f"{self.url}/slots", "no slot can speculate: the server runs without "
                                                     "speculative decoding (start it with --spec-type / -md)")
        self.metrics = bool(self.props.get("endpoint_metrics"))
        self.depth = len(_per_position(self._scrape())) if self.metrics else 0
        self._baseline: Metrics | None = None  # counters when this run's first request went out
        self._streamed = 0  # tokens the speculative server's streams carried (report() sets them beside its counter)
        self._warm = False  # the servers had their untimed request (source.WARMUP)
        self.plain_url = plain_url.rstrip("/") if plain_url else None
        self.plain = self.plain_url is not None
        self.gap_s = gap_s if self.plain_url else 0.0
        if self.plain_url is not None:
            self.plain_props = self._props(self.plain_url)
            if self.plain_props.get("endpoint_slots") and self._slots(self.plain_url)[0]:
                raise EndpointError(f"{self.plain_url}/slots", "the plain server can speculate: start it "
                                                               "without --spec-type / -md")

    def _props(self, base: str) -> dict[str, Any]:
        url = f"{base}/props"
        props = self.client.get_json(url)
        if not isinstance(props, dict):
            raise EndpointError(url, "server properties are not a JSON object")
        return props

    def _slots(self, base: str) -> tuple[bool, list[str]]:
        """(whether any slot can speculate, the speculative types its last tasks ran)."""
        url = f"{base}/slots"
        slots = self.client.get_json(url)
        if not isinstance(slots, list) or not all(isinstance(s, dict) and "speculative" in s for s in slots):
            raise EndpointError(url, "expected a list of slots, each with 'speculative'")
        types = {t for s in slots for t in str((s.get("params") or {}).get(TYPES_KEY, "")).split(",")}
        return any(s["speculative"] is True for s in slots), sorted(types - {"", "none"})

    def _scrape(self) -> Metrics:
        return parse_prometheus(self.client.get_text(f"{self.url}/metrics"))

    def close(self) -> None:
        """Nothing to release: every request opens and closes its own connection."""

    def provenance(self) -> dict[str, Any]:
        """The model file and build as ``/props`` reports them (draft files are not reported)."""
        path = self.props.get("model_path")
        return {"model": {"name": str(path or self.url), "path": path}, "engine": "llama_cpp",
                "engine_version": self.props.get("build_info")}

    def describe(self) -> dict[str, Any]:
        out = {"backend": "llamacpp", "url": self.url, "speculative": self.speculative,
               "speculative_types": self.types,
               "model_path": self.props.get("model_path"), "build_info": self.props.get("build_info"),
               "total_slots": self.props.get("total_slots"), "metrics": self.metrics,
               "prompt_format": self.renderer.format, "warmup": WARMUP, "cache_prompt": False}
        if self.plain_url is not None:
            out.update(plain_url=self.plain_url, plain_model_path=self.plain_props.get("model_path"))
        return out

    def configs(self, strategies: Sequence[str], num_draft_tokens: Sequence[int]) -> list[DraftConfig]:
        from picker.engine.plugins import load_strategies

        # Declared engine names (capabilities), not our strategy names, tell what the server runs.
        matches = sorted(p.name for p in load_strategies().values()
                         if p.capabilities.engines.get(ENGINE) in self.types)
        if not strategies and len(matches) > 1:
            raise UserError(f"the server's {','.join(self.types)} could be {' or '.join(matches)}; "
                            "name it with --strategies", field="--strategies")
        strategy = single_strategy(strategies, "llamacpp", matches[0] if matches else None)
        # The per-position counter has one series per draft position (after the first request).
        depth = self.depth or (num_draft_tokens[0] if len(num_draft_tokens) == 1 else 0)
        if depth < 1:
            raise UserError("cannot tell the server's draft length; pass one --num-draft-tokens value "
                            "(its --spec-draft-n-max)", field="--num-draft-tokens")
        return [DraftConfig(strategy, depth)]

    def measure(self, cell: CellKey, prompts: Sequence[Prompt], params: GenParams) -> Iterator[Record]:
        if not self._warm:
            for base in (self.url, self.plain_url):
                if base is not None:
                    list(self.client.post_stream(f"{base}/completion", self._body(prompts[0], 0, [], 0.0, params)))
            self._warm = True
        if self.metrics and self._baseline is None:
            self._baseline = self._scrape()
        time.sleep(self.gap_s)
        # The wave starts after the quiet gap: the runner's own stamp (taken before this call) would
        # put the gap inside every wave's span on both servers and pull throughput gains toward 1.
        t0 = time.time()
        for record in dispatch(cell, prompts, params, lambda p: self._one(cell, p, params)):
            yield replace(record, extra={**record.extra, "wave_t0": t0})

    def _one(self, cell: CellKey, prompt: Prompt, params: GenParams) -> Record:
        plain = cell.is_plain
        assert not plain or self.plain_url is not None  # the profiler asks for plain only when self.plain
        url = f"{self.plain_url if plain else self.url}/completion"
        history: list[str] = []
        totals = {"tokens": 0, "drafted": 0, "accepted": 0, "steps": 0}
        timings: list[Timing] = []
        start = time.perf_counter()
        for turn in range(len(prompt.turns)):
            # top_k/top_p/min_p off: T > 0 samples softmax(logits / T), as the other backends do.
            # A string is tokenized by the server; the template's ids (a list) are taken as they are.
            # Streamed, with the slot's timings on every event: one chunk per decode step. No prompt
            # cache: each server prefills the whole prompt every time, whatever it served before (a
            # plain server kept up across configurations served repeated prompts from its cache while
            # each fresh speculative server paid the prefill: the wall gain of the draft model read
            # 0.41x where interleaved rounds read 0.54x, its decode gain agreeing at 0.51x / 0.47x).
            body = self._body(prompt, turn, history, cell.temperature, params)
            sent = time.perf_counter()
            _, final, emissions = llamacpp_stream(self.client.post_stream(url, body), url=url)
            fields = parse_completion(final, url=url, speculative=bool(self.speculative), plain=plain)
            timing = from_emissions(sent, emissions, engine=engine_clock(final))
            timings += [timing] if timing is not None else []
            if not plain:
                self._streamed += sum(n for _, n in emissions)
            history.append(fields.pop("text"))
            for key, value in fields.items():
                totals[key] += value
        turns = len(prompt.turns)
        # llama.cpp reports drafted tokens, not drafting steps: a step drafts N tokens when it drafts
        # (ngram-simple only where its lookup matches), so ceil(drafted / N) is the number of steps
        # that drafted -- a lower bound where a draft ends short of N. Without it every step would
        # count as drafting and a lookup's α (over its drafts) would stand for all the text.
        draft_steps = None if plain else estimated_draft_steps(totals["steps"], totals["drafted"],
                                                               cell.num_draft_tokens)
        return Record(
            cell=cell, prompt_ids=(prompt.id,), tokens=totals["tokens"], forwards=totals["steps"] + turns,
            steps=totals["steps"], draft_steps=draft_steps, drafted=totals["drafted"], accepted=totals["accepted"],
            wall_s=time.perf_counter() - start, source="llamacpp-plain-server" if plain else "llamacpp-timings",
            extra={"turns": turns, "prompt_format": self.renderer.format}, timings=tuple(timings),
        )

    def _body(self, prompt: Prompt, turn: int, history: Sequence[str], temperature: float,
              params: GenParams) -> dict[str, Any]:
        body = {"prompt": self.renderer.payload(prompt, turn, history), "n_predict": params.max_new_tokens,
                "temperature": temperature, "top_k": 0, "top_p": 1.0, "min_p": 0.0,
                "seed": request_seed(params.seed, prompt.id, turn), "timings_per_token": True, "cache_prompt": False}
        return {**body, "ignore_eos": True} if params.ignore_eos else body

    def report(self) -> dict[str, Any]:
        """The server's own ``/metrics`` counters, differenced over this run: a cross-check."""
        if not self.metrics:
            return {"note": "start llama-server with --metrics for its own counters (per-position included)"}
        after = self._scrape()
        before = self._baseline or {}
        delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
        drafts, tokens, accepted = (round(delta.get((n, ()), 0.0)) for n in (DRAFTS, DRAFT_TOKENS, ACCEPTED))
        per_pos = [round(v) for v in _per_position(delta)]
        # Position k is examined when k-1 was accepted (position 0 in every verify step): exact
        # when every draft has full length, as with a draft model away from the n_predict limit.
        reached = [drafts, *per_pos[:-1]] if per_pos else []
        return {
            "num_drafts": drafts, "num_draft_tokens": tokens, "num_accepted_tokens": accepted,
            "tokens_predicted": round(delta.get((PREDICTED, ()), 0.0)), "client_tokens": self._streamed,
            "accepted_per_pos": per_pos,
            "alpha": accepted / tokens if tokens else None,
            "mean_acceptance_length": 1 + accepted / drafts if drafts else None,
            "per_position": [a / n if n else None for a, n in zip(per_pos, reached)],
            "per_position_unconditional": [a / drafts for a in per_pos] if drafts else [],
            "note": "llama.cpp /metrics, differenced over this run (all traffic on the server); per_position "
                    "conditional (summary convention), per_position_unconditional = accepted at k / verify "
                    "steps (llama.cpp's own log and --spec-synth-rates convention); length includes the bonus",
        }

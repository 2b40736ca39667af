"""Tokens/s of every strategy vs plain decoding vs Hugging Face's assisted generation and prompt lookup.

    $ python bench/bench_strategies.py                       # zoo ci build, 5 domains, T = 0 and 1
    $ python bench/bench_strategies.py --domains code,math --prompts 4 --reps 3 --json out.json

All runs happen in one process on the same zoo models, with one torch thread. For every
(domain, temperature, prompt, repetition) a *round* runs every configuration once, in an order
rotated from round to round; each ratio is taken inside its round (so the configurations being
compared ran back to back) and the table shows medians over rounds. Columns:

- ``tok/s``: median tokens per second; ``vs plain``: median ratio to our plain decoding.
- ``alpha`` = accepted / drafted nodes; ``tau`` = tokens per verify step (bonus included; the
  prefill step excluded); ``N`` = mean draft nodes per step; ``c`` = draft seconds per drafted
  node / plain decoding's seconds per step.
- ``bound`` = E[L] / (N c + 1) (``policies.theory.speedup``, Leviathan et al. Thm 3.8) with
  E[L] = 1 + alpha N, the measured accepted nodes per verify step plus the bonus token (tau, before
  the last step is cut at max tokens or EOS). Not the i.i.d. closed form (1 - a^(N+1)) / (1 - a):
  accepted / drafted is E[accepted] / N, not the per-token acceptance probability that formula
  takes, and feeding it in understates E[L] (vanilla, code, T = 0: 2.3 instead of 3.4). ``meas/bnd``
  is the measured speedup over the bound.
- ``v`` = seconds of one verify step (target forward over N + 1 tokens, verification, rollback) /
  plain decoding's seconds per step; ``bnd(v)`` = E[L] / (N c + v), the bound with that cost.
- ``overhead``: the loop's own time -- everything but target forwards and the drafter's
  ``propose``/``observe`` (draft model or heads, and their Python) -- as % of wall time.

Hugging Face rows: ``hf-plain`` (``generate``), ``hf-assisted`` (``assistant_model=`` the zoo
draft, ``num_assistant_tokens`` set on the draft's ``generation_config`` -- transformers 5.x reads
it there -- other settings at their defaults) and ``hf-lookup`` (``prompt_lookup_num_tokens=``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from picker.engine import runtime
from picker.engine.backend import TorchBackend
from picker.engine.drafting import MissingArtifact, SamplingParams, bind
from picker.engine.loop import generate
from picker.engine.plugins import load_strategies
from picker.tasks import builtin_prompts, render_turn
from picker.zoo.resolve import zoo_artifacts, zoo_paths
from policies.theory import speedup

# Our strategies' settings, and the same draft lengths for Hugging Face's two methods.
OPTIONS: dict[str, dict[str, Any]] = {
    "vanilla": {"num_draft_tokens": 4},
    "ngram": {"num_draft_tokens": 8, "n_max": 4, "n_min": 1},
    "lookahead": {"window": 4, "ngram": 3, "verify_set": 4},
}
HF_ASSIST_TOKENS, HF_LOOKUP_TOKENS = 4, 8


@dataclass
class Run:
    """One timed generation: tokens, wall seconds, and (our loop only) the step counters."""

    tokens: int
    seconds: float
    model_seconds: float = 0.0
    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    decode_tokens: int = 0
    draft_seconds: float = 0.0
    verify_seconds: float = 0.0


@dataclass
class Config:
    name: str
    run: Callable[[list[int], float, int], Run]
    ours: bool = True
    results: dict[tuple[str, float], list[Run]] = field(default_factory=lambda: defaultdict(list))


def our_config(name: str, target: TorchBackend, draft: TorchBackend, plugin: Any, drafter: Any,
               max_new: int, eos: tuple[int, ...]) -> Config:
    caps = None if plugin is None else plugin.capabilities

    def run(ids: list[int], temperature: float, seed: int) -> Run:
        gen = generate(target, ids, bind(drafter, caps), sampling=SamplingParams(temperature),
                       max_new_tokens=max_new, rng=np.random.default_rng(seed), eos_token_id=eos)
        steps = gen.records[1:]  # the prefill step drafts nothing
        # Model time: target forwards, plus the whole of propose() + observe() (draft model or heads).
        model = gen.stats.forward_seconds + sum(r.draft_seconds for r in gen.records)
        return Run(len(gen.tokens), gen.stats.seconds, model, len(steps), sum(r.drafted for r in steps),
                   sum(r.accepted for r in steps), sum(r.emitted for r in steps),
                   sum(r.draft_seconds for r in steps), sum(r.verify_seconds for r in steps))

    return Config(name, run)


def hf_config(name: str, model: Any, max_new: int, pad: int, **extra: Any) -> Config:
    def run(ids: list[int], temperature: float, seed: int) -> Run:
        torch.manual_seed(seed)
        sample = {"do_sample": True, "temperature": temperature} if temperature > 0 else {"do_sample": False}
        start = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(torch.tensor([ids]), max_new_tokens=max_new, pad_token_id=pad, **sample, **extra)
        return Run(out.shape[1] - len(ids), time.perf_counter() - start)

    return Config(name, run, ours=False)


def build_configs(args: argparse.Namespace, options_by_name: dict[str, dict[str, Any]]
                  ) -> tuple[list[Config], dict[str, Any]]:
    zoo = zoo_paths()
    target = TorchBackend.from_pretrained(zoo.target)
    draft = TorchBackend.from_pretrained(zoo.draft)
    eos = runtime.eos_token_ids(target)
    pad = int(target.model.config.pad_token_id or 0)
    configs = [our_config("plain", target, draft, None, None, args.max_new_tokens, eos)]
    plugins = load_strategies(only_builtin=True)
    for name in args.strategies.split(","):
        options = dict(options_by_name.get(name, {}))
        if plugins[name].capabilities.artifact == "draft_model":
            options["draft_backend"] = draft  # one loaded draft, shared with hf-assisted
        try:
            drafter = runtime.build_drafter(plugins[name], target, zoo_artifacts(zoo), options)
        except MissingArtifact as exc:
            print(f"skipping {name}: {exc}", file=sys.stderr)
            continue
        configs.append(our_config(name, target, draft, plugins[name], drafter, args.max_new_tokens, eos))
    draft.model.generation_config.num_assistant_tokens = HF_ASSIST_TOKENS
    configs += [
        hf_config("hf-plain", target.model, args.max_new_tokens, pad),
        hf_config("hf-assisted", target.model, args.max_new_tokens, pad, assistant_model=draft.model),
        hf_config("hf-lookup", target.model, args.max_new_tokens, pad, prompt_lookup_num_tokens=HF_LOOKUP_TOKENS),
    ]
    info = {"zoo": str(zoo.root), "options": options_by_name,
            "tokenizer": runtime.load_tokenizer(zoo.target)}
    return configs, info


def prompts_for(domain: str, n: int, tokenizer: Any, context: int) -> list[list[int]]:
    return [runtime.encode(tokenizer, render_turn(p, 0, []))[-context:] for p in builtin_prompts([domain], n, seed=3)]


def run_rounds(configs: list[Config], domains: list[str], temps: list[float], args: argparse.Namespace,
               tokenizer: Any) -> list[dict[str, Any]]:
    """Every configuration once per round, rotated order; returns per-round tokens/s by name."""
    rounds = []
    for domain in domains:
        for ids in prompts_for(domain, args.prompts, tokenizer, args.context):
            for temperature in temps:
                for rep in range(args.reps + 1):  # rep 0 warms caches and allocators; not kept
                    shift = len(rounds) % len(configs)
                    tps: dict[str, float] = {}
                    for cfg in configs[shift:] + configs[:shift]:
                        run = cfg.run(ids, temperature, 1000 * rep + len(rounds))
                        if rep:
                            cfg.results[(domain, temperature)].append(run)
                        tps[cfg.name] = run.tokens / run.seconds
                    if rep:
                        rounds.append({"domain": domain, "temperature": temperature, "tps": tps})
                    print(".", end="", flush=True, file=sys.stderr)
    print(file=sys.stderr)
    return rounds


def summarise(configs: list[Config], rounds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    cells = sorted({(r["domain"], r["temperature"]) for r in rounds})
    for domain, temperature in cells:
        mine = [r["tps"] for r in rounds if r["domain"] == domain and r["temperature"] == temperature]
        plain_runs = next(c for c in configs if c.name == "plain").results[(domain, temperature)]
        t_step = sum(r.seconds for r in plain_runs) / max(1, sum(r.tokens for r in plain_runs))
        for cfg in configs:
            runs = cfg.results[(domain, temperature)]
            row: dict[str, Any] = {
                "domain": domain, "T": temperature, "config": cfg.name,
                "tok_s": statistics.median(t[cfg.name] for t in mine),
                "vs_plain": statistics.median(t[cfg.name] / t["plain"] for t in mine),
            }
            if cfg.ours:
                row.update(_loop_stats(runs, t_step))
            rows.append(row)
    return rows


def _loop_stats(runs: list[Run], t_step: float) -> dict[str, Any]:
    wall = sum(r.seconds for r in runs)
    out: dict[str, Any] = {"overhead_pct": 100.0 * (wall - sum(r.model_seconds for r in runs)) / wall}
    steps, drafted = sum(r.steps for r in runs), sum(r.drafted for r in runs)
    if not drafted:
        return out
    alpha = sum(r.accepted for r in runs) / drafted
    tau = sum(r.decode_tokens for r in runs) / steps
    n = drafted / steps
    c = sum(r.draft_seconds for r in runs) / drafted / t_step
    v = sum(r.verify_seconds for r in runs) / steps / t_step
    expected = 1.0 + alpha * n  # E[L]: accepted nodes per verify step + the bonus token
    out.update(alpha=alpha, tau=tau, N=n, c=c, v=v, EL=expected, bound=float(speedup(expected, n, c)),
               bound_v=float(speedup(expected, n, c, v)))
    return out


def versus_hf(rounds: list[dict[str, Any]], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per cell: vanilla / hf-assisted, and our best / HF's best (chosen by median tok/s)."""
    out = []
    for domain, temperature in sorted({(r["domain"], r["T"]) for r in rows}):
        cell = [r for r in rows if r["domain"] == domain and r["T"] == temperature]
        ours = max((r for r in cell if "tau" in r or r["config"] == "plain"), key=lambda r: r["tok_s"])
        hf = max((r for r in cell if r["config"].startswith("hf-")), key=lambda r: r["tok_s"])
        tps = [r["tps"] for r in rounds if r["domain"] == domain and r["temperature"] == temperature]
        entry = {"domain": domain, "T": temperature, "best_ours": ours["config"], "best_hf": hf["config"],
                 "best_vs_best": statistics.median(t[ours["config"]] / t[hf["config"]] for t in tps)}
        if all("vanilla" in t and "hf-assisted" in t for t in tps):
            entry["vanilla_vs_assisted"] = statistics.median(t["vanilla"] / t["hf-assisted"] for t in tps)
        out.append(entry)
    return out


def print_tables(rows: list[dict[str, Any]], hf: list[dict[str, Any]]) -> None:
    head = f"{'domain':<14}{'T':>4} {'config':<12}{'tok/s':>8}{'vs plain':>9}{'alpha':>7}{'tau':>6}{'N':>6}" \
           f"{'c':>7}{'bound':>7}{'meas/bnd':>9}{'v':>6}{'bnd(v)':>7}{'overhead':>9}"
    print(head)
    print("-" * len(head))
    for r in rows:
        extra = ""
        if "tau" in r:
            extra = f"{r['alpha']:>7.2f}{r['tau']:>6.2f}{r['N']:>6.1f}{r['c']:>7.3f}{r['bound']:>7.2f}" \
                    f"{r['vs_plain'] / r['bound']:>9.2f}{r['v']:>6.2f}{r['bound_v']:>7.2f}"
        elif "overhead_pct" in r:
            extra = " " * 55
        over = f"{r['overhead_pct']:>8.1f}%" if "overhead_pct" in r else ""
        print(f"{r['domain']:<14}{r['T']:>4g} {r['config']:<12}{r['tok_s']:>8.1f}{r['vs_plain']:>9.2f}{extra}{over}")
    print()
    print(f"{'domain':<14}{'T':>4} {'best ours':<12}{'best HF':<13}{'ours/HF':>8}{'vanilla/assisted':>18}")
    for e in hf:
        va = f"{e['vanilla_vs_assisted']:>18.2f}" if "vanilla_vs_assisted" in e else ""
        print(f"{e['domain']:<14}{e['T']:>4g} {e['best_ours']:<12}{e['best_hf']:<13}{e['best_vs_best']:>8.2f}{va}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--domains", default="code,structured,math,chat,summarization")
    parser.add_argument("--strategies", default="vanilla,ngram,lookahead,medusa,eagle3")
    parser.add_argument("--temperatures", default="0,1")
    parser.add_argument("--prompts", type=int, default=3, help="prompts per domain")
    parser.add_argument("--reps", type=int, default=2, help="timed repetitions per prompt (after a warm-up)")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--context", type=int, default=128, help="prompt tokens kept (the last ones)")
    parser.add_argument("--option", action="append", default=[],
                        help="strategy option STRATEGY.KEY=VALUE (int), e.g. ngram.num_draft_tokens=8")
    parser.add_argument("--json", help="also write every row here")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    options = {name: dict(knobs) for name, knobs in OPTIONS.items()}
    for item in args.option:
        key, _, value = item.partition("=")
        name, _, knob = key.partition(".")
        options.setdefault(name, {})[knob] = int(value)
    configs, info = build_configs(args, options)
    rounds = run_rounds(configs, args.domains.split(","), [float(t) for t in args.temperatures.split(",")],
                        args, info["tokenizer"])
    rows = summarise(configs, rounds)
    hf = versus_hf(rounds, rows)
    print_tables(rows, hf)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"args": vars(args), "zoo": info["zoo"], "options": info["options"], "rows": rows,
                       "versus_hf": hf}, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())

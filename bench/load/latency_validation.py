"""Predicted mean TPOT and p99 ITL against measured profile cells (issue 35 item 6).

For every speculative cell of a ``specpick profile`` run (its ``summary.json``) that has plain
decoding measured beside it (same task, temperature and concurrency), the latency model
(``policies.latency_model``) predicts the cell's mean TPOT and p99 ITL from:

- the **engine's own plain step**, read off the plain cell of the same run (its median ITL: one
  plain step; its median TTFT at concurrency 1: one prompt's prefill). This calibrates the engine
  and the machine per run, from plain decoding only;
- the **step ratio** R (a speculative step over a plain one), two ways:
  ``model``: the load curve (``policies.config_cost``), for the reference engine on the zoo priced on
  the reference loop's own calibrated curve (``bench/load/zoo-ci-cpu-calibration.json``, engine
  ``hf``); no curve describes vLLM's CPU build or llama.cpp on CPU, so there it is not given.
  ``engine``: the median measured R (a speculative cell's mean gap over plain's) of the same
  engine's *other* cells of the same strategy and draft length (leave-one-cell-
  out): the engine's speculative overhead, never the cell's own.
- the cell's measured tokens per step (E[L] = ``tau``: acceptance is an input, not a prediction).

Then p99 ITL = the model's quantile of step + other requests' prefills (Poisson per gap, for a
wave's finite number of requests: a static wave, ``--wave-rounds 1``, admits all its prompts at once,
so no prefill lands in a gap), and mean TPOT = (step + prefills per gap × prefill) / E[L]. Printed: predicted vs measured, the ratio,
and the median absolute relative error per engine and figure. The measured p99 carries the
machine's jitter (a shared 2-core box: a preempted thread is a 100 ms gap), which the model does
not; ``+jitter`` adds the plain cell's own p99 - p50 excess (also from plain decoding only).

    D=bench/load/latency-data
    python bench/load/latency_validation.py --zoo $D/zoo-static-waves.summary.json $D/zoo-wave-rounds-4.summary.json \\
        --vllm $D/vllm-cpu-ngram4.summary.json $D/vllm-cpu-ngram2.summary.json \\
        --llamacpp $D/llamacpp-qwen-ngram1.summary.json $D/llamacpp-qwen-draft4.summary.json

The runs (``specpick profile``, one thread, a 2-core machine shared with other jobs, load 8-14):
zoo ``--strategies ngram,vanilla --num-draft-tokens 1,4 --tasks code,chat --temperatures 0
--limit-per-task 32 --max-new-tokens 48 --ignore-eos --no-early-stop``, ``--concurrency 1,4,16``
(static waves) and ``--concurrency 1,4,8 --wave-rounds 4`` (a wave turns its slots over, so
prefills land in gaps); vLLM's CPU build serving the zoo target, plain beside ngram N=4 and N=2
(one server each), ``--tasks code,chat,summarization --limit-per-task 24 --concurrency 1,4,16``;
llama.cpp: the real Qwen2.5-Coder pair's grid from the latency issue (one request per cell, 32
tokens, ``scripts/real_llamacpp_regret.py``'s machine).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from picker.engine.plugins import load_strategies
from policies import CostContext, ModelShape, chain, config_cost, engine_curve, latency, load_calibration
from policies.calibration import read_calibration

HERE = Path(__file__).resolve().parent
ZOO_CALIBRATION = HERE / "zoo-ci-cpu-calibration.json"
# The zoo's draft model (picker.zoo, ci preset): one Llama layer of width 64 over the 2048-token vocabulary.
ZOO_DRAFT = ModelShape(2048 * 64 + 4 * 64 * 64 + 3 * 64 * 172, 1, 64, 1, 32, 2048, 4.0, 4.0, name="zoo-draft")

# Mean prompt of the builtin code and chat prompts on the zoo's tokenizer (the records of the runs in
# bench/load/latency-data), where a summary has no records.jsonl beside it.
ZOO_PROMPT_TOKENS = 57.0

Key = tuple[str, float, int]  # task, temperature, concurrency


def _key(c: dict[str, Any]) -> Key:
    return c["task"], float(c["temperature"]), int(c["concurrency"])


def zoo_ratio(cell: dict[str, Any], prompt_tokens: float, output_tokens: float) -> float:
    """R of ``cell`` on the reference loop's calibrated curve, at the cell's concurrency."""
    cal = read_calibration(ZOO_CALIBRATION)
    curve = engine_curve("hf", load_calibration(ZOO_CALIBRATION, "hf"), label="zoo CPU calibration")
    hw = SimpleNamespace(memory_bandwidth_gbps=cal.hardware.memory_bandwidth_gbps, bf16_tflops=cal.hardware.bf16_tflops)
    ctx = CostContext(cal.model.to_shape(), hw, curve, int(prompt_tokens + output_tokens / 2), 1,  # type: ignore[arg-type]
                      ZOO_DRAFT)
    caps = load_strategies()[cell["strategy"]].capabilities
    return config_cost(caps, chain(int(cell["num_draft_tokens"])), ctx, int(cell["concurrency"])).step_ratio


def _prompt_tokens(run_dir: Path) -> float:
    """Mean prompt length of the run's requests (records.jsonl), else :data:`ZOO_PROMPT_TOKENS`."""
    lengths = []
    path = run_dir / "records.jsonl"
    if path.exists():
        for line in path.read_text().splitlines():
            extra = json.loads(line).get("extra") or {}
            if "prompt_tokens" in extra:
                lengths.append(float(extra["prompt_tokens"]))
    return statistics.fmean(lengths) if lengths else ZOO_PROMPT_TOKENS


def _joint_shares(baselines: list[dict[str, Any]], prefill: dict[tuple[str, float], float]) -> dict[tuple[str, float], float]:
    """What a further prompt adds to a prefill forward (``policies.latency_model.joint_prefill``), from
    plain decoding: its first wave at the highest concurrency C prefills C prompts together, so its
    median TTFT over the one-prompt TTFT is 1 + (C - 1) · share."""
    out = {}
    for b in baselines:
        key, c = (b["task"], float(b["temperature"])), int(b["concurrency"])
        one = prefill.get(key)
        if c > 1 and one and (key not in out or c > out[key][0]):
            out[key] = (c, min(max((float(b["ttft_ms_p50"]) / one - 1.0) / (c - 1), 0.0), 1.0))
    return {k: share for k, (_, share) in out.items()}


def _step(cell: dict[str, Any]) -> float:
    """One step of a cell, ms: its median gap, unless the stream arrived in bursts (a median gap
    under half the mean: steps of about a millisecond, which an HTTP server flushes several at a
    time, docs/latency.md), where only the mean gap is an engine figure."""
    p50, mean = float(cell["itl_ms_p50"]), float(cell["itl_ms_mean"])
    return p50 if p50 >= 0.5 * mean else mean


def rows(path: Path, engine: str) -> list[dict[str, Any]]:
    """One row per speculative cell with plain beside it: what is measured and the inputs to predict it."""
    d = json.loads(path.read_text())
    n_out = float(d["run"]["max_new_tokens"])
    waves = int(d["run"].get("wave_rounds") or 1)
    plain = {_key(b): b for b in d["baselines"]}
    prefill = {(b["task"], float(b["temperature"])): b["ttft_ms_p50"] for b in d["baselines"]
               if int(b["concurrency"]) == 1}
    joint = _joint_shares(d["baselines"], prefill)
    prompt = _prompt_tokens(path.parent)
    out = []
    for c in d["cells"]:
        p = plain.get(_key(c))
        if p is None or c.get("itl_ms_p50") is None or not c.get("tau"):
            continue
        out.append({
            "engine": engine, "source": str(path), "task": c["task"], "temperature": float(c["temperature"]),
            "concurrency": int(c["concurrency"]), "config": f"{c['strategy']} N={c['num_draft_tokens']}",
            "tau": float(c["tau"]), "n_out": n_out,
            # the profiler's waves (run.wave_rounds x C prompts, picker/profiler/run.py): prefills land
            # only in the gaps of a wave's own requests
            "requests": min(int(c.get("requests", 0)) or waves * int(c["concurrency"]), waves * int(c["concurrency"])),
            "plain_step_ms": _step(p), "plain_mean_gap_ms": float(p["itl_ms_mean"]),
            "plain_jitter_ms": float(p["itl_ms_p99"]) - float(p["itl_ms_p50"]),
            "prefill_ms": float(prefill.get((c["task"], float(c["temperature"])), p["ttft_ms_p50"])),
            "joint_share": joint.get((c["task"], float(c["temperature"])), 1.0),
            "measured_R": float(c["itl_ms_mean"]) / float(p["itl_ms_mean"]),
            "model_R": zoo_ratio(c, prompt, n_out) if engine == "zoo" else None,
            "tpot_ms": float(c["tpot_ms_mean"]), "itl_p99_ms": float(c["itl_ms_p99"]),
        })
    return out


def predict(row: dict[str, Any], ratio: float) -> tuple[float, float]:
    """(mean TPOT, p99 ITL) in ms for ``row`` at step ratio ``ratio``: the p99 from the plain cell's
    median gap (one step), the TPOT from its mean gap (one step with the machine's average jitter)."""
    pre = row["prefill_ms"] / 1e3

    def at(step_ms: float) -> Any:
        return latency(step_ms * ratio / 1e3, max(row["tau"], 1.0), pre, pre, row["n_out"], row["concurrency"],
                       requests=row["requests"], joint_share=row["joint_share"])
    return at(row["plain_mean_gap_ms"]).tpot_ms_mean, at(row["plain_step_ms"]).itl_ms_p99


def engine_ratio(row: dict[str, Any], all_rows: list[dict[str, Any]]) -> float | None:
    """Median measured R of the same engine's other cells of the same configuration (leave one out)."""
    others = [r["measured_R"] for r in all_rows if r is not row and r["engine"] == row["engine"]
              and r["config"] == row["config"]]
    return statistics.median(others) if others else None


def table(all_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for r in all_rows:
        for how, ratio in (("model", r["model_R"]), ("engine", engine_ratio(r, all_rows))):
            if ratio is None:
                continue
            tpot, p99 = predict(r, ratio)
            out.append({**r, "how": how, "R": ratio, "pred_tpot_ms": tpot, "pred_itl_p99_ms": p99,
                        "pred_itl_p99_jitter_ms": p99 + max(r["plain_jitter_ms"], 0.0)})
    return out


def _err(pred: float, meas: float) -> float:
    return abs(pred / meas - 1.0) if meas > 0 else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--zoo", nargs="*", default=[], type=Path, help="summary.json of reference-engine runs")
    ap.add_argument("--vllm", nargs="*", default=[], type=Path, help="summary.json of vLLM CPU runs")
    ap.add_argument("--llamacpp", nargs="*", default=[], type=Path, help="summary.json of llama.cpp runs")
    ap.add_argument("--json", type=Path, help="write every row here")
    args = ap.parse_args(argv)
    all_rows = [r for engine, paths in (("zoo", args.zoo), ("vllm-cpu", args.vllm), ("llamacpp", args.llamacpp))
                for p in paths for r in rows(p, engine)]
    out = table(all_rows)
    print("| engine | cell | C | E[L] | R how | R | TPOT pred | TPOT meas | ratio | p99 ITL pred | +jitter | p99 meas "
          "| ratio | ratio +jitter |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in out:
        print(f"| {r['engine']} | {r['task']} T={r['temperature']:g} {r['config']} | {r['concurrency']} | {r['tau']:.2f} "
              f"| {r['how']} | {r['R']:.2f} | {r['pred_tpot_ms']:.1f} | {r['tpot_ms']:.1f} "
              f"| {r['pred_tpot_ms'] / r['tpot_ms']:.2f} | {r['pred_itl_p99_ms']:.1f} | {r['pred_itl_p99_jitter_ms']:.1f} "
              f"| {r['itl_p99_ms']:.1f} | {r['pred_itl_p99_ms'] / r['itl_p99_ms']:.2f} "
              f"| {r['pred_itl_p99_jitter_ms'] / r['itl_p99_ms']:.2f} |")
    print("\nmedian |predicted / measured - 1| (cells):")
    for engine in dict.fromkeys(r["engine"] for r in out):
        for how in ("model", "engine"):
            sel = [r for r in out if r["engine"] == engine and r["how"] == how]
            if not sel:
                continue
            tp = statistics.median(_err(r["pred_tpot_ms"], r["tpot_ms"]) for r in sel)
            p9 = statistics.median(_err(r["pred_itl_p99_ms"], r["itl_p99_ms"]) for r in sel)
            pj = statistics.median(_err(r["pred_itl_p99_jitter_ms"], r["itl_p99_ms"]) for r in sel)
            print(f"  {engine:9s} R={how:6s} n={len(sel):3d}  TPOT {tp:6.1%}   p99 ITL {p9:6.1%}   p99 ITL +jitter {pj:6.1%}")
            for name, part in (("C=1", [r for r in sel if r["concurrency"] == 1]),
                               ("C>1", [r for r in sel if r["concurrency"] > 1])):
                if part:
                    print(f"  {'':9s} {name:8s} n={len(part):3d}  TPOT "
                          f"{statistics.median(_err(r['pred_tpot_ms'], r['tpot_ms']) for r in part):6.1%}   p99 ITL "
                          f"{statistics.median(_err(r['pred_itl_p99_ms'], r['itl_p99_ms']) for r in part):6.1%}   "
                          "p99 ITL +jitter "
                          f"{statistics.median(_err(r['pred_itl_p99_jitter_ms'], r['itl_p99_ms']) for r in part):6.1%}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

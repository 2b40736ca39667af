"""Plain vs speculative decoding on llama.cpp's ``llama-server`` with the real Qwen2.5-Coder pair.

One server per configuration (plain; the 0.5B draft at each N; ``ngram-simple``), run one
after another, each sent the same prompts in the same order through its chat endpoint
(``/v1/chat/completions``, the model's own chat template) at T=0. Reports tokens/s (the server's
``predicted_per_second``, decode only) and acceptance ``draft_n_accepted / draft_n`` from each response's ``timings``,
and whether the text equals plain greedy's.

    $ python scripts/real_llamacpp_bench.py --server /work/engines/llamacpp/bin/llama-server \\
          --out runs/real-llamacpp.json --max-tokens 64 --draft-n 2 4
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import urllib.request
from pathlib import Path

from picker.models import Layout, default_cache, find_pair
from picker.profiler.llamacpp_server import local_server

PROMPTS = {
    "code": ["Write a Python function that checks whether a string is a palindrome.",
             "Write a Python class for a stack with push, pop and peek.",
             "Write a bash one-liner that counts the lines of every .py file in a folder."],
    "chat": ["Explain what a Python list comprehension is, in two sentences.",
             "What is the difference between a tuple and a list in Python?"],
    "edit": ["Rename the variable x to count in this code and return the whole code:\n\n"
             "x = 0\nfor item in items:\n    x += 1\nprint(x)",
             "Add type hints to this function and return it:\n\ndef area(w, h):\n    return w * h"],
}


def _post(url: str, body: dict[str, object]) -> dict[str, object]:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as resp:
        return json.loads(resp.read())


def run_config(server: str, target: Path, extra: list[str], max_tokens: int,
               log: Path, threads: int, per_task: int) -> list[dict[str, object]]:
    rows = []
    with local_server(Path(server), target, ["--metrics", *extra], log, threads=threads) as base:
        for task, prompts in PROMPTS.items():
            for i, text in enumerate(prompts[:per_task]):
                t0 = time.perf_counter()
                out = _post(base + "/v1/chat/completions", {
                    "messages": [{"role": "user", "content": text}], "temperature": 0,
                    "max_tokens": max_tokens, "seed": 0})
                wall = time.perf_counter() - t0
                timings = out.get("timings", {})
                assert isinstance(timings, dict)
                rows.append({"task": task, "prompt": i, "wall_s": wall,
                             "text": out["choices"][0]["message"]["content"],  # type: ignore[index]
                             "predicted_n": timings.get("predicted_n"),
                             "tokens_per_second": timings.get("predicted_per_second"),
                             "draft_n": timings.get("draft_n", 0),
                             "draft_n_accepted": timings.get("draft_n_accepted", 0)})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", required=True)
    ap.add_argument("--cache", type=Path, default=None)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--draft-n", type=int, nargs="+", default=[4])
    ap.add_argument("--threads", type=int, default=2, help="-t and -td")
    ap.add_argument("--prompts-per-task", type=int, default=3)
    # e.g. --server-arg=--no-repack: a build whose AMX kernels crash on this CPU (seen here)
    ap.add_argument("--server-arg", action="append", default=[], help="extra llama-server flag")
    args = ap.parse_args()
    pair = find_pair("qwen2.5-coder")
    cache = (args.cache or default_cache()).resolve()
    target, draft = Layout(pair.target, cache).gguf, Layout(pair.draft, cache).gguf
    configs = {"plain": []}
    for n in args.draft_n:
        configs[f"draft-simple N={n}"] = ["-md", str(draft), "--spec-type", "draft-simple",
                                          "--spec-draft-n-max", str(n), "-td", str(args.threads)]
    configs["ngram-simple"] = ["--spec-type", "ngram-simple"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    results: dict[str, object] = {}
    plain_text: dict[tuple[str, int], str] = {}
    for name, extra in configs.items():
        rows = run_config(args.server, target, [*extra, *args.server_arg], args.max_tokens,
                          args.out.with_suffix(f".{name.replace(' ', '_')}.log"), args.threads,
                          args.prompts_per_task)
        if name == "plain":
            plain_text = {(r["task"], r["prompt"]): r["text"] for r in rows}  # type: ignore[misc]
        summary = {}
        for task in PROMPTS:
            sub = [r for r in rows if r["task"] == task]
            if not sub:
                continue
            dn = sum(int(r["draft_n"]) for r in sub)  # type: ignore[call-overload]
            da = sum(int(r["draft_n_accepted"]) for r in sub)  # type: ignore[call-overload]
            summary[task] = {
                "median_tokens_per_second": statistics.median(float(r["tokens_per_second"]) for r in sub),  # type: ignore[arg-type]
                "acceptance": da / dn if dn else None, "draft_n": dn, "draft_n_accepted": da,
                "same_text_as_plain": sum(plain_text.get((r["task"], r["prompt"])) == r["text"] for r in sub),  # type: ignore[misc]
                "prompts": len(sub)}
        results[name] = {"summary": summary, "runs": rows}
        print(name, json.dumps(summary), flush=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())

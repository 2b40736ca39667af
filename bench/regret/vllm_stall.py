"""Two vLLM servers on one CPU: does a request right after the other server's one stall?

Serves the zoo target twice (plain, and prompt lookup N = 4), then times 32-token completions of
code prompts: each server alone, the two alternating back to back, and alternating with a 1.5 s
pause -- the protocol question behind the profiler's ``GAP_S`` and ``vllm.py --gap``.

    python -m bench.regret.vllm_stall     # ~3 min; needs .engines/vllm-venv (scripts/engines-setup.sh)
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from bench.regret.vllm import _post as post
from bench.regret.vllm import serving
from picker.tasks import builtin_prompts
from picker.zoo import build_zoo

NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
PYTHON = Path(__file__).resolve().parents[2] / ".engines/vllm-venv/bin/python"


def _post(url: str, body: dict) -> float:
    """Seconds one completion takes on the server at ``url``."""
    start = time.perf_counter()
    post(url + "/v1/completions", body)
    return round(time.perf_counter() - start, 3)


def main() -> None:
    zoo = build_zoo("ci", progress=False)
    prompts = [p.turns[0] for p in builtin_prompts(["code"], 4, 0)] * 2
    with tempfile.TemporaryDirectory(prefix="spv") as work, \
            serving(PYTHON, zoo.target, {"ngram": NGRAM}, Path(work)) as s:
        def body(p: str) -> dict:
            return {"model": str(zoo.target), "prompt": p, "max_tokens": 32, "temperature": 0.0, "seed": 0}

        for label in ("plain", "ngram"):
            _post(s[label].url, body("warm up one two three"))
        print("ngram alone:", [_post(s["ngram"].url, body(p)) for p in prompts])
        print("plain alone:", [_post(s["plain"].url, body(p)) for p in prompts])
        print("alternating (plain, ngram):", [(_post(s["plain"].url, body(p)), _post(s["ngram"].url, body(p)))
                                              for p in prompts])
        paused = []
        for p in prompts:
            a = _post(s["plain"].url, body(p))
            time.sleep(1.5)
            b = _post(s["ngram"].url, body(p))
            time.sleep(1.5)
            paused.append((a, b))
        print("alternating, 1.5 s pauses:", paused)


if __name__ == "__main__":
    main()

"""What to measure when the evidence cannot tell: the exact ``specpick profile`` command.

Where a predicted range does not clear the decision's bar (``picker.recommend.uncertainty``) the
plan leaves speculation off there and names the measurement that would decide it: the undecided
configuration against plain decoding on the deployment's own engine, at the concurrencies in
question, on the profile's tasks and temperatures, in interleaved A/B rounds until the gain's
interval is tight enough to say on which side of 1 it lies. Everything in the command comes from
the profile and the decision; the servers' addresses are the engines' documented default ports
(llama-server 8080, vLLM 8000, SGLang 30000), the plain server's one above.

    >>> from picker.inputs.workload import load_profile
    >>> p = load_profile("profiles/code-assistant-qwen-llamacpp.yaml")
    >>> print(measure_command(p, "profiles/code-assistant-qwen-llamacpp.yaml", "ngram", 1, (1, 4)))
    ... # doctest: +NORMALIZE_WHITESPACE
    specpick profile --backend llamacpp --url http://127.0.0.1:8080 --plain-url http://127.0.0.1:8081
    --workload profiles/code-assistant-qwen-llamacpp.yaml --strategies ngram --num-draft-tokens 1
    --tasks code,chat,structured,math,summarization --temperatures 0,0.7 --concurrency 1,4 --order abba
    --gain-ci-target 0.02 --out runs/code-assistant-qwen-llamacpp-ngram-n1
"""

from __future__ import annotations

from collections.abc import Sequence

from picker.inputs.workload import WorkloadProfile
from picker.recommend.uncertainty import ENABLE_MARGIN

# The profiler's backend for each engine it can drive live, and the engine's default port.
BACKENDS: dict[str, tuple[str, int]] = {"llama_cpp": ("llamacpp", 8080), "vllm": ("vllm", 8000),
                                        "sglang": ("sglang", 30000)}


def measure_command(profile: WorkloadProfile, path: str, strategy: str, n: int, levels: Sequence[int]) -> str:
    """The ``specpick profile`` command that measures ``strategy`` at draft length ``n`` against plain
    decoding at concurrency ``levels`` on the profile's tasks and temperatures, with the A/B gain's
    interval asked to within the decision's margin. A live server runs the shape it was launched
    with (a tree from the plan's engine config; ``n`` is its depth). An engine the profiler cannot
    drive gets the sentence saying so, with the same measurement to make by other means."""
    t = profile.traffic
    tasks = ",".join(sorted(t.task_mix, key=lambda k: (-t.task_mix[k], k)))  # by share: the file's order is no fact
    temps = ",".join(f"{x.value:g}" for x in t.temperature)
    conc = ",".join(str(c) for c in sorted(set(levels)))
    shape = f"--num-draft-tokens {n}"
    engine = profile.engine.name
    if engine not in BACKENDS:
        return (f"{engine} has no profiler backend: measure {strategy} ({n} "
                f"draft tokens) against plain decoding on tasks {tasks} at temperatures {temps} and concurrency "
                f"{conc}, configurations interleaved, until the gain's 95% interval is within "
                f"±{ENABLE_MARGIN:.0%}")
    backend, port = BACKENDS[engine]
    plain = f" --plain-url http://127.0.0.1:{port + 1}"  # every live backend times plain decoding there
    name = profile.name or "profile"
    return (f"specpick profile --backend {backend} --url http://127.0.0.1:{port}{plain} --workload {path or name} "
            f"--strategies {strategy} {shape} --tasks {tasks} --temperatures {temps} --concurrency {conc} "
            f"--order abba --gain-ci-target {ENABLE_MARGIN:g} --out runs/{name}-{strategy}-n{n}")

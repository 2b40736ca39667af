"""Profile one speculative configuration on vLLM's CPU build against plain vLLM, both served here.

Starts a plain server and a speculative one of the zoo ``ci`` target (``picker.profiler.vllm_server``:
loopback, float32, eager, the venv's Intel OpenMP), one after the other (two starting at once on two
busy cores only slow each other), with the ``speculative_config`` specpick emits for ``--strategy``
at ``--n`` (``picker.recommend.engine_configs``), then runs ``specpick profile --backend vllm --url
SPEC --plain-url PLAIN`` with the remaining arguments, and prints vLLM's own clocks beside the
client's (``run.server_report``) and each cell's gain, α and latency figures. Both servers are
stopped at the end, also on Ctrl-C or SIGTERM.

    $ SPECPICKER_ENGINES_DIR=/work/engines python scripts/vllm_pair_profile.py --strategy ngram --n 4 \\
          --out runs/vllm-ngram4 -- --tasks code,summarization --temperatures 0 --limit-per-task 8 \\
          --max-new-tokens 48 --ignore-eos --concurrency 1,4 --no-early-stop

(the engine tier's ``tests/engines/test_vllm_profile.py`` runs that command and bounds the clocks'
agreement; this is the same run by hand, for other grids).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from picker.engine.plugins import load_strategies
from picker.profiler.vllm_server import Server
from picker.recommend.engine_configs import ScheduleEntry, build_engine_configs
from picker.zoo import build_zoo

ROOT = Path(__file__).resolve().parents[1]


def speculative_config(strategy: str, n: int, draft: Path) -> dict[str, Any]:
    """The ``speculative_config`` specpick emits for vLLM for ``strategy`` with N = ``n``."""
    caps = load_strategies(only_builtin=True)[strategy].capabilities
    cfg = build_engine_configs(strategy=strategy, engines=caps.engines, num_speculative_tokens=n, tree=None,
                               schedule=[ScheduleEntry(1, None, n)], draft_path=str(draft) if caps.artifact else None)
    if not cfg["vllm"]["supported"]:
        raise SystemExit(f"{strategy}: {cfg['vllm']['reason']}")
    return dict(cfg["vllm"]["speculative_config"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--strategy", required=True, help="a built-in strategy vLLM runs (ngram, vanilla, ...)")
    ap.add_argument("--n", type=int, required=True, help="draft tokens per step")
    ap.add_argument("--out", type=Path, required=True, help="the profile's --out")
    ap.add_argument("profile_args", nargs="*", help="after --: specpick profile's own flags")
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # finally still stops the servers
    zoo = build_zoo("ci", progress=False)
    spec = speculative_config(a.strategy, a.n, zoo.draft)
    python = Path(os.environ.get("SPECPICKER_ENGINES_DIR", ROOT / ".engines")) / "vllm-venv" / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"no vLLM venv at {python.parent.parent}: run `bash scripts/engines-setup.sh vllm`")
    work = a.out.with_name(a.out.name + ".servers")
    servers: list[Server] = []
    try:
        for label, config in (("plain", None), (a.strategy, spec)):
            servers.append(Server(python, zoo.target, config, work / label))
            print(f"{label}: up after {servers[-1].wait_up():.0f} s", flush=True)
        plain, ours = servers
        cmd = [sys.executable, "-c", "from picker.cli.main import app; app()", "profile", "--backend", "vllm",
               "--url", ours.url, "--plain-url", plain.url, "--strategies", a.strategy,
               "--num-draft-tokens", str(a.n), "--out", str(a.out), *a.profile_args]
        start = time.monotonic()
        proc = subprocess.run(cmd, check=False)
        print(f"specpick profile exited {proc.returncode} after {time.monotonic() - start:.0f} s", flush=True)
        if proc.returncode != 0:
            return proc.returncode
    finally:
        for server in servers:
            server.stop()
    summary = json.loads((a.out / "summary.json").read_text(encoding="utf-8"))
    print(json.dumps(summary["run"].get("server_report"), indent=1))
    for c in summary["cells"]:
        print(f"{c['strategy']} N={c['num_draft_tokens']} {c['task']} T={c['temperature']:g} C={c['concurrency']}: "
              f"gain {c.get('gain_vs_plain')} {c.get('gain_ci')} alpha {c['alpha']} "
              f"ITL p50/p99 {c.get('itl_ms_p50')}/{c.get('itl_ms_p99')} ms TPOT {c.get('tpot_ms_mean')} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())

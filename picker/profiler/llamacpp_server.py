"""A local ``llama-server`` to profile against: started on a free loopback port, always stopped.

``specpick profile --backend llamacpp --url URL`` talks to a server someone started; the scripts that
measure the real pair (``scripts/real_llamacpp_*.py``) and the llama.cpp engine tests start their
own, one per configuration, and this is the one way they do it: the command line goes to the top
of ``log`` and the server's output after it, the context manager yields the base URL once
``/health`` answers, and on leaving it the server is terminated (killed if it lingers).

    with local_server(Path("llama-server"), model, ["--metrics"], log, slots=4) as url:
        ...  # url == "http://127.0.0.1:PORT"
"""

from __future__ import annotations

import shlex
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

START_LIMIT_S = 180.0  # loading a 1.1 GB GGUF on a busy 2-core machine took up to a minute here


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def local_server(server: Path, model: Path, args: Sequence[str], log: Path, *, context: int = 4096,
                 slots: int = 1, threads: int = 1, start_limit_s: float = START_LIMIT_S) -> Iterator[str]:
    """``server -m model`` on 127.0.0.1 with ``-c context -np slots -t threads`` and ``args``.

    Raises RuntimeError, with the end of the log, when the server exits or is not up in time.
    """
    port = free_port()
    cmd = [str(server), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-c", str(context),
           "-np", str(slots), "-t", str(threads), *args]
    log.write_text(shlex.join(cmd) + "\n", encoding="utf-8")
    with log.open("ab") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + start_limit_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"llama-server exited with {proc.returncode} ({log}):\n{_tail(log)}")
            with suppress(OSError), urllib.request.urlopen(f"{url}/health", timeout=2) as resp:
                if resp.status == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"llama-server not up after {start_limit_s:.0f} s ({log}):\n{_tail(log)}")
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        with suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=30)
        proc.kill()  # does nothing once it has exited
        proc.wait()


def _tail(log: Path, chars: int = 3000) -> str:
    return log.read_text(encoding="utf-8", errors="replace")[-chars:]

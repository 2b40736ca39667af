"""A headless Chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``).

No websocket library and no driver binary: Chromium reads NUL-terminated JSON commands on its fd 3
and writes replies and events on fd 4. Used by the opt-in browser tier (``pytest -m browser``).

    >>> with Chromium.start(Path("/tmp/profile-dir")) as browser:          # doctest: +SKIP
    ...     page = browser.open("file:///tmp/page.html")
    ...     browser.evaluate(page, "document.title")
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync")


def find_chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


class CdpError(RuntimeError):
    pass


def _above(fd: int, floor: int = 10) -> int:
    """``fd`` duplicated to a number >= ``floor`` (the original closed)."""
    import fcntl

    high = fcntl.fcntl(fd, fcntl.F_DUPFD, floor)
    os.close(fd)
    return high


class Chromium:
    """One browser process; :meth:`send` runs a command and returns its result, keeping events."""

    def __init__(self, proc: subprocess.Popen[bytes], to_browser: int, from_browser: int) -> None:
        self.proc, self.to_browser, self.from_browser = proc, to_browser, from_browser
        self.events: list[dict[str, Any]] = []
        self._buf = b""
        self._next = 0

    @classmethod
    def start(cls, user_data_dir: Path, binary: str | None = None) -> Chromium:
        binary = binary or find_chromium()
        if binary is None:
            raise CdpError("no chromium on PATH (apt-get install -y chromium)")
        cmd_r, cmd_w = os.pipe()   # we write commands, the browser reads them on its fd 3
        out_r, out_w = os.pipe()   # the browser writes on its fd 4, we read
        # Move the child's ends above 4 first: a pipe end that already is fd 3 or 4 would be closed
        # by the redirections below.
        cmd_r, out_w = (_above(fd) for fd in (cmd_r, out_w))
        # The shell puts the pipe ends on fds 3 and 4 in the child, where Chromium expects them.
        script = f'exec "$0" "$@" 3<&{cmd_r} 4>&{out_w} {cmd_r}<&- {out_w}>&-'
        proc = subprocess.Popen(["bash", "-c", script, binary, *FLAGS, "--remote-debugging-pipe",
                                 f"--user-data-dir={user_data_dir}", "about:blank"],
                                pass_fds=(cmd_r, out_w), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(cmd_r)
        os.close(out_w)
        return cls(proc, cmd_w, out_r)

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=5)
        except (CdpError, OSError):
            pass
        for fd in (self.to_browser, self.from_browser):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()  # only the process this helper started
            self.proc.wait()

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CdpError("timed out waiting for the browser")
            ready, _, _ = select.select([self.from_browser], [], [], left)
            if ready:
                chunk = os.read(self.from_browser, 1 << 16)
                if not chunk:
                    raise CdpError("the browser closed the pipe")
                self._buf += chunk
        msg, _, self._buf = self._buf.partition(b"\0")
        return json.loads(msg)

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None,
             timeout: float = 30.0) -> dict[str, Any]:
        self._next += 1
        ident = self._next
        msg: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.to_browser, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == ident:
                if "error" in reply:
                    raise CdpError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_event(self, method: str, session: str, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        for ev in self.events:
            if ev.get("method") == method and ev.get("sessionId") == session:
                return ev
        while True:
            ev = self._read(deadline)
            self.events.append(ev)
            if ev.get("method") == method and ev.get("sessionId") == session:
                return ev

    def open(self, url: str, width: int = 1100, height: int = 900) -> str:
        """A new tab at ``url``, loaded, with console and log events on; returns its session id."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable", session=session)
        # A focused document: the async clipboard refuses writes from an unfocused one.
        self.send("Emulation.setFocusEmulationEnabled", {"enabled": True}, session=session)
        self.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1,
                                                         "mobile": False}, session=session)
        self.send("Page.navigate", {"url": url}, session=session)
        self.wait_event("Page.loadEventFired", session)
        return session

    def evaluate(self, session: str, expression: str, *, gesture: bool = False) -> Any:
        """The JSON value of ``expression`` (promises awaited); a thrown exception is a CdpError."""
        out = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True,
                                             "userGesture": gesture}, session=session)
        if "exceptionDetails" in out:
            raise CdpError(f"{expression[:60]}: {out['exceptionDetails'].get('text')}")
        return out.get("result", {}).get("value")

    def errors(self, session: str) -> list[str]:
        """Console errors, uncaught exceptions and error log entries the page produced."""
        out = []
        for ev in self.events:
            if ev.get("sessionId") != session:
                continue
            m, p = ev.get("method"), ev.get("params", {})
            if m == "Runtime.exceptionThrown":
                details = p.get("exceptionDetails", {})
                out.append(str(details.get("exception", {}).get("description") or details.get("text")))
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(" ".join(str(a.get("value", a.get("description"))) for a in p.get("args", [])))
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append(str(p["entry"].get("text")))
        return out

    def screenshot(self, session: str, path: Path) -> Path:
        """The full page (beyond the viewport) as a PNG at ``path``."""
        import base64

        data = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True},
                         session=session, timeout=60)["data"]
        path.write_bytes(base64.b64decode(data))
        return path

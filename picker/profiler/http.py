"""A small HTTP client for live endpoints: timeouts, retries with backoff, one-line errors.

Standard library only (``urllib``), so profiling a live server needs nothing beyond the package.
Transient faults (connection refused or reset, timeouts, HTTP 5xx and 429) are retried with
exponential backoff; anything else, and a fault that outlasts the retries, raises
:class:`EndpointError`, a :class:`~picker.errors.UserError` whose line names the URL.

    >>> client = HttpClient(timeout=0.5, retries=0)
    >>> try:
    ...     client.get_json("http://127.0.0.1:9/get_server_info")   # port 9: nothing listens
    ... except EndpointError as exc:
    ...     print(str(exc).split(": ")[0])
    http://127.0.0.1:9/get_server_info
"""

from __future__ import annotations

import http.client
import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from picker.errors import UserError

T = TypeVar("T")
MAX_BODY_BYTES = 64 * 1024 * 1024  # a response larger than this is a misconfigured endpoint


class EndpointError(UserError):
    """A live endpoint failed or answered something we cannot use; names the endpoint."""

    def __init__(self, url: str, message: str) -> None:
        super().__init__(message, file=url)
        self.url = url


class _Transient(Exception):
    """A fault worth retrying; carries the one-line description used if retries run out."""


@dataclass(frozen=True)
class HttpClient:
    """Blocking JSON/text requests with per-request ``timeout`` seconds and ``retries`` re-tries."""

    timeout: float = 60.0
    retries: int = 2
    backoff: float = 0.5  # seconds before the first retry; doubles each time

    def get_json(self, url: str) -> Any:
        return self._json(url, self._request(url, None))

    def post_json(self, url: str, payload: dict[str, Any]) -> Any:
        return self._json(url, self._request(url, json.dumps(payload).encode()))

    def post_stream(self, url: str, payload: dict[str, Any]) -> Iterator[tuple[float, Any]]:
        """POST with a server-sent-events answer: ``(time.perf_counter() when it arrived, JSON)`` per
        ``data:`` event, until ``data: [DONE]`` or the end of the stream. Connecting is retried as
        any request is; a stream cut short after its first event is an error, never retried (the
        events already read are the request's clock)."""
        body = json.dumps({**payload, "stream": True}).encode()
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        resp = self._retrying(url, lambda: self._open(url, body, headers))
        with resp:
            ctype = resp.headers.get_content_type()
            if ctype != "text/event-stream":
                raise EndpointError(url, f"answered {ctype}, not server-sent events (the request asked for a stream)")
            try:
                for raw in resp:
                    arrived = time.perf_counter()
                    line = raw.strip()
                    if not line.startswith(b"data:"):
                        continue  # blank separators, comments, event names
                    data = line[5:].strip()
                    if data == b"[DONE]":
                        return
                    yield arrived, self._json(url, data)
            except TimeoutError:
                raise EndpointError(url, f"stream stalled: no event for {self.timeout:g} s") from None
            except (ConnectionError, http.client.HTTPException) as exc:
                raise EndpointError(url, f"stream cut short: {exc.__class__.__name__}") from None

    def _open(self, url: str, data: bytes | None, headers: dict[str, str]) -> Any:
        """The open response (POST with ``data``, else GET); transient faults become :class:`_Transient`,
        the rest EndpointError."""
        req = urllib.request.Request(url, data=data, headers=headers, method="POST" if data else "GET")
        try:
            return urllib.request.urlopen(req, timeout=self.timeout)
        except urllib.error.HTTPError as exc:
            detail = exc.read(200).decode("utf-8", "replace").strip().replace("\n", " ")
            message = f"HTTP {exc.code} {exc.reason}" + (f": {detail}" if detail else "")
            if exc.code >= 500 or exc.code == 429:
                raise _Transient(message) from None
            raise EndpointError(url, message) from None
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, (TimeoutError, socket.timeout)):
                raise _Transient(f"timed out after {self.timeout:g} s") from None
            if isinstance(exc.reason, ConnectionRefusedError):
                raise _Transient("connection refused (is the server running?)") from None
            raise _Transient(f"cannot connect: {exc.reason}") from None
        except TimeoutError:
            raise _Transient(f"timed out after {self.timeout:g} s") from None
        except (ConnectionError, http.client.HTTPException) as exc:
            raise _Transient(f"connection failed: {exc.__class__.__name__}") from None

    def get_text(self, url: str) -> str:
        body = self._request(url, None)
        try:
            return body.decode("utf-8")
        except UnicodeDecodeError:
            raise EndpointError(url, "response is not UTF-8 text") from None

    @staticmethod
    def _json(url: str, body: bytes) -> Any:
        try:
            return json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            snippet = body[:60].decode("utf-8", "replace")
            raise EndpointError(url, f"malformed JSON in response ({exc.__class__.__name__}: "
                                     f"{snippet!r})") from None

    def _request(self, url: str, data: bytes | None) -> bytes:
        return self._retrying(url, lambda: self._once(url, data))

    def _retrying(self, url: str, attempt: Callable[[], T]) -> T:
        """``attempt()``, retried with backoff while it fails transiently; then one EndpointError."""
        last = ""
        for n in range(self.retries + 1):
            if n:
                time.sleep(self.backoff * 2 ** (n - 1))
            try:
                return attempt()
            except _Transient as exc:
                last = str(exc)
        tries = self.retries + 1
        raise EndpointError(url, f"{last} (after {tries} attempt{'s' if tries > 1 else ''})")

    def _once(self, url: str, data: bytes | None) -> bytes:
        """One attempt; transient faults become :class:`_Transient`, the rest EndpointError."""
        headers = {"Content-Type": "application/json"} if data is not None else {}
        try:
            with self._open(url, data, headers) as resp:
                body = resp.read(MAX_BODY_BYTES + 1)
        except TimeoutError:
            raise _Transient(f"timed out after {self.timeout:g} s") from None
        except (ConnectionError, http.client.HTTPException) as exc:
            raise _Transient(f"connection failed: {exc.__class__.__name__}") from None
        if len(body) > MAX_BODY_BYTES:
            raise EndpointError(url, f"response larger than {MAX_BODY_BYTES >> 20} MiB")
        return body

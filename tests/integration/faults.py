"""A fault-injecting HTTP reverse proxy between the exporter and the Kubernetes emulator.

``FaultProxy(upstream_url).start()`` listens on a free 127.0.0.1 port (``proxy.url``) and forwards
every request to the upstream (kmock's emulator), streaming each response through chunk by chunk as
it arrives (a watch event reaches the client as soon as the emulator sends it; nothing is buffered).
The mode is switched at runtime from the test thread; each switch returns once it has taken effect
on the proxy's loop, with the ``time.monotonic()`` of the switch:

* ``proxy.pass_()``  -- forward (the default).
* ``proxy.hang()``   -- a stalled API server: a new request is accepted (and logged) but not
  forwarded nor answered, and every open response (watch streams included) stops forwarding bytes.
  Nothing is lost: when the mode changes, a held request proceeds under the new mode and a frozen
  stream resumes, unless its client gave up in the meantime (a closed client connection cancels
  its handler and the upstream request).
* ``proxy.status(code, retry_after=None)`` -- every request is answered ``code`` with a Kubernetes
  ``Status`` JSON body (for 429 also a ``Retry-After`` header, 1 s unless given, and
  ``details.retryAfterSeconds``). Streams open when the mode is entered are ended cleanly, as an
  API server that goes away ends its watches; their clients must come back and meet the error.

The emulator ignores ``timeoutSeconds`` on a watch; a real API server ends the watch after it. The
proxy does that for it (``honour_timeout_seconds=True``, the default): a forwarded watch response
ends cleanly ``timeoutSeconds`` after it was forwarded (not while the proxy hangs).

``proxy.log()`` returns a snapshot of every request seen: method, path, query, arrival time
(monotonic and wall clock), the mode at arrival, the status answered (None while unanswered) and
when. The proxy runs its own asyncio loop in a daemon thread (pykit.aioloop.LoopThread), like
the emulator in pykit/kube.py.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from dataclasses import dataclass, replace
from typing import Any, Callable

import aiohttp
from aiohttp import web

from pykit.aioloop import LoopThread

#: Headers that belong to one connection, never forwarded (RFC 9110 7.6.1), plus the framing ones
#: that aiohttp sets itself.
HOP_BY_HOP = frozenset(h.lower() for h in (
    "Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "TE", "Trailer",
    "Transfer-Encoding", "Upgrade", "Host", "Content-Length",
))

STATUS_REASONS = {
    400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 409: "Conflict",
    410: "Expired", 429: "TooManyRequests", 500: "InternalError", 502: "InternalError",
    503: "ServiceUnavailable", 504: "Timeout",
}

PASS, HANG, STATUS = "pass", "hang", "status"


@dataclass
class ProxiedRequest:
    """One request the proxy received."""

    method: str
    path: str
    query: dict[str, str]
    t: float  # time.monotonic() at arrival
    wall: float  # time.time() at arrival
    mode: str  # the mode at arrival: pass, hang, status
    status: int | None = None  # what was answered; None while held / never answered
    answered_at: float | None = None  # monotonic time the status line was sent
    watch: bool = False
    client_gone: bool = False  # the client closed the connection before the response ended

    def is_resource(self, plural: str) -> bool:
        """True for a request on the resource ``plural`` (any group, namespace or object)."""
        parts = self.path.rstrip("/").split("/")
        return plural in parts[3:] if self.path.startswith("/api/") else plural in parts[4:]


@dataclass(frozen=True)
class _Mode:
    name: str = PASS
    code: int = 0
    retry_after: int | None = None


def _status_body(code: int, retry_after: int | None) -> dict[str, Any]:
    reason = STATUS_REASONS.get(code, "InternalError" if code >= 500 else "BadRequest")
    body: dict[str, Any] = {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": f"fault injected by the integration test: HTTP {code}", "reason": reason, "code": code,
    }
    if retry_after is not None:
        body["details"] = {"retryAfterSeconds": retry_after}
    return body


class FaultProxy(LoopThread):
    """See the module docstring."""

    what = "fault proxy"
    thread_name = "fault-proxy"

    def __init__(self, upstream: str, *, honour_timeout_seconds: bool = True, shutdown_timeout: float = 1.0):
        super().__init__()
        self.upstream = upstream.rstrip("/")
        self.honour_timeout_seconds = honour_timeout_seconds
        self.shutdown_timeout = shutdown_timeout
        self.port = 0
        self._mode = _Mode()
        self._changed: asyncio.Event | None = None  # set (and replaced) on every mode switch
        self._cut_epoch = 0  # bumped when entering status mode: open streams end
        self._log: list[ProxiedRequest] = []
        self._log_lock = threading.Lock()
        self._session: aiohttp.ClientSession | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _serve(self) -> None:
        assert self._stop is not None
        self._changed = asyncio.Event()
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0),  # no pool limit: a full pool would be a hidden hang
            auto_decompress=False, timeout=aiohttp.ClientTimeout(total=None),
            skip_auto_headers=("Accept-Encoding", "User-Agent", "Content-Type"))
        server = web.Server(self._handle, handler_cancellation=True)
        runner = web.ServerRunner(server, shutdown_timeout=self.shutdown_timeout)
        await runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        site = web.SockSite(runner, sock)
        await site.start()
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            self._changed.set()  # wake held handlers so that they notice the shutdown
            await runner.cleanup()
            await self._session.close()

    def __enter__(self) -> "FaultProxy":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- modes (called from the test thread) ------------------------------------------------------

    def _switch(self, mode: _Mode) -> float:
        async def apply() -> float:
            if mode.name == STATUS:
                self._cut_epoch += 1
            self._mode = mode
            assert self._changed is not None
            old, self._changed = self._changed, asyncio.Event()
            old.set()
            return time.monotonic()

        return self._call(apply)

    def pass_(self) -> float:
        """Forward every request; held requests and frozen streams continue."""
        return self._switch(_Mode(PASS))

    def hang(self) -> float:
        """Accept requests and answer none; freeze open responses."""
        return self._switch(_Mode(HANG))

    def status(self, code: int, retry_after: int | None = None) -> float:
        """Answer every request ``code`` with a Status body; end the streams open now."""
        if code == 429 and retry_after is None:
            retry_after = 1
        return self._switch(_Mode(STATUS, code, retry_after))

    @property
    def mode(self) -> str:
        m = self._mode
        return f"status({m.code})" if m.name == STATUS else m.name

    # -- request log ------------------------------------------------------------------------------

    def log(self, since: float | None = None, resource: str | None = None,
            predicate: Callable[[ProxiedRequest], bool] | None = None) -> list[ProxiedRequest]:
        """Snapshot (copies) of the requests seen, optionally those arrived at or after ``since``
        (monotonic), on ``resource`` (a plural), or matching ``predicate``."""
        with self._log_lock:
            out = [replace(r) for r in self._log]
        if since is not None:
            out = [r for r in out if r.t >= since]
        if resource is not None:
            out = [r for r in out if r.is_resource(resource)]
        if predicate is not None:
            out = [r for r in out if predicate(r)]
        return out

    def format_log(self, entries: list[ProxiedRequest] | None = None, t0: float | None = None) -> str:
        entries = self.log() if entries is None else entries
        t0 = entries[0].t if (t0 is None and entries) else (t0 or 0.0)
        lines = []
        for r in entries:
            q = "&".join(f"{k}={v}" for k, v in r.query.items())
            lines.append(f"{r.t - t0:9.3f}s {r.mode:<6} {r.method} {r.path}{'?' + q if q else ''} -> "
                         f"{r.status if r.status is not None else 'unanswered'}"
                         f"{' (client gone)' if r.client_gone else ''}")
        return "\n".join(lines)

    def failure_report(self, last: int = 300) -> list[tuple[str, str]]:
        """A failure-report section (pykit.diagnostics): the last ``last`` requests seen."""
        entries = self.log()
        return [(f"fault proxy requests (last {min(last, len(entries))} of {len(entries)}; seconds since "
                 "the first)", self.format_log(entries[-last:], entries[0].t if entries else 0.0))]

    # -- the handler --------------------------------------------------------------------------------

    def _record(self, entry: ProxiedRequest, **changes: Any) -> None:
        with self._log_lock:
            for k, v in changes.items():
                setattr(entry, k, v)

    async def _while_hanging(self) -> None:
        """Return once the mode is not ``hang`` (or the proxy stops)."""
        assert self._stop is not None
        while self._mode.name == HANG and not self._stop.is_set():
            assert self._changed is not None
            await self._changed.wait()

    async def _answer_status(self, request: web.BaseRequest, entry: ProxiedRequest, mode: _Mode) -> web.StreamResponse:
        headers = {"Content-Type": "application/json"}
        if mode.retry_after is not None:
            headers["Retry-After"] = str(mode.retry_after)
        resp = web.Response(status=mode.code, headers=headers,
                            text=json.dumps(_status_body(mode.code, mode.retry_after)))
        self._record(entry, status=mode.code, answered_at=time.monotonic())
        return resp

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        query = dict(request.query)
        entry = ProxiedRequest(
            method=request.method, path=request.path, query=query, t=time.monotonic(), wall=time.time(),
            mode=self._mode.name, watch=query.get("watch") in ("true", "1"))
        with self._log_lock:
            self._log.append(entry)
        try:
            body = await request.read()
            await self._while_hanging()
            assert self._stop is not None
            if self._stop.is_set():
                return web.Response(status=503, text="fault proxy stopping")
            mode = self._mode
            if mode.name == STATUS:
                return await self._answer_status(request, entry, mode)
            return await self._forward(request, entry, body)
        except asyncio.CancelledError:
            self._record(entry, client_gone=True)
            raise

    async def _forward(self, request: web.BaseRequest, entry: ProxiedRequest, body: bytes) -> web.StreamResponse:
        assert self._session is not None and self._stop is not None
        epoch = self._cut_epoch
        deadline: float | None = None
        if entry.watch and self.honour_timeout_seconds:
            try:
                deadline = time.monotonic() + float(entry.query["timeoutSeconds"])
            except (KeyError, ValueError):
                deadline = None
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP]
        async with self._session.request(request.method, self.upstream + request.path_qs, headers=headers,
                                         data=body if body else None, allow_redirects=False) as up:
            await self._while_hanging()
            if self._mode.name == STATUS:  # the fault began while the upstream was answering
                return await self._answer_status(request, entry, self._mode)
            resp = web.StreamResponse(status=up.status, reason=up.reason)
            for k, v in up.headers.items():
                if k.lower() not in HOP_BY_HOP:
                    resp.headers.add(k, v)
            if up.content_length is not None and not entry.watch:
                resp.content_length = up.content_length
            await resp.prepare(request)
            self._record(entry, status=up.status, answered_at=time.monotonic())
            await self._pump(up, resp, epoch, deadline)
            return resp

    async def _pump(self, up: aiohttp.ClientResponse, resp: web.StreamResponse, epoch: int,
                    deadline: float | None) -> None:
        """Copy the upstream body to the client, chunk by chunk, until EOF, a cut, or the deadline."""
        assert self._stop is not None
        read: asyncio.Task[bytes] | None = None
        try:
            while True:
                await self._while_hanging()
                if self._cut_epoch != epoch or self._stop.is_set():
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    break
                if read is None:
                    read = asyncio.ensure_future(up.content.readany())
                assert self._changed is not None
                changed = asyncio.ensure_future(self._changed.wait())
                timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
                done, _ = await asyncio.wait({read, changed}, timeout=timeout,
                                             return_when=asyncio.FIRST_COMPLETED)
                changed.cancel()
                if read not in done:
                    continue  # the mode changed or the deadline passed: re-check at the top
                chunk = read.result()
                read = None
                if not chunk:
                    break  # upstream EOF
                await self._while_hanging()  # a chunk that arrives while hanging waits here
                if self._cut_epoch != epoch or self._stop.is_set():
                    break
                await resp.write(chunk)
            await resp.write_eof()
        finally:
            if read is not None and not read.done():
                read.cancel()

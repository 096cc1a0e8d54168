"""A TCP proxy whose faults are those of a real network (issue 15): half-open connections, a hung
server behind a load balancer that still accepts, and a failover to another backend.

``TcpProxy(upstream=("127.0.0.1", port)).start()`` listens on a free 127.0.0.1 port (``proxy.port``)
and pipes bytes both ways, unchanged (TLS and HTTP/2 pass through: the exporter verifies the real
server's certificate). Faults, switched from the test thread:

* ``proxy.freeze_existing()`` -- every connection open now goes silent for good: no byte is
  forwarded either way and neither side is closed (a NAT entry expired, a load balancer failed
  over). New connections are not affected.
* ``proxy.hang_new(True)`` -- new connections are accepted (the TCP handshake completes, as a load
  balancer's does) but nothing is forwarded: a hung server. ``hang_new(False)`` ends that for the
  connections that come after.
* ``proxy.switch(upstream)`` -- new connections go to another backend; old ones keep theirs.

``proxy.connections()`` lists every connection: when it was accepted (monotonic), its backend, whether
it was frozen or hung, and the bytes forwarded each way.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from dataclasses import dataclass, field

from pykit.aioloop import LoopThread


@dataclass
class Conn:
    accepted: float
    upstream: tuple[str, int] | None
    hung: bool = False
    frozen: bool = False
    up_bytes: int = 0
    down_bytes: int = 0
    closed: float | None = None
    tasks: list[asyncio.Task] = field(default_factory=list, repr=False)


class TcpProxy(LoopThread):
    what = "TCP proxy"
    thread_name = "tcp-proxy"

    def __init__(self, upstream: tuple[str, int]) -> None:
        super().__init__()
        self._upstream = upstream
        self._hang_new = False
        self._conns: list[Conn] = []
        self._lock = threading.Lock()
        self._server: asyncio.base_events.Server | None = None
        self.port = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def _serve(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        sock = self._server.sockets[0]
        self.port = sock.getsockname()[1]
        self._ready.set()
        assert self._stop is not None
        await self._stop.wait()
        self._server.close()
        for c in list(self._conns):
            for t in c.tasks:
                t.cancel()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = Conn(accepted=time.monotonic(), upstream=None if self._hang_new else self._upstream,
                    hung=self._hang_new)
        with self._lock:
            self._conns.append(conn)
        if conn.upstream is None:
            # Accepted, never answered: hold the socket until the client gives up.
            try:
                while await reader.read(65536):
                    pass
            finally:
                conn.closed = time.monotonic()
                writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*conn.upstream)
        except OSError:
            writer.close()
            conn.closed = time.monotonic()
            return

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, up: bool) -> None:
            try:
                while True:
                    data = await src.read(65536)
                    if not data:
                        break
                    if conn.frozen:
                        # Silent for good: swallow nothing, forward nothing, keep both ends open.
                        await asyncio.Event().wait()
                    dst.write(data)
                    await dst.drain()
                    if up:
                        conn.up_bytes += len(data)
                    else:
                        conn.down_bytes += len(data)
            except (OSError, asyncio.CancelledError):
                pass
            finally:
                if not conn.frozen:
                    try:
                        dst.close()
                    except OSError:
                        pass

        t1 = asyncio.ensure_future(pipe(reader, up_writer, True))
        t2 = asyncio.ensure_future(pipe(up_reader, writer, False))
        conn.tasks = [t1, t2]
        await asyncio.wait([t1, t2], return_when=asyncio.FIRST_COMPLETED)
        if not conn.frozen:
            for t in (t1, t2):
                t.cancel()
            conn.closed = time.monotonic()
        else:
            await asyncio.gather(t1, t2, return_exceptions=True)

    # -- faults, from the test thread ----------------------------------------------------------

    def freeze_existing(self) -> float:
        async def go() -> float:
            for c in self._conns:
                if c.closed is None:
                    c.frozen = True
            return time.monotonic()
        return self._call(go)

    def hang_new(self, on: bool) -> float:
        async def go() -> float:
            self._hang_new = on
            return time.monotonic()
        return self._call(go)

    def switch(self, upstream: tuple[str, int]) -> float:
        async def go() -> float:
            self._upstream = upstream
            return time.monotonic()
        return self._call(go)

    def connections(self) -> list[Conn]:
        with self._lock:
            return list(self._conns)


def host_port(url: str) -> tuple[str, int]:
    """('127.0.0.1', 6443) of 'https://127.0.0.1:6443'."""
    rest = url.split("://", 1)[-1].split("/", 1)[0]
    host, _, port = rest.rpartition(":")
    return host, int(port)

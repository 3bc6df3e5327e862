"""A loopback HTTP proxy in front of the apiserver that can play an outage, for bench.outage.

The operator speaks plain HTTP to the proxy (a kubeconfig whose ``server`` is the proxy); the
proxy speaks TLS to the apiserver. Plain HTTP on the operator's side lets the proxy see every
request line, so that each retry can be told apart by the loop that sent it (a watch of one
resource, one workload's status writes) instead of being an anonymous TCP connection.

- :attr:`Proxy.connections`: the time (``time.monotonic()``) of every TCP connection accepted;
- :attr:`Proxy.requests`: ``(time, method, path, refused)`` of every request head seen, where
  ``refused`` says it arrived during the outage;
- :meth:`Proxy.outage`: from now on, drop every open connection at once and answer every new
  one by reading its request head (to record it) and resetting it, no byte forwarded;
  :meth:`Proxy.restore` ends it.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import struct
import time
from dataclasses import dataclass, field

_HEAD_LIMIT = 64 * 1024


@dataclass(frozen=True)
class Request:
    at: float
    method: str
    path: str
    refused: bool


@dataclass
class Proxy:
    upstream_host: str
    upstream_port: int
    tls: ssl.SSLContext
    host: str = "127.0.0.1"
    port: int = 0
    connections: list[float] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)
    down: bool = False
    _open: set[asyncio.StreamWriter] = field(default_factory=set)
    _server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port, backlog=1024)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._open):
            _reset(writer)

    def outage(self) -> None:
        """Drop every open connection; refuse (reset) new ones until :meth:`restore`."""
        self.down = True
        for writer in list(self._open):
            _reset(writer)
        self._open.clear()

    def restore(self) -> None:
        self.down = False

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # NB: a cancelled connection task must end normally: asyncio logs the CancelledError of
        # a client_connected_cb task at shutdown otherwise.
        with contextlib.suppress(asyncio.CancelledError):
            await self._connection(reader, writer)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections.append(time.monotonic())
        if self.down:
            await self._refuse(reader, writer)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(
                self.upstream_host, self.upstream_port, ssl=self.tls
            )
        except OSError:
            _reset(writer)
            return
        self._open.update((writer, up_writer))
        try:
            await asyncio.gather(
                self._pump(reader, up_writer, sniff=True), self._pump(up_reader, writer, sniff=False)
            )
        finally:
            for w in (writer, up_writer):
                self._open.discard(w)
                with contextlib.suppress(Exception):
                    w.close()

    async def _refuse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5.0)
            self._record(head, refused=True)
        _reset(writer)

    def _record(self, head: bytes, *, refused: bool) -> None:
        line = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
        if len(line) >= 2:
            self.requests.append(Request(time.monotonic(), line[0], line[1], refused))

    async def _pump(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, *, sniff: bool) -> None:
        """Copy ``src`` to ``dst``; with ``sniff``, record each request head on the way."""
        parser = _Heads(self) if sniff else None
        try:
            while True:
                data = await src.read(256 * 1024)
                if not data:
                    break
                if parser is not None:
                    parser.feed(data)
                dst.write(data)
                await dst.drain()
        except (OSError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        finally:
            with contextlib.suppress(Exception):
                dst.close()


class _Heads:
    """Finds request heads in a client's byte stream (skipping ``Content-Length`` and chunked
    bodies); gives up quietly on anything it does not understand."""

    def __init__(self, proxy: Proxy) -> None:
        self.proxy = proxy
        self.buffer = b""
        self.skip = 0
        self.chunked = False
        self.lost = False

    def feed(self, data: bytes) -> None:
        if self.lost:
            return
        self.buffer += data
        while self.buffer and not self.lost:
            if self.skip:
                taken = min(self.skip, len(self.buffer))
                self.buffer, self.skip = self.buffer[taken:], self.skip - taken
                continue
            if self.chunked:
                if not self._chunk():
                    return
                continue
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                self.lost = len(self.buffer) > _HEAD_LIMIT
                return
            head, self.buffer = self.buffer[: end + 4], self.buffer[end + 4 :]
            self.proxy._record(head, refused=False)
            lower = head.lower()
            if b"transfer-encoding: chunked" in lower:
                self.chunked = True
            else:
                for line in lower.split(b"\r\n"):
                    if line.startswith(b"content-length:"):
                        self.skip = int(line.split(b":", 1)[1])

    def _chunk(self) -> bool:
        end = self.buffer.find(b"\r\n")
        if end < 0:
            return False
        try:
            size = int(self.buffer[:end].split(b";")[0], 16)
        except ValueError:
            self.lost = True
            return False
        self.buffer = self.buffer[end + 2 :]
        if size == 0:
            self.chunked = False
            self.skip = 2  # the empty trailer line
        else:
            self.skip = size + 2
        return True


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP reset (SO_LINGER 0), as a dead peer's host or a firewall answers."""
    sock = writer.get_extra_info("socket")
    with contextlib.suppress(Exception):
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()

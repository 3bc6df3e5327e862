"""A lean HTTP/1.1 upstream client: asyncio protocol + httptools' C parser, keep-alive pool.

Why not httpx here: measured in ``bench/gateway.py``, httpx/httpcore cost ~100 us of CPU per
streamed chunk (pool scans, h11 events, anyio layers) and forwarded every chunk as its own write,
which made the gateway add milliseconds per request. This client reads whatever the socket has,
hands the de-chunked bytes over in one piece (so several SSE events leave in one write), and
keeps idle connections per backend.

Contract:

- :meth:`UpstreamPool.request` sends one request and returns once the response head arrived.
  It raises :class:`ConnectFailed` when no connection could be made (safe to try another
  backend), :class:`UpstreamTimeout` when the head did not come within the read timeout, and
  :class:`UpstreamError` when the connection broke before the head, or the head is over
  ``MAX_HEAD_BYTES`` / ``MAX_HEADERS``. A pooled connection is checked before it is reused (one
  ``select``: an idle connection with anything to read was closed by the server) and a closed one
  is replaced by a fresh connection; once a byte of the request was written it is never retried,
  because the engine may have received it.
- A body without length (HTTP/1.0 style, delimited by the connection closing) completes on close.
- :meth:`UpstreamResponse.chunks` yields body bytes as they arrive (read timeout between bytes);
  :meth:`UpstreamResponse.read` reads a whole body up to a limit (:class:`UpstreamBodyTooLarge` beyond);
  :meth:`UpstreamResponse.close` returns a fully read connection to the pool and closes any other
  (which is how an abandoned request is aborted upstream).
"""

from __future__ import annotations

import asyncio
import select
import ssl
from collections.abc import AsyncIterator, Callable
from typing import cast
from urllib.parse import urlsplit

import httptools

from sparkrun_operator.errors import SparkrunError

_HIGH_WATER = 1 << 20
_MAX_IDLE_PER_BACKEND = 512
MAX_HEAD_BYTES = 64 * 1024
"""An upstream response head larger than this is a protocol error (502)."""
MAX_HEADERS = 128
"""An upstream response with more header lines than this is a protocol error (502)."""


class UpstreamError(SparkrunError):
    """The upstream broke the exchange; ``kind`` is ``connect``, ``timeout`` or ``read``."""

    kind = "read"


class ConnectFailed(UpstreamError):
    kind = "connect"


class UpstreamTimeout(UpstreamError):
    kind = "timeout"


class UpstreamBodyTooLarge(UpstreamError):
    """A body over the reader's limit (:meth:`UpstreamResponse.read`); the rest stays unread."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"Upstream sent an answer larger than {limit} bytes")
        self.limit = limit


class _Conn(asyncio.Protocol):
    """One connection; parses the response of the request in flight."""

    def __init__(self, key: tuple[str, int, bool]) -> None:
        self.key = key
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.error: BaseException | None = None
        self._parser: httptools.HttpResponseParser | None = None
        self._waiter: asyncio.Future[None] | None = None
        self.status = 0
        self.headers: dict[bytes, bytes] = {}
        self.buf = bytearray()
        self.got_bytes = False
        self.head_done = False
        self.complete = False
        self.keep_alive = True
        self.paused = False
        self.head_bytes = 0
        self.header_count = 0
        self.listener: Callable[[], None] | None = None
        """Called instead of waking a waiter (see :meth:`UpstreamResponse.listen`)."""

    # -- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # NB: uvloop's transports do not subclass asyncio.Transport; they implement it.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self._parser is None:  # bytes nobody asked for: the connection is unusable
            self.close()
            return
        self.got_bytes = True
        if not self.head_done:
            self.head_bytes += len(data)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.error = self.error or exc
            self.close()
        if not self.head_done and self.head_bytes > MAX_HEAD_BYTES:
            self.fail(f"response head exceeds {MAX_HEAD_BYTES} bytes")
        if len(self.buf) > _HIGH_WATER and not self.paused and self.transport is not None:
            self.transport.pause_reading()
            self.paused = True
        self._wake()

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.head_done and not self.complete and exc is None and self._close_delimited():
            self.complete = True  # HTTP/1.0 style: the body ends where the connection does
        if exc is not None and self.error is None:
            self.error = exc
        self._wake()

    # -- httptools callbacks ----------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self.header_count += 1
        if self.header_count > MAX_HEADERS:
            self.error = UpstreamError(f"response has more than {MAX_HEADERS} header lines")
            raise self.error
        self.headers[name.lower()] = value

    def _close_delimited(self) -> bool:
        if b"content-length" in self.headers or b"chunked" in self.headers.get(b"transfer-encoding", b""):
            return False
        return self.status >= 200 and self.status not in (204, 304)

    def fail(self, message: str) -> None:
        """Give up on the connection with an error (seen by whoever waits on it)."""
        self.error = self.error or UpstreamError(message)
        self.close()

    def on_headers_complete(self) -> None:
        assert self._parser is not None
        self.status = self._parser.get_status_code()
        self.keep_alive = self._parser.should_keep_alive()
        self.head_done = True

    def on_body(self, body: bytes) -> None:
        self.buf += body

    def on_message_complete(self) -> None:
        self.complete = True

    # -- use ---------------------------------------------------------------------------------

    def begin(self) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.headers = {}
        self.buf.clear()
        self.got_bytes = self.head_done = self.complete = False
        self.head_bytes = self.header_count = 0

    def take(self) -> bytes:
        data = bytes(self.buf)
        self.buf.clear()
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        return data

    def _wake(self) -> None:
        if self.listener is not None:
            self.listener()
            return
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self, limit: float) -> None:
        """Until something happens on the connection, at most ``limit`` seconds (TimeoutError)."""
        # NB: a bare timer instead of asyncio.timeout(): this runs once per upstream read.
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        timer = loop.call_later(limit, _expire, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None

    def close(self) -> None:
        self.closed = True
        self.listener = None
        if self.transport is not None:
            self.transport.close()


def _still_open(conn: _Conn) -> bool:
    """False when an idle connection has something to read: the server closed it (or misbehaves)."""
    transport = conn.transport
    if transport is None or transport.is_closing():
        return False
    sock = transport.get_extra_info("socket")
    if sock is None:
        return True
    try:
        readable, _, _ = select.select([sock.fileno()], [], [], 0)
    except (OSError, ValueError):
        return False
    return not readable


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


class UpstreamResponse:
    """The response of one upstream request; read it, then :meth:`close` it."""

    def __init__(self, pool: UpstreamPool, conn: _Conn, read_timeout: float) -> None:
        self._pool = pool
        self._conn = conn
        self._timeout = self.read_timeout = read_timeout
        self.status = conn.status
        self.headers = conn.headers
        self._closed = False

    async def chunks(self) -> AsyncIterator[bytes]:
        """Body bytes as they arrive (all that is buffered, in one piece)."""
        conn = self._conn
        while True:
            if conn.buf:
                yield conn.take()
                continue
            if conn.complete:
                return
            if conn.closed:
                raise UpstreamError(f"connection lost in the middle of the body ({conn.error or 'closed'})")
            try:
                await conn.wait(self._timeout)
            except TimeoutError:
                raise UpstreamTimeout(f"no data for {self._timeout}s") from None

    def listen(self, listener: Callable[[], None] | None) -> None:
        """Have ``listener`` called (synchronously, from the connection's callbacks) whenever body
        bytes arrive, the body completes or the connection breaks; ``None`` stops it. Meanwhile
        :meth:`chunks` must not be used: the listener reads with :meth:`take` and :meth:`state`."""
        self._conn.listener = listener

    def take(self) -> bytes:
        """The body bytes buffered so far (and no longer buffered)."""
        return self._conn.take() if self._conn.buf else b""

    def state(self) -> UpstreamError | bool | None:
        """``True`` once the body completed, an :class:`UpstreamError` once the connection broke,
        else ``None`` (more to come)."""
        conn = self._conn
        if conn.buf:
            return None
        if conn.complete:
            return True
        if conn.closed:
            return UpstreamError(f"connection lost in the middle of the body ({conn.error or 'closed'})")
        return None

    def pause(self, paused: bool) -> None:
        """Stop (or resume) reading from the upstream socket: TCP back-pressure to the engine."""
        transport = self._conn.transport
        if transport is not None and not self._conn.closed:
            if paused:
                transport.pause_reading()
            elif not self._conn.paused:
                transport.resume_reading()

    async def read(self, limit: int) -> bytes:
        """The whole body; :class:`UpstreamBodyTooLarge` as soon as it passes ``limit`` bytes (holding at
        most ``limit`` plus one read meanwhile)."""
        parts = []
        total = 0
        async for chunk in self.chunks():
            total += len(chunk)
            if total > limit:
                raise UpstreamBodyTooLarge(limit)
            parts.append(chunk)
        return b"".join(parts)

    def close(self) -> None:
        """Return the connection to the pool if the exchange completed cleanly; else close it."""
        if self._closed:
            return
        self._closed = True
        conn = self._conn
        if conn.complete and conn.keep_alive and not conn.closed and not conn.buf:
            self._pool.release(conn)
        else:
            conn.close()


class UpstreamPool:
    """Keep-alive connections per backend, and the requests over them."""

    def __init__(self) -> None:
        self._idle: dict[tuple[str, int, bool], list[_Conn]] = {}
        self._targets: dict[str, tuple[str, int, bool]] = {}
        self._ssl: ssl.SSLContext | None = None

    def _target(self, base_url: str) -> tuple[str, int, bool]:
        target = self._targets.get(base_url)
        if target is None:
            parts = urlsplit(base_url)
            tls = parts.scheme == "https"
            target = (parts.hostname or "127.0.0.1", parts.port or (443 if tls else 80), tls)
            self._targets[base_url] = target
        return target

    async def _connect(self, key: tuple[str, int, bool], limit: float) -> _Conn:
        host, port, tls = key
        loop = asyncio.get_running_loop()
        if tls and self._ssl is None:
            self._ssl = ssl.create_default_context()
        try:
            async with asyncio.timeout(limit):
                _, conn = await loop.create_connection(
                    lambda: _Conn(key), host, port, ssl=self._ssl if tls else None
                )
        except TimeoutError:
            raise ConnectFailed(f"connect to {host}:{port} timed out after {limit}s") from None
        except OSError as exc:
            raise ConnectFailed(f"cannot connect to {host}:{port}: {exc.strerror or exc}") from None
        return conn

    def release(self, conn: _Conn) -> None:
        conn._parser = None
        idle = self._idle.setdefault(conn.key, [])
        if len(idle) < _MAX_IDLE_PER_BACKEND:
            idle.append(conn)
        else:
            conn.close()

    def _reuse(self, key: tuple[str, int, bool]) -> _Conn | None:
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()
            if not conn.closed and _still_open(conn):
                return conn
            conn.close()
        return None

    async def request(
        self,
        base_url: str,
        path: str,
        body: bytes,
        headers: bytes,
        *,
        connect_timeout: float,
        read_timeout: float,
    ) -> UpstreamResponse:
        """POST ``body`` to ``base_url + path``; ``headers`` are extra raw header lines."""
        key = self._target(base_url)
        host, port, _ = key
        head = (
            b"POST %s HTTP/1.1\r\nhost: %s:%d\r\ncontent-type: application/json\r\naccept: */*\r\n"
            b"content-length: %d\r\n%s\r\n" % (path.encode(), host.encode(), port, len(body), headers)
        )
        conn = self._reuse(key)
        if conn is None:
            conn = await self._connect(key, connect_timeout)
        conn.begin()
        assert conn.transport is not None
        # NB: from here on the engine may see the request: whatever happens, it is not re-sent.
        conn.transport.writelines((head, body))
        try:
            while not conn.head_done and not conn.closed:
                await conn.wait(read_timeout)
        except TimeoutError:
            conn.close()
            raise UpstreamTimeout(f"no response head within {read_timeout}s") from None
        except BaseException:
            conn.close()  # cancelled while waiting: abort the request upstream
            raise
        if conn.head_done:
            return UpstreamResponse(self, conn, read_timeout)
        conn.close()
        raise UpstreamError(f"connection closed before the response ({conn.error or 'no data'})")

    async def aclose(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()

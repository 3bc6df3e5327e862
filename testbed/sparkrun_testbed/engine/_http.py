"""A minimal asyncio HTTP/1.1 server: keep-alive, sized and chunked bodies, chunked streams."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs

JSON_TYPE = b"application/json"
SSE_TYPE = b"text/event-stream; charset=utf-8"
_MAX_HEADER_BYTES = 64 * 1024
_MAX_BODY_BYTES = 64 * 1024 * 1024


class BadRequest(Exception):
    """A request the engine refuses with 400 (vLLM's ``BadRequestError``)."""

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


class HttpError(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


@dataclass
class Request:
    """One parsed HTTP request."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    keep_alive: bool


def dumps(obj: Any) -> bytes:
    # Compact and UTF-8, the way pydantic's model_dump_json writes vLLM's bodies.
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


class Conn:
    """The write side of one client connection, with disconnect detection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @property
    def gone(self) -> bool:
        """True once the client closed its side (HTTP/1.1 clients send nothing while waiting)."""
        return self.reader.at_eof() or self.writer.is_closing()

    def _head(self, status: int, ctype: bytes | None, extra: list[tuple[bytes, bytes]]) -> bytearray:
        head = bytearray(b"HTTP/1.1 %d %s\r\n" % (status, HTTPStatus(status).phrase.encode()))
        head += b"date: " + _http_date() + b"\r\nserver: uvicorn\r\n"
        if ctype is not None:
            head += b"content-type: " + ctype + b"\r\n"
        for k, v in extra:
            head += k + b": " + v + b"\r\n"
        return head

    async def send(
        self, status: int, body: bytes, ctype: bytes | None = JSON_TYPE, *, keep_alive: bool = True
    ) -> None:
        """Send a whole response."""
        extra = [(b"content-length", str(len(body)).encode())]
        if not keep_alive:
            extra.append((b"connection", b"close"))
        head = self._head(status, ctype, extra)
        head += b"\r\n"
        self.writer.write(bytes(head) + body)
        await self.writer.drain()

    async def start_stream(self, status: int, ctype: bytes) -> None:
        """Start a chunked response; follow with :meth:`chunk` calls and :meth:`end_stream`."""
        head = self._head(status, ctype, [(b"transfer-encoding", b"chunked")])
        head += b"\r\n"
        self.writer.write(bytes(head))
        await self.writer.drain()

    async def chunk(self, data: bytes) -> None:
        """Send one chunk; raises ``ConnectionError`` when the client went away."""
        if self.gone:
            raise ConnectionResetError("client went away")
        self.writer.write(b"%x\r\n%s\r\n" % (len(data), data))
        await self.writer.drain()

    async def end_stream(self) -> None:
        self.writer.write(b"0\r\n\r\n")
        await self.writer.drain()


_DATE_CACHE: tuple[int, bytes] = (0, b"")


def _http_date() -> bytes:
    global _DATE_CACHE
    now = int(time.time())
    if _DATE_CACHE[0] != now:
        _DATE_CACHE = (now, time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(now)).encode())
    return _DATE_CACHE[1]


async def read_request(reader: asyncio.StreamReader) -> Request | None:
    """Read one request; ``None`` at a clean end of the connection."""
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if exc.partial.strip():
            raise HttpError(400, "incomplete request head") from None
        return None
    except asyncio.LimitOverrunError:
        raise HttpError(431, "request head too large") from None
    lines = raw.decode("latin-1").split("\r\n")
    try:
        method, target, version = lines[0].split(" ", 2)
    except ValueError:
        raise HttpError(400, "malformed request line") from None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise HttpError(400, "malformed header")
        headers[name.strip().lower()] = value.strip()
    path, _, query = target.partition("?")
    conn_hdr = headers.get("connection", "").lower()
    keep_alive = "close" not in conn_hdr if version == "HTTP/1.1" else "keep-alive" in conn_hdr
    body = b""
    if headers.get("transfer-encoding", "").lower() == "chunked":
        parts = []
        total = 0
        while True:
            size_line = await reader.readuntil(b"\r\n")
            size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                break
            total += size
            if total > _MAX_BODY_BYTES:
                raise HttpError(413, "body too large")
            parts.append(await reader.readexactly(size))
            await reader.readexactly(2)
        body = b"".join(parts)
    elif "content-length" in headers:
        try:
            length = int(headers["content-length"])
        except ValueError:
            raise HttpError(400, "bad content-length") from None
        if length > _MAX_BODY_BYTES:
            raise HttpError(413, "body too large")
        body = await reader.readexactly(length) if length else b""
    return Request(method.upper(), path, parse_qs(query), headers, body, keep_alive)


Handler = Callable[[Request, Conn], Awaitable[None]]


async def serve_http(handler: Handler, host: str, port: int) -> asyncio.Server:
    """Serve ``handler`` on ``host:port``; returns the listening server (already serving).

    ``handler`` must write one complete response per request (or raise ``ConnectionError`` when
    the client went away mid-stream); connections are kept alive between requests.
    """

    async def on_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = Conn(reader, writer)
        try:
            while True:
                try:
                    req = await read_request(reader)
                except HttpError as exc:
                    body = dumps({"detail": str(exc)})
                    await conn.send(exc.status, body, keep_alive=False)
                    break
                if req is None:
                    break
                await handler(req, conn)
                if not req.keep_alive or writer.is_closing():
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    return await asyncio.start_server(on_conn, host, port, limit=_MAX_HEADER_BYTES, reuse_address=True)

"""The autoscaler's ``GET /metrics``: one bounded HTTP/1.1 exchange on a plain asyncio stream.

Scraping every Ready engine every interval is the operator's hottest outbound path (1,000
workloads at 15 s: 67 reads a second). Through httpx one read cost about 1.2 ms of the operator's
CPU, most of it in the client's layers (transport, pool, anyio), which pushed the readiness p99
of ``bench.scale`` at 1,000 workloads from 0.64 s to 1.41 s (ADR 0045). This reader does only what
a scrape needs, and costs a sixth of that: ``Connection: close`` (one request per connection, no
pool to bound), ``Accept-Encoding: identity``, and the three framings a server may answer with
(``Content-Length``, ``chunked``, or until the connection closes).

Every answer is a tenant's bytes (an engine's image is the workload author's), so each part is
bounded and read in linear time: the head at most :data:`HEAD_MAX_BYTES` (the stream's own
limit), the body at most ``limit`` bytes however it is framed, a chunk-size line at most
:data:`CHUNK_LINE_MAX_BYTES`, the whole exchange, connecting included, within ``deadline``
seconds. A compressed answer, a transfer coding other than ``chunked`` and a malformed head are
refused (:class:`ScrapeRefused`); a connection that fails raises ``OSError``.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Final

from sparkrun_operator.errors import SparkrunError

#: The status line and headers together.
HEAD_MAX_BYTES: Final = 16 * 1024
#: One chunk-size line (hex digits, extensions, CRLF).
CHUNK_LINE_MAX_BYTES: Final = 256
#: Trailer lines after the last chunk.
TRAILERS_MAX: Final = 32
#: What one read of a body without a declared length asks for.
_READ: Final = 64 * 1024


class ScrapeRefused(SparkrunError):
    """An answer the operator does not read (over a bound, malformed, compressed, too slow)."""


async def get(host: str, port: int, path: str, *, limit: int, deadline: float) -> tuple[int, bytes]:
    """``GET path`` from ``host:port``: the status and at most ``limit`` bytes of body, all within
    ``deadline`` seconds. Raises :class:`ScrapeRefused` past a bound, ``OSError`` when the
    connection fails."""
    try:
        async with asyncio.timeout(deadline):
            reader, writer = await asyncio.open_connection(host, port, limit=HEAD_MAX_BYTES)
            try:
                authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
                writer.write(
                    f"GET {path} HTTP/1.1\r\nHost: {authority}\r\nAccept-Encoding: identity\r\n"
                    "Connection: close\r\nUser-Agent: sparkrun-operator\r\n\r\n".encode("ascii")
                )
                status, headers = await _head(reader)
                return status, await _body(reader, headers, limit)
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
    except TimeoutError:
        raise ScrapeRefused(f"no complete answer within {deadline:g} s") from None


async def _head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    """The status code and the headers (names lower-cased; a repeated name keeps its last value)."""
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        raise ScrapeRefused(f"a head larger than {HEAD_MAX_BYTES} bytes") from None
    except asyncio.IncompleteReadError:
        raise ScrapeRefused("the connection closed before the head ended") from None
    lines = raw[:-4].split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or len(parts[1]) != 3 or not parts[1].isdigit():
        raise ScrapeRefused("not an HTTP/1.x status line")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon:
            raise ScrapeRefused("a header line without a colon")
        headers[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
    return int(parts[1]), headers


async def _body(reader: asyncio.StreamReader, headers: dict[str, str], limit: int) -> bytes:
    encoding = headers.get("content-encoding", "identity").lower()
    if encoding != "identity":
        raise ScrapeRefused(f"answered with content-encoding {encoding[:40]!r}")
    coding = headers.get("transfer-encoding", "").lower()
    if coding:
        if coding != "chunked":
            raise ScrapeRefused(f"answered with transfer-encoding {coding[:40]!r}")
        return await _chunked(reader, limit)
    declared = headers.get("content-length")
    if declared is not None:
        if not (declared.isascii() and declared.isdigit()) or len(declared) > 18:  # NB: "²" isdigit
            raise ScrapeRefused("a content-length that is not a number")
        size = int(declared)
        if size > limit:
            raise ScrapeRefused(f"answer of {size} bytes, over {limit}")
        try:
            return await reader.readexactly(size)
        except asyncio.IncompleteReadError:
            raise ScrapeRefused("the connection closed before the body ended") from None
    return await _until_closed(reader, limit)


async def _until_closed(reader: asyncio.StreamReader, limit: int) -> bytes:
    body = bytearray()
    while part := await reader.read(_READ):
        body += part
        if len(body) > limit:
            raise ScrapeRefused(f"answer larger than {limit} bytes")
    return bytes(body)


async def _chunked(reader: asyncio.StreamReader, limit: int) -> bytes:
    body = bytearray()
    while size := await _chunk_size(reader):
        if len(body) + size > limit:
            raise ScrapeRefused(f"answer larger than {limit} bytes")
        try:
            body += await reader.readexactly(size)
            crlf = await reader.readexactly(2)
        except asyncio.IncompleteReadError:
            raise ScrapeRefused("the connection closed inside a chunk") from None
        if crlf != b"\r\n":
            raise ScrapeRefused("a chunk not followed by CRLF")
    for _ in range(TRAILERS_MAX):
        if not await _line(reader):
            return bytes(body)
    raise ScrapeRefused(f"more than {TRAILERS_MAX} trailer lines")


async def _chunk_size(reader: asyncio.StreamReader) -> int:
    """A chunk-size line's size (hex digits; extensions dropped)."""
    digits = (await _line(reader)).partition(b";")[0].strip()
    if not digits or len(digits) > 8 or any(c not in b"0123456789abcdefABCDEF" for c in digits):
        raise ScrapeRefused("a malformed chunk size")
    return int(digits, 16)


async def _line(reader: asyncio.StreamReader) -> bytes:
    """One CRLF-terminated line, without it, at most :data:`CHUNK_LINE_MAX_BYTES`."""
    try:
        line = await reader.readuntil(b"\r\n")
    except asyncio.LimitOverrunError:
        raise ScrapeRefused("a chunk line too long") from None
    except asyncio.IncompleteReadError:
        raise ScrapeRefused("the connection closed inside a chunk line") from None
    if len(line) > CHUNK_LINE_MAX_BYTES:
        raise ScrapeRefused("a chunk line too long")
    return line[:-2]

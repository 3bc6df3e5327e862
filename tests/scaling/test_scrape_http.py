"""The autoscaler's lean ``GET /metrics`` (``controllers/scrapehttp.py``): every framing a server
may answer with is read, and every malformed or oversized one is refused within its bounds.

A raw server on loopback (``tests/gateway/rawserver.py``) plays the engine, writing bytes no
HTTP library would; ``Engine.load``'s own bounds (a 64 MiB body, a drip, gzip, one byte over the
cap) are in ``test_engine_load.py``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sparkrun_operator.controllers import scrapehttp
from tests.operator.test_engine_reads import Writer, serve, timed

LIMIT = 64 * 1024
DEADLINE = 2.0


def _get(url: str) -> tuple[Any, float, int]:
    host, port = url.removeprefix("http://").rsplit(":", 1)

    async def call() -> Any:
        try:
            return await scrapehttp.get(host, int(port), "/metrics", limit=LIMIT, deadline=DEADLINE)
        except scrapehttp.ScrapeRefused as refused:
            return refused

    return asyncio.run(timed(call()))


def _raw(data: bytes) -> Writer:
    async def answer(writer: asyncio.StreamWriter, sent: dict[str, Any]) -> None:
        writer.write(data)
        await writer.drain()
        writer.close()

    return answer


def _run(data: bytes) -> Any:
    server, sent = serve(_raw(data))
    try:
        result, took, _ = _get(server.url)
    finally:
        server.close()
    assert took < DEADLINE + 1.5
    assert sent["requests"] == [b"GET /metrics HTTP/1.1"]
    return result


@pytest.mark.parametrize(
    ("data", "body"),
    [
        (b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello", b"hello"),
        (b"HTTP/1.0 200 OK\r\n\r\nuntil the end", b"until the end"),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n"
            b"3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nx-t: 1\r\n\r\n",
            b"abcde",
        ),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n", b""),
    ],
    ids=["length", "until-closed", "chunked-with-extension-and-trailer", "empty"],
)
def test_every_framing_is_read(data: bytes, body: bytes) -> None:
    assert _run(data) == (200, body)


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (
            b"HTTP/1.1 200 OK\r\nx-pad: " + b"a" * (scrapehttp.HEAD_MAX_BYTES + 10) + b"\r\n\r\n",
            "head larger",
        ),
        (b"SSH-2.0-OpenSSH\r\n\r\n", "status line"),
        (b"HTTP/1.1 2000 OK\r\n\r\n", "status line"),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "colon"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 12x\r\n\r\n", "not a number"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: \xb2\r\n\r\n", "not a number"),  # "²".isdigit()
        (b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % (LIMIT + 1), "over"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort", "before the body ended"),
        (b"HTTP/1.1 200 OK\r\ncontent-encoding: br\r\ncontent-length: 1\r\n\r\nx", "content-encoding"),
        (b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n", "transfer-encoding"),
        (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nfffffffff\r\n", "chunk size"),
        (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n-1\r\n", "chunk size"),
        (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n%x\r\n" % (LIMIT + 1), "larger than"),
        (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabcXY", "CRLF"),
        (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1;" + b"e" * 300 + b"\r\n", "too long"),
        (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n0\r\n" + b"t: 1\r\n" * 40 + b"\r\n",
            "trailer",
        ),
        (b"HTTP/1.1 200 OK\r\n\r\n" + b"x" * (LIMIT + 1), "larger than"),
        (b"HTTP/1.1 200 OK\r\n", "closed before the head ended"),
    ],
)
def test_a_malformed_or_oversized_answer_is_refused(data: bytes, why: str) -> None:
    refused = _run(data)
    assert isinstance(refused, scrapehttp.ScrapeRefused), refused
    assert why in str(refused)


def test_a_chunked_answer_is_counted_against_the_limit_as_it_arrives() -> None:
    """Many small chunks add up: refused at the first byte over the limit, never buffered past it."""
    chunks = b"400\r\n" + b"x" * 1024 + b"\r\n"
    refused = _run(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + chunks * (LIMIT // 1024 + 8))
    assert isinstance(refused, scrapehttp.ScrapeRefused)
    assert "larger than" in str(refused)

"""The operator's reads from a tenant's engine are bounded (``controllers/engine.py`` ``Engine``).

A raw HTTP server on loopback (``tests/gateway/rawserver.py``) plays a hostile engine: a 64 MiB
``/is_sleeping`` answer, a body that never ends, one that drips a byte at a time, a gzip bomb.
The operator reads at most the cap, gives up within the deadline, and reports "unknown" (or an
error message for ``/sleep`` and ``/wake_up``); a well-behaved engine is still understood.
"""

from __future__ import annotations

import asyncio
import tracemalloc
import zlib
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from sparkrun_operator.controllers.engine import Engine
from tests.gateway.rawserver import RawUpstream, read_request

KB = 1024
MB = 1024 * KB
ENGINE_TIMEOUT = 10.0  # the operator's default engine_timeout
DEADLINE = 2.0 + 1.5  # the /is_sleeping deadline, and slack for a loaded machine
CALL_TIMEOUT = 3.0

Writer = Callable[[asyncio.StreamWriter, dict[str, Any]], Awaitable[None]]


def head(sent: dict[str, Any], extra: bytes = b"") -> bytes:
    status: bytes = sent.get("status", b"200 OK")
    return b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\n" + extra + b"\r\n"


async def huge(writer: asyncio.StreamWriter, sent: dict[str, Any]) -> None:
    """64 MiB announced and sent (a JSON object padded with spaces)."""
    writer.write(
        head(sent, b"content-length: %d\r\n" % (64 * MB)) + b'{"is_sleeping": true' + b" " * (64 * KB - 20)
    )
    sent["bytes"] += 64 * KB
    while sent["bytes"] < 64 * MB - 64 * KB:
        writer.write(b" " * 64 * KB)
        await writer.drain()
        sent["bytes"] += 64 * KB
    writer.write(b" " * (64 * KB - 1) + b"}")
    await writer.drain()


async def endless(writer: asyncio.StreamWriter, sent: dict[str, Any]) -> None:
    """Chunks as fast as the reader takes them (256 MiB at most, then silence: a test bound)."""
    writer.write(head(sent, b"transfer-encoding: chunked\r\n") + b'10\r\n{"is_sleeping": \r\n')
    chunk = b"%x\r\n%s\r\n" % (64 * KB, b" " * 64 * KB)
    while sent["bytes"] < 256 * MB:
        writer.write(chunk)
        await writer.drain()
        sent["bytes"] += 64 * KB
    await asyncio.sleep(60)


async def dripping(writer: asyncio.StreamWriter, sent: dict[str, Any]) -> None:
    """A byte every 0.2 s, a chunk each: every read is well within any per-read timeout."""
    writer.write(head(sent, b"transfer-encoding: chunked\r\n") + b'14\r\n{"is_sleeping": true\r\n')
    for _ in range(100000):
        await asyncio.sleep(0.2)
        writer.write(b"1\r\n \r\n")
        await writer.drain()
        sent["bytes"] += 1


async def gzip_bomb(writer: asyncio.StreamWriter, sent: dict[str, Any]) -> None:
    """64 KiB on the wire, 64 MiB once decompressed."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # the gzip format, packed a block at a time
    blocks = [packer.compress(b'{"is_sleeping": true')]
    blocks += [packer.compress(b" " * 64 * KB) for _ in range(MB // KB)]
    body = b"".join([*blocks, packer.compress(b"}"), packer.flush()])
    writer.write(head(sent, b"content-encoding: gzip\r\ncontent-length: %d\r\n" % len(body)) + body)
    await writer.drain()
    sent["bytes"] += len(body)


def serve(answer: Writer, status: bytes = b"200 OK") -> tuple[RawUpstream, dict[str, Any]]:
    """A raw engine answering every request with ``answer``; what it sent, and the requests."""
    sent: dict[str, Any] = {"bytes": 0, "status": status, "requests": []}

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        sent["requests"].append((await read_request(reader)).split(b"\r\n", 1)[0])
        await answer(writer, sent)

    return RawUpstream(handler), sent


async def timed(call: Awaitable[Any]) -> tuple[Any, float, int]:
    """``call``'s result, the seconds it took and the peak of Python allocations meanwhile."""
    loop = asyncio.get_running_loop()
    tracemalloc.start()
    started = loop.time()
    try:
        # NB: an outer bound, so that the unbounded code fails instead of hanging
        result = await asyncio.wait_for(call, 15)
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return result, loop.time() - started, peak


@pytest.mark.parametrize("answer", [huge, endless, dripping, gzip_bomb], ids=lambda f: f.__name__)
def test_is_sleeping_reads_at_most_the_cap_within_the_deadline(answer: Writer) -> None:
    server, sent = serve(answer)
    try:

        async def probe() -> tuple[Any, float, int]:
            async with httpx.AsyncClient(timeout=ENGINE_TIMEOUT) as client:
                return await timed(Engine(client, timeout=ENGINE_TIMEOUT).is_sleeping(server.url))

        value, took, peak = asyncio.run(probe())
    finally:
        server.close()
    assert took < DEADLINE, f"the probe took {took:.1f} s"
    assert peak < 4 * MB, f"the probe allocated {peak / MB:.1f} MiB"
    assert sent["bytes"] < 16 * MB, f"the engine got {sent['bytes'] / MB:.1f} MiB out"
    assert value is None  # unknown: the probe failed


@pytest.mark.parametrize("answer", [huge, endless, dripping], ids=lambda f: f.__name__)
def test_sleep_and_wake_answers_are_bounded(answer: Writer) -> None:
    # NB: a failing status, so that the operator reads the body for its message
    server, sent = serve(answer, b"500 Internal Server Error")
    url = server.url
    try:

        async def call() -> tuple[Any, float, int]:
            async with httpx.AsyncClient(timeout=ENGINE_TIMEOUT) as client:
                # NB: a shorter engine timeout than the operator's 10 s, to keep the test short
                return await timed(Engine(client, timeout=CALL_TIMEOUT).call(server.url, "sleep"))

        message, took, peak = asyncio.run(call())
    finally:
        server.close()
    assert took < CALL_TIMEOUT + 1.5, f"the call took {took:.1f} s"
    assert peak < 4 * MB, f"the call allocated {peak / MB:.1f} MiB"
    assert sent["bytes"] < 16 * MB, f"the engine got {sent['bytes'] / MB:.1f} MiB out"
    assert isinstance(message, str)
    assert message.startswith(f"sleep on {url}")
    assert len(message) < 400


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b'{"is_sleeping": true}', True),
        (b'{"is_sleeping": false}', False),
        (b'{"is_sleeping": "yes"}', None),
        (b"[" * 3000 + b"]" * 3000, None),
        (b"not json", None),
    ],
)
@pytest.mark.parametrize("framing", ["length", "chunked"])
def test_is_sleeping_understands_a_well_behaved_engine(
    body: bytes, expected: bool | None, framing: str
) -> None:
    async def answer(writer: asyncio.StreamWriter, sent: dict[str, Any]) -> None:
        if framing == "length":
            writer.write(head(sent, b"content-length: %d\r\n" % len(body)) + body)
        else:  # a byte per chunk
            writer.write(head(sent, b"transfer-encoding: chunked\r\n"))
            writer.write(b"".join(b"1\r\n%c\r\n" % byte for byte in body) + b"0\r\n\r\n")
        await writer.drain()

    server, sent = serve(answer)
    try:

        async def probe() -> bool | None:
            async with httpx.AsyncClient(timeout=ENGINE_TIMEOUT) as client:
                return await Engine(client, timeout=ENGINE_TIMEOUT).is_sleeping(server.url)

        assert asyncio.run(probe()) is expected
    finally:
        server.close()
    assert sent["requests"] == [b"GET /is_sleeping HTTP/1.1"]


def test_sleep_and_wake_succeed_on_2xx() -> None:
    async def ok(writer: asyncio.StreamWriter, sent: dict[str, Any]) -> None:
        writer.write(head(sent, b"content-length: 0\r\nconnection: close\r\n"))
        await writer.drain()

    server, sent = serve(ok)
    try:

        async def calls() -> list[str | None]:
            async with httpx.AsyncClient(timeout=ENGINE_TIMEOUT) as client:
                engine = Engine(client, timeout=ENGINE_TIMEOUT)
                return [await engine.call(server.url, "sleep"), await engine.call(server.url, "wake_up")]

        assert asyncio.run(calls()) == [None, None]
    finally:
        server.close()
    assert sent["requests"] == [b"POST /sleep?level=1 HTTP/1.1", b"POST /wake_up HTTP/1.1"]

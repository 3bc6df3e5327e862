"""The operator's scrape of an engine's ``/metrics`` is bounded (``controllers/engine.py`` ``Engine.load``).

A raw HTTP server on loopback (``tests/gateway/rawserver.py``) plays the engine. A hostile one
(64 MiB announced, a body that never ends, one that drips a byte at a time, a gzip answer) gets
``None`` ("load unknown") within the 2 s deadline, with at most the 2 MiB cap read; an honest
one, in vLLM's layout, framed by length or chunked a byte at a time, is understood.
"""

from __future__ import annotations

import asyncio
import gzip
from typing import Any

import httpx
import pytest

from sparkrun_operator.controllers.engine import METRICS_MAX_BYTES, Engine
from sparkrun_operator.plan.enginemetrics import EngineLoad
from tests.operator.test_engine_reads import Writer, dripping, endless, head, huge, serve, timed
from tests.scaling.test_enginemetrics import vllm_sample

MB = 1024 * 1024
ENGINE_TIMEOUT = 10.0  # the operator's default engine_timeout
DEADLINE = 2.0 + 1.5  # the /metrics deadline, and slack for a loaded machine
SAMPLE = vllm_sample()
LOAD = EngineLoad(waiting=7.0, running=3.0, kv_cache_usage=0.42, requests_total=126.0)


async def gzipped(writer: asyncio.StreamWriter, sent: dict[str, Any]) -> None:
    """An honest answer, but compressed although ``accept-encoding: identity`` was asked for."""
    body = gzip.compress(SAMPLE)
    writer.write(head(sent, b"content-encoding: gzip\r\ncontent-length: %d\r\n" % len(body)) + body)
    await writer.drain()
    sent["bytes"] += len(body)


def padded(size: int) -> bytes:
    """The honest answer padded with a comment line to ``size`` bytes."""
    body = SAMPLE + b"# " + b"x" * (size - len(SAMPLE) - 3) + b"\n"
    assert len(body) == size
    return body


# NB: made once, before any allocation is measured (the server runs in the test's process)
OVER_CAP = padded(METRICS_MAX_BYTES + 1)
AT_CAP = padded(METRICS_MAX_BYTES)


async def over_cap(writer: asyncio.StreamWriter, sent: dict[str, Any]) -> None:
    """The honest answer padded to one byte over the cap, its length not announced."""
    writer.write(head(sent, b"connection: close\r\n"))
    writer.write(OVER_CAP)
    await writer.drain()
    sent["bytes"] += len(OVER_CAP)


def scrape(server_url: str) -> tuple[Any, float, int]:
    async def probe() -> tuple[Any, float, int]:
        async with httpx.AsyncClient(timeout=ENGINE_TIMEOUT) as client:
            return await timed(Engine(client, timeout=ENGINE_TIMEOUT).load(server_url))

    return asyncio.run(probe())


@pytest.mark.parametrize(
    "answer", [huge, endless, dripping, gzipped, over_cap], ids=lambda f: str(f.__name__)
)
def test_a_hostile_metrics_answer_reads_as_unknown_within_its_bounds(answer: Writer) -> None:
    server, sent = serve(answer)
    try:
        load, took, peak = scrape(server.url)
    finally:
        server.close()
    assert took < DEADLINE, f"the scrape took {took:.1f} s"
    assert peak < 3 * METRICS_MAX_BYTES, f"the scrape allocated {peak / MB:.1f} MiB"
    assert sent["bytes"] < 16 * MB, f"the engine got {sent['bytes'] / MB:.1f} MiB out"
    assert load is None
    assert sent["requests"] == [b"GET /metrics HTTP/1.1"]


@pytest.mark.parametrize("framing", ["length", "chunked", "at-the-cap"])
def test_an_honest_engines_load_is_read(framing: str) -> None:
    body = AT_CAP if framing == "at-the-cap" else SAMPLE  # exactly the cap: still read

    async def answer(writer: asyncio.StreamWriter, sent: dict[str, Any]) -> None:
        if framing == "chunked":  # a byte per chunk
            writer.write(head(sent, b"transfer-encoding: chunked\r\n"))
            writer.write(b"".join(b"1\r\n%c\r\n" % byte for byte in body) + b"0\r\n\r\n")
        else:
            writer.write(head(sent, b"content-length: %d\r\n" % len(body)) + body)
        await writer.drain()

    server, sent = serve(answer)
    try:
        load, _, _ = scrape(server.url)
    finally:
        server.close()
    assert load == LOAD
    assert sent["requests"] == [b"GET /metrics HTTP/1.1"]


@pytest.mark.parametrize(
    ("status", "body"),
    [(b"404 Not Found", SAMPLE), (b"200 OK", b"# no vLLM here\nup 1\n")],
    ids=["not-200", "not-vllm"],
)
def test_an_answer_without_the_queue_gauges_is_unknown(status: bytes, body: bytes) -> None:
    async def answer(writer: asyncio.StreamWriter, sent: dict[str, Any]) -> None:
        writer.write(head(sent, b"content-length: %d\r\n" % len(body)) + body)
        await writer.drain()

    server, sent = serve(answer, status)
    try:
        load, _, _ = scrape(server.url)
    finally:
        server.close()
    assert load is None
    assert sent["requests"] == [b"GET /metrics HTTP/1.1"]


def test_a_closed_port_is_unknown() -> None:
    server, _ = serve(huge)
    url = server.url
    server.close()
    load, took, _ = scrape(url)
    assert load is None
    assert took < DEADLINE

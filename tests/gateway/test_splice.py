"""The OpenAI stream fast path (``gateway/splice.py``): relayed from the upstream connection's
callbacks, it keeps the read timeout between bytes, stops reading the upstream while the client
does not read (TCP back-pressure, nothing piles up in the gateway), and ends a stream the
upstream broke off with an in-band error."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import httpx
import pytest

from sparkrun_operator.gateway import GatewaySettings
from sparkrun_operator.gateway.accounting import USAGE_WINDOW, stream_tail
from sparkrun_operator.gateway.splice import Splice

from .conftest import StartGateway, workload
from .rawserver import chunk_event, ok_head, raw_upstream, read_request

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
MB = 1024 * 1024


def test_a_stream_that_goes_silent_ends_after_the_read_timeout(start_gateway: StartGateway) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        writer.write(ok_head(b"text/event-stream") + chunk_event("one"))
        await writer.drain()
        await asyncio.sleep(1.0)
        writer.write(chunk_event("two"))  # data keeps the stream alive: the timeout is per silence
        await writer.drain()
        await asyncio.sleep(30)

    with raw_upstream(handler) as up:
        gw = start_gateway([workload("m", "m", [up.url])], settings=GatewaySettings(read_timeout=1.5))
        started = time.monotonic()
        resp = httpx.post(f"{gw.url}/v1/chat/completions", json=CHAT, timeout=20)
        took = time.monotonic() - started
    assert resp.status_code == 200
    body = resp.content
    assert b'"one"' in body
    assert b'"two"' in body
    assert b"timed out in the middle of the response" in body
    assert body.endswith(b"data: [DONE]\n\n")
    assert 2.4 < took < 8, took  # 1 s to the second event, then 1.5 s of silence


def test_a_client_that_does_not_read_stops_the_upstream(start_gateway: StartGateway) -> None:
    total = 64 * MB
    event = b"data: " + b"z" * (64 * 1024 - 8) + b"\n\n"  # 64 KiB events, complete ones
    written = [0]
    done = threading.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        writer.write(ok_head(b"text/event-stream"))
        while written[0] < total:
            writer.write(event)
            await writer.drain()  # blocks while the gateway does not read
            written[0] += len(event)
        writer.write(b"data: [DONE]\n\n")
        await writer.drain()
        done.set()

    with raw_upstream(handler) as up:
        gw = start_gateway([workload("m", "m", [up.url])])
        with socket.create_connection(("127.0.0.1", gw.port)) as client:
            client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
            body = b'{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}'
            client.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\n\r\n%s" % (len(body), body)
            )
            time.sleep(2)  # the client reads nothing
            stalled_at = written[0]
            assert stalled_at < 24 * MB, f"the upstream wrote {stalled_at} bytes; the client read none"
            got = 0
            tail = b""
            client.settimeout(30)
            while not tail.endswith(b"0\r\n\r\n"):
                part = client.recv(1 << 20)
                assert part, "the gateway closed the stream"
                got += len(part)
                tail = (tail + part)[-64:]
    assert done.is_set()
    assert got > total  # every byte arrived once the client read
    assert b"data: [DONE]" in tail


def test_streams_served_by_the_gateways_server_take_the_fast_path(
    start_gateway: StartGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs: list[Splice] = []
    original = Splice.run

    async def counted(self: Splice) -> None:
        runs.append(self)
        await original(self)

    monkeypatch.setattr(Splice, "run", counted)

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        events = chunk_event("a") + chunk_event("b") + b"data: [DONE]\n\n"
        writer.write(ok_head(b"text/event-stream") + events)
        await writer.drain()

    with raw_upstream(handler) as up:
        gw = start_gateway([workload("m", "m", [up.url])])
        resp = httpx.post(f"{gw.url}/v1/chat/completions", json=CHAT, timeout=10)
    assert resp.status_code == 200
    assert resp.content.startswith(b": command_id ")
    assert resp.content.endswith(b"data: [DONE]\n\n")
    assert len(runs) == 1  # relayed by the upstream's callbacks, not by the general relay


def test_usage_is_counted_when_the_done_line_comes_in_a_read_of_its_own(
    start_gateway: StartGateway,
) -> None:
    """The tokens are read from the end of the answer: the usage event and ``[DONE]`` may reach
    the gateway in separate reads (each written and flushed apart here), and the usage still counts."""
    usage = {"prompt_tokens": 15, "completion_tokens": 10, "total_tokens": 25}
    doc = {"id": "c1", "object": "chat.completion.chunk", "model": "m", "choices": [], "usage": usage}

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        writer.write(ok_head(b"text/event-stream") + chunk_event("hi", finish="stop"))
        await writer.drain()
        await asyncio.sleep(0.2)
        writer.write(b"data: " + json.dumps(doc).encode() + b"\n\n")
        await writer.drain()
        await asyncio.sleep(0.2)
        writer.write(b"data: [DONE]\n\n")
        await writer.drain()

    with raw_upstream(handler) as up:
        gw = start_gateway([workload("m", "m", [up.url])])
        resp = httpx.post(f"{gw.url}/v1/chat/completions", json=CHAT, timeout=20)
        assert resp.status_code == 200
        assert resp.content.endswith(b"data: [DONE]\n\n")
        registry = gw.gateway.metrics.registry
        counted = {
            d: registry.get_sample_value("sparkrun_gateway_tokens_total", {"model": "m", "direction": d})
            for d in ("in", "out")
        }
    assert counted == {"in": 15.0, "out": 10.0}


def test_the_stream_tail_keeps_the_last_bytes_across_reads() -> None:
    done, usage = b"data: [DONE]\n\n", b'data: {"usage": {"completion_tokens": 10}}\n\n'
    assert stream_tail(stream_tail(b"", usage), done) == usage + done
    assert stream_tail(usage, b"x" * 5000) == b"x" * USAGE_WINDOW
    assert len(stream_tail(b"y" * USAGE_WINDOW, done)) == USAGE_WINDOW
    assert stream_tail(b"y" * USAGE_WINDOW, done).endswith(done)

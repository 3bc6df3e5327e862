"""Bounded under any upstream: misbehaving upstreams (raw asyncio servers) against the gateway.

- an event that never ends and a 100 MB single event pass through an OpenAI stream as they come;
  a translated stream caps the event size and ends with an error in its protocol;
- CRLF-framed SSE passes through unchanged and is parsed by the translated protocols;
- an upstream header flood is a prompt 502;
- an HTTP/1.0 body delimited by closing the connection completes and does not eject the backend.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

import anthropic
import httpx
import openai
import pytest

from .conftest import StartGateway, workload
from .rawserver import chat_completion, chunk_event, ok_head, raw_upstream, read_request

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
MB = 1024 * 1024


def test_huge_event_passes_through_an_openai_stream(start_gateway: StartGateway) -> None:
    received = threading.Event()
    size = 100 * MB

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        writer.write(ok_head(b"text/event-stream") + b'data: {"x": "')
        piece = b"x" * MB
        for _ in range(size // MB):
            writer.write(piece)
            await writer.drain()
        # NB: no separator until the client has every byte: a gateway holding whole events hangs.
        await asyncio.get_running_loop().run_in_executor(None, received.wait, 30)
        writer.write(b'"}\n\ndata: [DONE]\n\n')
        await writer.drain()

    with raw_upstream(handler) as up:
        gw = start_gateway([workload("m", "m", [up.url])])
        got = 0
        started = time.monotonic()
        with httpx.stream(
            "POST", f"{gw.url}/v1/chat/completions", json={**CHAT, "stream": True}, timeout=30
        ) as r:
            tail = b""
            for part in r.iter_raw():
                got += len(part)
                tail = (tail + part)[-64:]
                if got >= size:
                    received.set()
        assert received.is_set(), f"only {got} bytes passed through"
        assert time.monotonic() - started < 30
        assert tail.endswith(b'"}\n\ndata: [DONE]\n\n')


def test_event_that_never_ends_is_passed_on_and_closed_with_an_error(start_gateway: StartGateway) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        writer.write(ok_head(b"text/event-stream"))
        for _ in range(8):  # 8 x 32 KiB of one event, then the upstream goes away
            writer.write(b"data: " + b"y" * 32 * 1024 + b"\n")
            await writer.drain()

    with raw_upstream(handler) as up:
        gw = start_gateway([workload("m", "m", [up.url])])
        resp = httpx.post(f"{gw.url}/v1/chat/completions", json={**CHAT, "stream": True}, timeout=10)
        assert resp.status_code == 200
        assert len(resp.content) > 8 * 32 * 1024
        events = [e.strip() for e in resp.content.split(b"\n\n") if e.strip().startswith(b"data: {")]
        assert b"middle of an event" in events[-1]
        assert resp.content.endswith(b"data: [DONE]\n\n")


def test_huge_event_ends_a_translated_stream_with_an_error(start_gateway: StartGateway) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        writer.write(ok_head(b"text/event-stream") + b'data: {"x": "')
        for _ in range(100):
            writer.write(b"x" * MB)
            await writer.drain()
        await asyncio.sleep(30)

    with raw_upstream(handler) as up:
        gw = start_gateway([workload("m", "m", [up.url])])
        started = time.monotonic()
        with (
            anthropic.Anthropic(base_url=gw.url, api_key="x", max_retries=0, timeout=20) as claude,
            pytest.raises(anthropic.APIError) as err,
            claude.messages.stream(model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}]) as s,
        ):
            for _ in s:
                pass
        assert "larger than" in str(err.value)
        assert time.monotonic() - started < 15


def _crlf_stream() -> bytes:
    return (
        chunk_event("Hello", newline=b"\r\n")
        + chunk_event(" world", newline=b"\r\n")
        + chunk_event(finish="stop", newline=b"\r\n")
        + b"data: [DONE]\r\n\r\n"
    )


def test_crlf_framed_sse(start_gateway: StartGateway) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        writer.write(ok_head(b"text/event-stream"))
        for i, byte in enumerate(_crlf_stream()):  # a byte at a time: CR and LF arrive apart
            writer.write(bytes([byte]))
            if i % 7 == 0:
                await writer.drain()
                await asyncio.sleep(0)

    with raw_upstream(handler) as up:
        gw = start_gateway([workload("m", "m", [up.url])])
        resp = httpx.post(f"{gw.url}/v1/chat/completions", json={**CHAT, "stream": True}, timeout=10)
        assert resp.content.endswith(_crlf_stream())  # byte for byte, after ": command_id"
        with openai.OpenAI(base_url=f"{gw.url}/v1", api_key="x", max_retries=0, timeout=10) as c:
            text = "".join(
                ch.choices[0].delta.content or "" for ch in c.chat.completions.create(**CHAT, stream=True)
            )
        assert text == "Hello world"
        with (
            anthropic.Anthropic(base_url=gw.url, api_key="x", max_retries=0, timeout=10) as claude,
            claude.messages.stream(model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}]) as s,
        ):
            assert s.get_final_text() == "Hello world"
        lines = httpx.post(
            f"{gw.url}/api/chat",
            json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
            timeout=10,
        ).text.splitlines()
        assert "".join(json.loads(x)["message"]["content"] for x in lines) == "Hello world"
        assert json.loads(lines[-1])["done"] is True


def test_upstream_header_flood_is_502(start_gateway: StartGateway) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\n")
        for i in range(200_000):  # ~4 MB of headers, never ending the head
            writer.write(b"x-flood-%d: v\r\n" % i)
            if i % 1000 == 0:
                await writer.drain()
        await asyncio.sleep(30)

    with raw_upstream(handler) as up:
        gw = start_gateway([workload("m", "m", [up.url])])
        started = time.monotonic()
        resp = httpx.post(f"{gw.url}/v1/chat/completions", json=CHAT, timeout=20)
        assert resp.status_code == 502
        assert "header" in resp.json()["error"]["message"]
        assert time.monotonic() - started < 5


def test_http10_close_delimited_body_completes(start_gateway: StartGateway) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        request = await read_request(reader)
        if b'"stream":true' in request.replace(b" ", b""):
            body = chunk_event("Hi") + chunk_event(finish="stop") + b"data: [DONE]\n\n"
            writer.write(ok_head(b"text/event-stream", version=b"1.0") + body)
        else:
            writer.write(ok_head(version=b"1.0") + chat_completion())
        await writer.drain()
        writer.close()  # the end of the body

    with raw_upstream(handler) as up:
        gw = start_gateway([workload("m", "m", [up.url])])
        for _ in range(3):
            resp = httpx.post(f"{gw.url}/v1/chat/completions", json=CHAT, timeout=10)
            assert resp.status_code == 200
            assert resp.json()["choices"][0]["message"]["content"] == "Hello world"
            streamed = httpx.post(f"{gw.url}/v1/chat/completions", json={**CHAT, "stream": True}, timeout=10)
            assert streamed.content.endswith(b"data: [DONE]\n\n")
            assert b"error" not in streamed.content
        backend = gw.gateway.services.connector.balancer.backend(up.url)
        assert backend.failures == 0
        assert "sparkrun_gateway_backend_ejections_total{" not in httpx.get(f"{gw.url}/metrics").text

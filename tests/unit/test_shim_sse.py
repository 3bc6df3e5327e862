"""Server-sent events of the shim (``shim/sse.py``), served by uvicorn on loopback.

Tested: the frame format (``id:`` only for durable events); a client disconnect cancels the
producer at once and releases the subscription slot; a failing producer ends its stream with an
in-band ``error`` event; the subscription limit answers 409.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import uvicorn

from sparkrun_operator.ops.errors import Conflict, NotFound, TooManyRequests
from sparkrun_operator.shim.sse import EventStream, Subscriptions, frame


def test_frames() -> None:
    assert frame({"id": 3, "type": "state", "state": "queued"}) == (
        b'id: 3\ndata: {"id": 3, "type": "state", "state": "queued"}\n\n'
    )
    assert frame({"type": "gap"}) == b'data: {"type": "gap"}\n\n'


def test_subscription_limit() -> None:
    subscriptions = Subscriptions(1)
    release = subscriptions.acquire()
    with pytest.raises(Conflict):
        subscriptions.acquire()
    release()
    release()  # idempotent
    assert subscriptions.active == 0


def test_per_principal_stream_quota() -> None:
    subscriptions = Subscriptions(10, per_principal=2)
    alice = [subscriptions.acquire("alice"), subscriptions.acquire("alice")]
    with pytest.raises(TooManyRequests) as refused:
        subscriptions.acquire("alice")
    assert refused.value.status == 429
    assert refused.value.body()["error"] == {
        "type": "RateLimited",
        "retryable": True,
        "attrs": {"quota": "streams", "limit": 2},
    }
    assert refused.value.headers() == {"Retry-After": "5"}
    bob = subscriptions.acquire("bob")  # another principal is unaffected
    alice.pop()()
    alice.append(subscriptions.acquire("alice"))  # a released slot is free again
    for release in (*alice, bob):
        release()
    assert subscriptions.active == 0
    assert subscriptions.by_principal == {}


class _App:
    def __init__(self) -> None:
        self.subscriptions = Subscriptions(4)
        self.closed = asyncio.Event()
        self.started = asyncio.Event()

    async def forever(self) -> AsyncIterator[bytes]:
        try:
            yield frame({"id": 1, "type": "state", "state": "running"})
            self.started.set()
            await asyncio.sleep(3600)
            yield b"never"
        finally:
            self.closed.set()

    async def failing(self) -> AsyncIterator[bytes]:
        yield frame({"id": 1, "type": "state", "state": "running"})
        raise NotFound("the job disappeared")

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        producer = self.forever() if scope["path"] == "/forever" else self.failing()
        await EventStream(producer, release=self.subscriptions.acquire())(scope, receive, send)


@contextlib.asynccontextmanager
async def _serve(app: _App) -> AsyncIterator[str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_level="warning"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    for _ in range(500):  # NB: uvicorn offers no event to wait on
        if server.started:
            break
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
        sock.close()


async def test_disconnect_cancels_the_producer_and_releases_the_slot() -> None:
    app = _App()
    async with _serve(app) as url, httpx.AsyncClient(base_url=url) as client:
        async with client.stream("GET", "/forever") as response:
            assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
            assert response.headers["cache-control"] == "no-cache"
            lines = response.aiter_lines()
            assert await anext(lines) == "id: 1"
            await app.started.wait()
            assert app.subscriptions.active == 1
        await asyncio.wait_for(app.closed.wait(), 5)
        for _ in range(100):
            if app.subscriptions.active == 0:
                break
            await asyncio.sleep(0.02)
        assert app.subscriptions.active == 0


async def test_a_failing_producer_ends_with_an_error_event() -> None:
    app = _App()
    async with _serve(app) as url, httpx.AsyncClient(base_url=url) as client:
        response = await client.get("/failing")
    payloads = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]
    assert payloads[0]["state"] == "running"
    assert payloads[1] == {
        "type": "error",
        "detail": "the job disappeared",
        "error": {"type": "LookupError", "retryable": False, "attrs": {}},
    }

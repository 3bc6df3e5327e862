"""Backends that fail: outlier ejection and pooled connections (raw asyncio upstreams).

- one request that crashes every replica (a 5xx from each) ejects none of them; consecutive 5xx
  eject, but never more than half the pool;
- a pooled connection the server closed while idle is replaced before the request is sent; a
  request written on a pooled connection is never sent again (the engine may have it).
"""

from __future__ import annotations

import asyncio
import json
import time

import httpx

from sparkrun_operator.gateway.balancer import Balancer

from .conftest import StartGateway, workload
from .rawserver import chat_completion, raw_upstream, read_request

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
ERROR = json.dumps({"error": {"message": "engine crashed", "type": "server_error", "code": 500}}).encode()


def _reply(status: int, body: bytes) -> bytes:
    reason = b"OK" if status == 200 else b"Internal Server Error"
    head = b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
    return head % (status, reason, len(body)) + body


async def _poisonable(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
    while True:
        request = await read_request(reader)
        writer.write(_reply(500, ERROR) if b"poison" in request else _reply(200, chat_completion()))
        await writer.drain()


def _unhealthy(balancer: Balancer, urls: list[str]) -> int:
    now = time.monotonic()
    return sum(1 for u in urls if not balancer.backend(u).healthy(now))


def test_a_request_that_crashes_every_replica_does_not_empty_the_pool(start_gateway: StartGateway) -> None:
    ups = [raw_upstream(_poisonable) for _ in range(4)]
    servers = [u.__enter__() for u in ups]
    try:
        urls = [s.url for s in servers]
        gw = start_gateway([workload("m", "m", urls)])
        poison = {**CHAT, "messages": [{"role": "user", "content": "poison"}]}
        with httpx.Client(timeout=10) as c:
            for _ in range(4):  # one to each replica (least outstanding, in turn)
                assert c.post(f"{gw.url}/v1/chat/completions", json=poison).status_code == 500
            assert _unhealthy(gw.gateway.services.connector.balancer, urls) == 0
            assert "sparkrun_gateway_backend_ejections_total{" not in c.get(f"{gw.url}/metrics").text
            for _ in range(40):  # 5xx in a row on every replica: ejections, capped at half the pool
                assert c.post(f"{gw.url}/v1/chat/completions", json=poison).status_code == 500
                assert _unhealthy(gw.gateway.services.connector.balancer, urls) <= 2
            assert _unhealthy(gw.gateway.services.connector.balancer, urls) == 2
            assert "sparkrun_gateway_backend_ejections_total{" in c.get(f"{gw.url}/metrics").text
            for _ in range(4):  # the rest of the pool still serves
                assert c.post(f"{gw.url}/v1/chat/completions", json=CHAT).status_code == 200
    finally:
        for u in ups:
            u.__exit__(None, None, None)


def test_a_written_request_is_never_resent(start_gateway: StartGateway) -> None:
    async def crash_on_reuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        served = 0
        while True:
            request = await read_request(reader)
            up.requests.append(request)
            if served:  # the engine got the request on a kept-alive connection, then died
                return
            writer.write(_reply(200, chat_completion()))
            await writer.drain()
            served += 1

    with raw_upstream(crash_on_reuse) as up:
        gw = start_gateway([workload("m", "m", [up.url])])
        with httpx.Client(timeout=10) as c:
            assert c.post(f"{gw.url}/v1/chat/completions", json=CHAT).status_code == 200
            resp = c.post(f"{gw.url}/v1/chat/completions", json=CHAT)
        assert resp.status_code == 502
        assert len(up.requests) == 2  # sent once each: the second was not sent again


def test_a_pooled_connection_closed_while_idle_is_replaced(start_gateway: StartGateway) -> None:
    async def close_after_each(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        up.requests.append(await read_request(reader))
        writer.write(_reply(200, chat_completion()))  # keep-alive by HTTP/1.1 default, then closed
        await writer.drain()

    with raw_upstream(close_after_each) as up:
        gw = start_gateway([workload("m", "m", [up.url])])
        with httpx.Client(timeout=10) as c:
            for _ in range(3):
                assert c.post(f"{gw.url}/v1/chat/completions", json=CHAT).status_code == 200
                time.sleep(0.2)  # the server's FIN reaches the idle pooled connection
        assert len(up.requests) == 3
        assert up.connections == 3

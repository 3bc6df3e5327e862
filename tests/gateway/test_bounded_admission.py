"""Admission bounds: requests in flight (global, per key), request-head size, buffered bodies.

- over ``max_in_flight`` a request is 503 with ``Retry-After``; over ``max_in_flight_per_key``
  for one key 429 with ``Retry-After``, while other keys are served;
- a request head over ``max_header_bytes`` is 431 (also one that never ends);
- 200 concurrent slow 16 MiB uploads: the gateway's resident memory stays bounded by the body
  budget (measured on a gateway process of its own, with the default settings).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from sparkrun_operator.gateway import Gateway, GatewaySettings
from sparkrun_operator.gateway.auth import StaticKeySource
from tests.engine.conftest import free_port

from .conftest import StartGateway, workload, write_routes
from .rawserver import chat_completion, raw_upstream, read_request

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
MiB = 1024 * 1024


def _held_upstream(release: threading.Event):  # type: ignore[no-untyped-def]
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        while True:
            await read_request(reader)
            await asyncio.get_running_loop().run_in_executor(None, release.wait, 20)
            body = chat_completion()
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body)
            )
            writer.write(body)
            await writer.drain()

    return handler


def _post_in_thread(url: str, out: list[int], key: str | None = None) -> threading.Thread:
    headers = {"authorization": f"Bearer {key}"} if key else {}

    def run() -> None:
        out.append(httpx.post(url, json=CHAT, headers=headers, timeout=30).status_code)

    t = threading.Thread(target=run)
    t.start()
    return t


def _wait_in_flight(gateway: Gateway, n: int) -> None:
    deadline = time.monotonic() + 10
    while gateway.services.admission.in_flight.total < n:
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_in_flight_caps(start_gateway: StartGateway) -> None:
    release = threading.Event()
    with raw_upstream(_held_upstream(release)) as up:
        settings = GatewaySettings(max_in_flight=3, max_in_flight_per_key=2)
        keys = StaticKeySource.from_mapping({"sk-a": ["*"], "sk-b": ["*"]})
        gw = start_gateway([workload("m", "m", [up.url])], settings=settings, keys=keys)
        url = f"{gw.url}/v1/chat/completions"
        done: list[int] = []
        threads = [_post_in_thread(url, done, "sk-a") for _ in range(2)]
        _wait_in_flight(gw.gateway, 2)
        over_key = httpx.post(url, json=CHAT, headers={"authorization": "Bearer sk-a"})
        assert over_key.status_code == 429
        assert over_key.headers["retry-after"] == "1"
        threads.append(_post_in_thread(url, done, "sk-b"))  # another key still gets in
        _wait_in_flight(gw.gateway, 3)
        over_all = httpx.post(url, json=CHAT, headers={"x-api-key": "sk-b"})
        assert over_all.status_code == 503
        assert over_all.headers["retry-after"] == "1"
        assert "requests in flight" in over_all.json()["error"]["message"]
        release.set()
        for t in threads:
            t.join(20)
        assert done == [200, 200, 200]
        assert gw.gateway.services.admission.in_flight.total == 0
        assert httpx.post(url, json=CHAT, headers={"x-api-key": "sk-a"}).status_code == 200


def _raw_exchange(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        with contextlib.suppress(OSError):  # refused half way: read what it answered
            s.sendall(data)
        chunks = []
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)


def test_request_head_size_limit(start_gateway: StartGateway) -> None:
    gw = start_gateway([], settings=GatewaySettings(max_header_bytes=8 * 1024))
    ok = _raw_exchange(
        gw.port,
        b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-small: " + b"a" * 4000 + b"\r\nconnection: close\r\n\r\n",
    )
    assert ok.startswith(b"HTTP/1.1 200")
    big = _raw_exchange(gw.port, b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * 20000 + b"\r\n\r\n")
    assert big.startswith(b"HTTP/1.1 431")
    endless = b"GET /healthz HTTP/1.1\r\n" + b"".join(b"x-%d: v\r\n" % i for i in range(20000))
    started = time.monotonic()
    assert _raw_exchange(gw.port, endless).startswith(b"HTTP/1.1 431")
    assert time.monotonic() - started < 5


def _rss(pid: int) -> tuple[int, int]:
    """(current, peak) resident set of ``pid`` in bytes."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line
    )
    return int(fields["VmRSS"].split()[0]) * 1024, int(fields["VmHWM"].split()[0]) * 1024


async def _slow_uploads(port: int, clients: int, size: int, seconds: float) -> int:
    """``clients`` uploads declaring ``size`` bytes, each trickling 64 KiB every 50 ms."""
    piece = b"x" * (64 * 1024)
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n" % size
    )
    sent = [0]

    async def one() -> None:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(head)
        end = time.monotonic() + seconds
        try:
            while time.monotonic() < end:
                writer.write(piece)
                try:
                    await asyncio.wait_for(writer.drain(), max(0.01, end - time.monotonic()))
                except TimeoutError:
                    break  # held back by TCP: the gateway is not reading this body (yet)
                sent[0] += len(piece)
                await asyncio.sleep(0.05)
        finally:
            writer.transport.abort()

    await asyncio.gather(*(one() for _ in range(clients)))
    return sent[0]


def test_rss_bounded_with_200_slow_16mib_uploads(tmp_path: Path) -> None:
    routes = tmp_path / "routes.json"
    write_routes(routes, [])
    port = free_port()
    cmd = [sys.executable, "-m", "sparkrun_operator.gateway", "--routes", str(routes)]
    proc = subprocess.Popen([*cmd, "--host", "127.0.0.1", "--port", str(port), "--log-level", "error"])
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/healthz")
                break
            except httpx.TransportError:
                assert proc.poll() is None
                assert time.monotonic() < deadline
                time.sleep(0.1)
        base, _ = _rss(proc.pid)
        sent = asyncio.run(_slow_uploads(port, clients=200, size=16 * MiB, seconds=4.0))
        _, peak = _rss(proc.pid)
        growth = peak - base
        print(
            f"\nRSS: base {base / MiB:.0f} MiB, peak {peak / MiB:.0f} MiB (+{growth / MiB:.0f} MiB); "
            f"clients sent {sent / MiB:.0f} MiB"
        )
        # NB: without the body budget the gateway holds every byte the clients sent (hundreds of MiB).
        assert growth < 128 * MiB
        assert httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
    finally:
        proc.terminate()
        proc.wait(15)

"""The shared wake is bounded: a deadline, a second patch when the workload fell asleep again,
and prompt, protocol-shaped answers to every held request when the wake fails."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import httpx

from sparkrun_operator.gateway import GatewaySettings, Workload

from .conftest import StartGateway, workload, write_routes
from .rawserver import chat_completion, raw_upstream, read_request

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}


async def _engine(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
    while True:
        await read_request(reader)
        body = chat_completion()
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body)
        )
        writer.write(body)
        await writer.drain()


class ScriptedWaker:
    """Each call runs the next step of a script (a coroutine function of the call number)."""

    def __init__(self, routes: Path, url: str, mode: str) -> None:
        self.routes = routes
        self.url = url
        self.mode = mode
        self.calls: list[str] = []

    def _write(self, state: str, endpoints: list[str]) -> None:
        write_routes(self.routes, [workload("m", "m", endpoints, state=state)])

    async def wake(self, wl: Workload) -> None:
        self.calls.append(wl.state)
        n = len(self.calls)
        if self.mode == "hang-then-wake" and n == 1:
            await asyncio.sleep(3600)  # a patch that never returns
        if self.mode == "fail":
            await asyncio.sleep(0.2)
            raise RuntimeError("the apiserver refused the patch")
        if self.mode == "falls-asleep" and n == 1:
            await asyncio.to_thread(self._write, "Running", [])  # starting: Running, not ready yet
            return
        await asyncio.to_thread(self._write, "Running", [self.url])


def test_shared_wake_has_a_deadline(start_gateway: StartGateway, tmp_path: Path) -> None:
    with raw_upstream(_engine) as up:
        waker = ScriptedWaker(tmp_path / "routes-0.json", up.url, "hang-then-wake")
        gw = start_gateway(
            [workload("m", "m", [], state="Sleeping")], waker=waker, settings=GatewaySettings(wake_timeout=1)
        )
        first = httpx.post(f"{gw.url}/v1/chat/completions", json=CHAT, timeout=10)
        assert first.status_code == 503
        assert first.headers["retry-after"] == "1"
        time.sleep(0.2)
        second = httpx.post(f"{gw.url}/v1/chat/completions", json=CHAT, timeout=10)
        assert second.status_code == 200  # a fresh wake, not the one that hung
        assert len(waker.calls) == 2


def test_wake_patches_again_when_the_workload_fell_asleep(
    start_gateway: StartGateway, tmp_path: Path
) -> None:
    with raw_upstream(_engine) as up:
        routes = tmp_path / "routes-0.json"
        waker = ScriptedWaker(routes, up.url, "falls-asleep")
        gw = start_gateway(
            [workload("m", "m", [], state="Sleeping")], waker=waker, settings=GatewaySettings(wake_timeout=10)
        )
        out: list[httpx.Response] = []
        t = threading.Thread(
            target=lambda: out.append(httpx.post(f"{gw.url}/v1/chat/completions", json=CHAT, timeout=20))
        )
        t.start()
        deadline = time.monotonic() + 5
        while gw.gateway.source.snapshot().lookup("m").state != "Running":  # type: ignore[union-attr]
            assert time.monotonic() < deadline
            time.sleep(0.02)
        gw.set_routes([workload("m", "m", [], state="Sleeping")])  # something put it back to sleep
        t.join(20)
        assert out[0].status_code == 200
        assert waker.calls == ["Sleeping", "Sleeping"]


def test_failed_wake_answers_every_held_request(start_gateway: StartGateway, tmp_path: Path) -> None:
    waker = ScriptedWaker(tmp_path / "routes-0.json", "", "fail")
    gw = start_gateway([workload("m", "m", [], state="Stopped")], waker=waker)
    results: dict[str, httpx.Response] = {}
    requests = {
        "openai": ("/v1/chat/completions", {**CHAT, "stream": True}),
        "anthropic": ("/v1/messages", {**CHAT, "stream": True}),
        "ollama": ("/api/chat", {"model": "m", "messages": [{"role": "user", "content": "x"}]}),
    }

    def ask(family: str) -> None:
        path, body = requests[family]
        results[family] = httpx.post(f"{gw.url}{path}", json=body, timeout=20)

    started = time.monotonic()
    threads = [threading.Thread(target=ask, args=(f,)) for f in requests]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert time.monotonic() - started < 3
    assert len(waker.calls) == 1  # one shared wake
    for resp in results.values():
        assert resp.status_code == 503
        assert resp.headers["retry-after"] == "5"
    assert "could not be woken" in results["openai"].json()["error"]["message"]
    assert results["anthropic"].json()["type"] == "error"
    assert results["anthropic"].json()["error"]["type"] == "overloaded_error"
    assert "could not be woken" in results["ollama"].json()["error"]

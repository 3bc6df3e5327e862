"""Fixtures: engine stand-ins as subprocesses and the gateway served by uvicorn on loopback.

The gateway runs in a thread of the test process (uvicorn on a free 127.0.0.1 port) so that tests
can hand it a routing file, keys and a waker of their own; streaming goes over real sockets.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import anthropic
import httpx
import ollama
import pytest
import uvicorn

from sparkrun_operator.gateway import Gateway, GatewaySettings, KeySource, StaticRoutingSource, Waker
from sparkrun_operator.gateway.routing import RoutingSource
from sparkrun_operator.gateway.server import uvicorn_config
from tests.engine.conftest import EngineProc, Launcher, free_port


def workload(name: str, served: str, endpoints: list[str], **extra: Any) -> dict[str, Any]:
    """One routing-file entry."""
    return {"namespace": "ml", "name": name, "servedName": served, "endpoints": endpoints, **extra}


def write_routes(path: Path, workloads: list[dict[str, Any]]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"workloads": workloads}))
    tmp.replace(path)  # atomic: the gateway never reads half a file


@dataclass
class GatewayThread:
    """A gateway served by uvicorn in a background thread."""

    gateway: Gateway
    server: uvicorn.Server
    thread: threading.Thread
    port: int
    routes: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def set_routes(self, workloads: list[dict[str, Any]], timeout: float = 5) -> None:
        """Rewrite the routing file and wait until the gateway serves the new table."""
        version = self.gateway.source.snapshot().version
        write_routes(self.routes, workloads)
        deadline = time.monotonic() + timeout
        while self.gateway.source.snapshot().version == version:
            assert time.monotonic() < deadline, "routing file change not picked up"
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(15)


class StartGateway(Protocol):
    def __call__(
        self,
        workloads: list[dict[str, Any]],
        *,
        settings: GatewaySettings | None = None,
        keys: KeySource | None = None,
        waker: Waker | None = None,
        source: RoutingSource | None = None,
    ) -> GatewayThread: ...


@pytest.fixture
def start_gateway(tmp_path: Path) -> Iterator[StartGateway]:
    started: list[GatewayThread] = []

    def start(
        workloads: list[dict[str, Any]],
        *,
        settings: GatewaySettings | None = None,
        keys: KeySource | None = None,
        waker: Waker | None = None,
        source: RoutingSource | None = None,
    ) -> GatewayThread:
        """A gateway routing ``workloads`` (a routing file), or ``source`` when given."""
        routes = tmp_path / f"routes-{len(started)}.json"
        write_routes(routes, workloads)
        source = source or StaticRoutingSource(routes, poll_interval=0.05)
        gateway = Gateway(source, settings=settings, keys=keys, waker=waker)
        port = free_port()
        server = uvicorn.Server(uvicorn_config(gateway, host="127.0.0.1", port=port, log_level="warning"))
        thread = threading.Thread(target=server.run, name=f"gateway-{port}", daemon=True)
        thread.start()
        deadline = time.monotonic() + 15
        while not server.started:
            assert thread.is_alive(), "gateway failed to start"
            assert time.monotonic() < deadline, "gateway did not start"
            time.sleep(0.02)
        gw = GatewayThread(gateway, server, thread, port, routes)
        started.append(gw)
        return gw

    yield start
    for gw in started:
        gw.stop()


@dataclass
class Engines:
    """The stand-ins shared by a test module."""

    chat: list[EngineProc]
    embed: EngineProc
    launcher: Launcher

    def chat_workload(self, **extra: Any) -> dict[str, Any]:
        return workload("chat", "chat-model", [e.url for e in self.chat], aliases=["chat"], **extra)

    def embed_workload(self) -> dict[str, Any]:
        return workload("embed", "embed-model", [self.embed.url], capabilities=["embedding"])


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engines]:
    """Two chat stand-ins (served as ``chat-model``) and one embedding stand-in."""
    launcher = Launcher(tmp_path_factory.mktemp("engines"))
    chat = [launcher("org/chat", "--served-model-name", "chat-model", wait=False) for _ in range(2)]
    embed = launcher("org/embed", "--served-model-name", "embed-model", "--runner", "pooling", wait=False)
    for engine in [*chat, embed]:
        engine.wait_healthy()
    yield Engines(chat, embed, launcher)
    launcher.close()


# -- the SDK clients and the pass-through check the gateway's protocol tests share ---------------
# NB: `gw` is each module's own gateway fixture (its upstreams differ).


@pytest.fixture
def claude(gw: Any) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=gw.url, api_key="unused", max_retries=0, timeout=20) as c:
        yield c


@pytest.fixture
def llama(gw: Any) -> Iterator[ollama.Client]:
    c = ollama.Client(host=gw.url, timeout=20)
    yield c
    c.close()


def without_ids(raw: bytes) -> bytes:
    """An OpenAI body or stream with its ids and timestamps blanked (they differ per answer)."""
    raw = re.sub(rb'"id":"[^"]+"', b'"id":"X"', raw)
    return re.sub(rb'"created":\d+', b'"created":0', raw)


def assert_stream_passed_through(gateway: str, upstream: str, body: dict[str, Any]) -> None:
    """A streamed chat through ``gateway`` is the upstream's own stream, after one comment
    naming the request id (the daemon's ``command_id``)."""
    with httpx.stream("POST", f"{gateway}/v1/chat/completions", json=body) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        rid = resp.headers["x-request-id"]
        via = resp.read()
    direct = httpx.post(f"{upstream}/v1/chat/completions", json=body).content
    comment = b": command_id " + rid.encode() + b"\n\n"
    assert via.startswith(comment)
    assert without_ids(via[len(comment) :]) == without_ids(direct)

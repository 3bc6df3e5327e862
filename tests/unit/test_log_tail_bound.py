"""``Kube.log_tail`` reads a bounded part of a container's log (issue 23).

A loopback HTTP server plays the apiserver's pod log endpoint. It records the query and answers
with as much as it likes: ``limitBytes`` must be asked for, and whatever comes back, no more than
the limit is read; a line the limit cut is dropped (a cut JSON report must not be half-read).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from aiohttp import web

from sparkrun_operator.k8s.client import LOG_TAIL_BYTES, Kube, connect

LOG = "/api/v1/namespaces/ns/pods/p/log"


@dataclass
class Server:
    url: str = ""
    queries: list[dict[str, str]] = field(default_factory=list)
    body: bytes = b""
    honour_limit: bool = False


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    found = Server()

    async def log(request: web.Request) -> web.StreamResponse:
        found.queries.append(dict(request.query))
        body = found.body
        if found.honour_limit and "limitBytes" in request.query:
            body = body[: int(request.query["limitBytes"])]
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        try:
            for start in range(0, len(body), 65536):
                await response.write(body[start : start + 65536])
        except ConnectionError:
            pass  # NB: the client stopped reading, as it should
        return response

    app = web.Application()
    app.router.add_get(LOG, log)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    found.url = f"http://127.0.0.1:{port}"
    try:
        yield found
    finally:
        await runner.cleanup()


async def _kube(tmp_path: Path, server: Server) -> Kube:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server.url}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return Kube(await connect(kubeconfig=str(path)), field_manager="test")


async def test_a_log_tail_asks_for_a_byte_limit_and_reads_no_more(tmp_path: Path, server: Server) -> None:
    line = b'{"event": "progress", "message": "' + b"x" * 900 + b'"}\n'
    server.body = line * 8000  # ~7 MiB, the limit ignored
    kube = await _kube(tmp_path, server)
    try:
        text = await kube.log_tail("ns", "p", container="c", lines=5)
    finally:
        await kube.api.close()
    (query,) = server.queries
    assert query["limitBytes"] == str(LOG_TAIL_BYTES)
    assert query["tailLines"] == "5"
    assert query["container"] == "c"
    assert 0 < len(text.encode()) <= LOG_TAIL_BYTES
    assert text.endswith("\n")
    assert all(f"{row}\n".encode() == line for row in text.split("\n")[:-1])  # whole lines only


async def test_a_named_limit_and_a_short_log(tmp_path: Path, server: Server) -> None:
    server.body = b"first\n" + b"y" * 5000 + b"\nlast\n"
    server.honour_limit = True
    kube = await _kube(tmp_path, server)
    try:
        whole = await kube.log_tail("ns", "p", container="c", limit_bytes=1 << 20)
        cut = await kube.log_tail("ns", "p", container="c", limit_bytes=1000)
        nothing = await kube.log_tail("ns", "p", container="c", limit_bytes=3)
    finally:
        await kube.api.close()
    assert whole == server.body.decode()
    assert cut == "first\n"  # the line the limit cut is dropped
    assert nothing == ""
    assert [q["limitBytes"] for q in server.queries] == [str(1 << 20), "1000", "3"]

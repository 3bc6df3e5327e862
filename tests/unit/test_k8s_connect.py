"""``k8s.client.connect``: the environment's proxy settings are read once, not per request.

kubernetes_asyncio's aiohttp session would otherwise look up the proxy variables and ``.netrc``
in a worker thread on every API call. The proxy a process starts with must still be used: a
loopback HTTP proxy records what it is sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml

from sparkrun_operator.k8s.client import Kube, connect
from sparkrun_operator.k8s.resources import CONFIG_MAPS

APISERVER = "http://127.0.0.1:9"  # nothing listens: only the proxy may answer


def _kubeconfig(tmp_path: Path, server: str = APISERVER) -> str:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "t0ken"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return str(path)


class Proxy:
    """A plain HTTP proxy on loopback that answers every request itself and keeps its head."""

    def __init__(self) -> None:
        self.heads: list[bytes] = []
        self.port = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        self.heads.append(head)
        body = b'{"kind": "ConfigMap", "metadata": {"name": "seen"}}'
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%b"
            % (len(body), body)
        )
        await writer.drain()
        writer.close()


@pytest.fixture
async def proxy() -> AsyncIterator[Proxy]:
    found = Proxy()
    server = await asyncio.start_server(found._serve, "127.0.0.1", 0)
    found.port = server.sockets[0].getsockname()[1]
    async with server:
        yield found


async def test_no_per_request_environment_lookups(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    api = await connect(kubeconfig=_kubeconfig(tmp_path))
    try:
        assert api.rest_client.pool_manager.trust_env is False
        assert not api.rest_client.proxy
    finally:
        await api.close()


async def test_the_environments_proxy_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, proxy: Proxy
) -> None:
    monkeypatch.setenv("HTTP_PROXY", f"http://alice:s3cret@127.0.0.1:{proxy.port}")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    kube = Kube(await connect(kubeconfig=_kubeconfig(tmp_path)), field_manager="test")
    try:
        assert kube.api.rest_client.pool_manager.trust_env is False
        found = await kube.get(CONFIG_MAPS, "seen", "default")
    finally:
        await kube.api.close()
    assert found is not None
    assert found["metadata"]["name"] == "seen"
    (head,) = proxy.heads
    assert head.startswith(b"GET http://127.0.0.1:9/api/v1/namespaces/default/configmaps/seen HTTP/1.1\r\n")
    assert b"\r\nProxy-Authorization: Basic YWxpY2U6czNjcmV0\r\n" in head  # alice:s3cret
    assert b"\r\nauthorization: bearer t0ken\r\n" in head.lower()


async def test_no_proxy_for_the_apiserver_is_honoured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, proxy: Proxy
) -> None:
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    api = await connect(kubeconfig=_kubeconfig(tmp_path))
    try:
        assert not api.rest_client.proxy
        assert api.rest_client.pool_manager.trust_env is False
    finally:
        await api.close()

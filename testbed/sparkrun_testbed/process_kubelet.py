"""The kubelet HTTPS API of a process node: enough for ``kubectl logs``.

kube-apiserver serves ``pods/log`` by dialling the pod's node at its ``InternalIP`` and
``status.daemonEndpoints.kubeletEndpoint.Port`` and proxying ``GET
/containerLogs/<namespace>/<pod>/<container>``. The testbed starts kube-apiserver with
``--kubelet-certificate-authority`` (the testbed CA, so it verifies this server's certificate,
issued by the same CA for the node's address) and ``--kubelet-client-certificate``/``-key``
(which this server requires: a client certificate from the testbed CA, nothing else gets in).

Served:

- ``GET /containerLogs/{namespace}/{pod}/{container}`` with ``follow``, ``tailLines``,
  ``previous``, ``limitBytes``; ``follow`` streams until the container's run ends or the client
  goes away. ``timestamps`` and ``sinceSeconds``/``sinceTime`` are ignored (the logs are the
  raw output; there is no per-line time).
- ``GET /healthz`` -> ``ok``; ``GET /pods`` -> the node's pods as a ``PodList``.
- ``exec``, ``attach``, ``portForward`` and everything else: 404 with a message, so kubectl
  says what is missing instead of hanging.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from aiohttp import web

_FOLLOW_POLL = 0.2
_CHUNK = 64 * 1024


class LogSource(Protocol):
    """What the server needs from a pod worker."""

    def container_names(self) -> list[str]: ...

    def log_path(self, container: str, *, previous: bool) -> Path | None: ...

    def log_live(self, container: str, path: Path) -> bool: ...


def server_context(cert_file: Path, key_file: Path, ca_file: Path) -> ssl.SSLContext:
    """TLS that presents the node's certificate and requires a client cert from the CA."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(ca_file))
    context.load_cert_chain(str(cert_file), str(key_file))
    context.verify_mode = ssl.CERT_REQUIRED
    return context


def tail_bytes(data: bytes, lines: int) -> bytes:
    """The last ``lines`` lines of ``data`` (a final line without newline counts)."""
    if lines <= 0:
        return b""
    end = len(data) - 1 if data.endswith(b"\n") else len(data)
    pos = end
    for _ in range(lines):
        pos = data.rfind(b"\n", 0, pos)
        if pos < 0:
            return data
    return data[pos + 1 :]


def _read_from(path: Path, offset: int, size: int) -> bytes:
    with path.open("rb") as f:
        f.seek(offset)
        return f.read(size)


def _read_tail(path: Path, lines: int | None) -> tuple[bytes, int]:
    """Initial content (all, or the last ``lines`` lines) and the offset after it."""
    with path.open("rb") as f:
        data = f.read()
    end = len(data)
    return (data if lines is None else tail_bytes(data, lines)), end


class KubeletServer:
    """One node's kubelet API (see module docs); ``pods`` finds a pod's worker by name."""

    def __init__(
        self,
        *,
        node_name: str,
        find_pod: Callable[[str, str], LogSource | None],
        list_pods: Callable[[], Sequence[dict[str, Any]]],
    ) -> None:
        self.node_name = node_name
        self.find_pod = find_pod
        self.list_pods = list_pods
        self._runner: web.AppRunner | None = None
        self.port = 0

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/pods", self._pods)
        app.router.add_get("/containerLogs/{namespace}/{pod}/{container}", self._logs)
        app.router.add_route("*", "/{tail:.*}", self._unsupported)
        return app

    async def start(self, host: str, port: int, context: ssl.SSLContext | None) -> int:
        """Listen on ``host:port`` (0: any free port); returns the port."""
        self._runner = web.AppRunner(self.app(), access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, ssl_context=context, reuse_address=True)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _pods(self, request: web.Request) -> web.Response:
        body = {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": list(self.list_pods())}
        return web.Response(text=json.dumps(body), content_type="application/json")

    async def _unsupported(self, request: web.Request) -> web.Response:
        return web.Response(
            status=404,
            text=f"{request.path}: not supported by the testbed process runtime (only containerLogs)\n",
        )

    async def _logs(self, request: web.Request) -> web.StreamResponse:
        ns, pod, container = (request.match_info[k] for k in ("namespace", "pod", "container"))
        query = request.query
        follow = query.get("follow") in ("true", "1")
        previous = query.get("previous") in ("true", "1")
        tail = int(query["tailLines"]) if query.get("tailLines", "").lstrip("-").isdigit() else None
        limit = int(query["limitBytes"]) if query.get("limitBytes", "").isdigit() else None
        source = self.find_pod(ns, pod)
        if source is None:
            return web.Response(status=404, text=f'pod "{pod}" not found on node {self.node_name}\n')
        if container not in source.container_names():
            return web.Response(status=400, text=f'container "{container}" is not valid for pod "{pod}"\n')
        path = source.log_path(container, previous=previous)
        if path is None or not path.exists():
            what = "previous terminated container" if previous else "container"
            return web.Response(
                status=400, text=f'{what} "{container}" in pod "{pod}" not found or waiting to start\n'
            )
        data, offset = await asyncio.to_thread(
            _read_tail, path, tail if tail is not None and tail >= 0 else None
        )
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        sent = 0

        async def send(chunk: bytes) -> bool:
            nonlocal sent
            if limit is not None:
                chunk = chunk[: max(0, limit - sent)]
            if chunk:
                await response.write(chunk)
                sent += len(chunk)
            return limit is None or sent < limit

        more = await send(data)
        while follow and more:
            chunk = await asyncio.to_thread(_read_from, path, offset, _CHUNK)
            if chunk:
                offset += len(chunk)
                more = await send(chunk)
                continue
            if not source.log_live(container, path):
                # NB: one last read: the process may have written after our previous one.
                chunk = await asyncio.to_thread(_read_from, path, offset, _CHUNK)
                if chunk:
                    offset += len(chunk)
                    await send(chunk)
                    continue
                break
            await asyncio.sleep(_FOLLOW_POLL)
        await response.write_eof()
        return response


def health_app(ready: Callable[[], bool]) -> web.Application:
    """The runtime's own ``/healthz`` (plain HTTP on loopback, for ``testbed up|status``)."""

    async def healthz(request: web.Request) -> web.Response:
        if ready():
            return web.Response(text="ok")
        return web.Response(status=503, text="starting\n")

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    return app

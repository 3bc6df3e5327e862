"""Services for process-node pods: their ClusterIPs answer and their DNS names resolve.

The testbed has no kube-proxy and no cluster DNS. This does the part of both that pods need,
in the userspace style of the first kube-proxy: for every TCP port of every Service with a
ClusterIP, the runtime listens on ``<clusterIP>:<port>`` on the testbed namespace's bridge
(:meth:`~sparkrun_testbed.netns.NamespaceNetwork.listen_for_pods`; every pod routes the
Service range there) and relays each connection to one Ready endpoint of the Service, chosen at
random from its EndpointSlices (the port of the same name). The Services' names go into every
pod's hosts file (:class:`~sparkrun_testbed.process_dns.Registry`): ``<svc>.<ns>.svc.cluster.local``,
``<svc>.<ns>.svc``, ``<svc>.<ns>``, and ``<svc>`` within its namespace.

Services and EndpointSlices are listed every :data:`POLL_SECONDS` (a testbed holds a few
hundred at most); a new Service answers within that time. The ``kubernetes`` Service is the
runtime's own business (``_expose_api``), headless Services need no proxy (their pods' DNS names
are published already), and the host does not route ClusterIPs (it reaches pod IPs, and
kube-apiserver's Service proxy). With loopback pod addresses nothing here runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sparkrun_testbed import netns
from sparkrun_testbed.process_api import call_json
from sparkrun_testbed.process_dns import Registry

log = logging.getLogger("sparkrun_testbed.process_services")
POLL_SECONDS = 1.0
SERVICE_NAME_LABEL = "kubernetes.io/service-name"

Listener = tuple[str, int]  # (clusterIP, port)
Target = tuple[str, str, str]  # (namespace, service, port name)


@dataclass
class ServiceProxy:
    """Serves the ClusterIPs of every Service (see the module docs)."""

    network: netns.PodNetwork
    dns: Registry
    servers: dict[Listener, asyncio.Server] = field(default_factory=dict)
    routes: dict[Listener, Target] = field(default_factory=dict)
    endpoints: dict[Target, list[tuple[str, int]]] = field(default_factory=dict)

    async def run(self, core: Any, discovery: Any) -> None:
        """Follow Services and EndpointSlices until cancelled."""
        try:
            while True:
                try:
                    services = (await call_json(core.list_service_for_all_namespaces))["items"]
                    slices = (await call_json(discovery.list_endpoint_slice_for_all_namespaces))["items"]
                    await self.sync(services, slices)
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # the next round tries again
                    log.warning("services: %s", e)
                await asyncio.sleep(POLL_SECONDS)
        finally:
            await self.close()

    async def sync(self, services: list[Mapping[str, Any]], slices: list[Mapping[str, Any]]) -> None:
        routes: dict[Listener, Target] = {}
        names: dict[tuple[str, str], str] = {}
        for svc in services:
            meta, spec = svc["metadata"], svc.get("spec") or {}
            ip = spec.get("clusterIP") or ""
            if ip in ("", "None") or (meta["namespace"], meta["name"]) == ("default", "kubernetes"):
                continue
            names[(meta["namespace"], meta["name"])] = ip
            for port in spec.get("ports") or ():
                if port.get("protocol", "TCP") == "TCP":
                    routes[(ip, int(port["port"]))] = (
                        meta["namespace"],
                        meta["name"],
                        port.get("name") or "",
                    )
        self.endpoints = ready_endpoints(slices)
        self.routes = routes
        for listener in [key for key in self.servers if key not in routes]:
            self.servers.pop(listener).close()
        for listener in routes:
            if listener not in self.servers:
                await self._listen(listener)
        self.dns.set_services(names)

    async def _listen(self, listener: Listener) -> None:
        ip, port = listener
        try:
            sock = await self.network.listen_for_pods(ip, port)
        except (OSError, RuntimeError) as e:
            log.warning("services: cannot serve %s:%d: %s", ip, port, e)
            return
        if sock is None:
            return

        async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._relay(listener, reader, writer)

        self.servers[listener] = await asyncio.start_server(relay, sock=sock)
        log.info("services: %s:%d -> %s", ip, port, "/".join(self.routes[listener]))

    async def _relay(
        self, listener: Listener, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        target = self.routes.get(listener)
        choices = self.endpoints.get(target, []) if target else []
        if not choices:
            writer.close()  # as a Service without endpoints: the connection is refused
            return
        host, port = random.choice(choices)
        try:
            up_reader, up_writer = await asyncio.open_connection(host, port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        for w in (writer, up_writer):
            w.close()

    async def close(self) -> None:
        for server in self.servers.values():
            server.close()
        for server in self.servers.values():
            with contextlib.suppress(Exception):
                await server.wait_closed()
        self.servers.clear()


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy bytes until EOF, then half-close the other side (TLS passes through untouched)."""
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (OSError, RuntimeError):
        writer.close()


def ready_endpoints(slices: list[Mapping[str, Any]]) -> dict[Target, list[tuple[str, int]]]:
    """(namespace, service, port name) -> the Ready addresses and their ports."""
    found: dict[Target, list[tuple[str, int]]] = {}
    for piece in slices:
        meta = piece["metadata"]
        service = (meta.get("labels") or {}).get(SERVICE_NAME_LABEL)
        if not service or piece.get("addressType") != "IPv4":
            continue
        addresses = [
            address
            for endpoint in piece.get("endpoints") or ()
            if (endpoint.get("conditions") or {}).get("ready") is not False
            for address in endpoint.get("addresses") or ()
        ]
        for port in piece.get("ports") or ():
            if port.get("protocol", "TCP") != "TCP" or port.get("port") is None:
                continue
            target = (meta["namespace"], service, port.get("name") or "")
            found.setdefault(target, []).extend((address, int(port["port"])) for address in addresses)
    return found

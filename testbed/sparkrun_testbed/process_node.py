"""A process node's registration and heartbeats, as a kubelet keeps them.

:class:`NodeAgent` registers the Node (creating it from the testbed topology's manifest if it
does not exist yet, as a kubelet self-registers; the testbed may also have created it), then
keeps it alive:

- ``status``: ``addresses`` (only ``InternalIP``: kube-apiserver dials the first address type it
  prefers, and a ``Hostname`` would not resolve), ``daemonEndpoints.kubeletEndpoint.Port`` (the
  node's kubelet API, for ``kubectl logs``), ``nodeInfo`` and the conditions ``Ready``
  (``KubeletReady``) and ``MemoryPressure``/``DiskPressure``/``PIDPressure`` (False);
- a Lease ``kube-node-lease/<node>`` renewed every ``lease_renew`` seconds (40 s duration), which
  kube-controller-manager's node lifecycle controller watches; the status heartbeat is written
  every ``status_every`` seconds.

Process nodes carry the label ``sparkrun.dev/testbed-runtime: process`` and never the KWOK
annotation, so KWOK leaves them alone.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import platform
from collections.abc import Mapping
from typing import Any

from sparkrun_testbed.process_api import call_json
from sparkrun_testbed.topology import PROCESS_TAINT

log = logging.getLogger("sparkrun.testbed.process")

RUNTIME_LABEL = "sparkrun.dev/testbed-runtime"
RUNTIME_PROCESS = "process"
LEASE_NAMESPACE = "kube-node-lease"
LEASE_SECONDS = 40
_NOT_FOUND = 404
_CONFLICT = 409


def default_manifest(name: str) -> dict[str, Any]:
    """A Node for ``name`` when the topology has none: 8 GPUs, tainted with ``PROCESS_TAINT``."""
    resources = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                RUNTIME_LABEL: RUNTIME_PROCESS,
            },
        },
        # NB: tainted: a node nobody declared must not attract pods that did not ask for it.
        "spec": {"taints": [dict(PROCESS_TAINT)]},
        "status": {"capacity": dict(resources), "allocatable": dict(resources)},
    }


def _micro(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _seconds(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class NodeAgent:
    """Registration and heartbeats of one process node (see module docs)."""

    def __init__(
        self,
        *,
        core: Any,
        coordination: Any,
        name: str,
        ip: str,
        kubelet_port: int,
        manifest: Mapping[str, Any] | None,
        kubelet_version: str,
        lease_renew: float = 10.0,
        status_every: float = 60.0,
    ) -> None:
        self.core = core
        self.coordination = coordination
        self.name = name
        self.ip = ip
        self.kubelet_port = kubelet_port
        self.manifest = dict(manifest) if manifest is not None else default_manifest(name)
        self.kubelet_version = kubelet_version
        self.lease_renew = lease_renew
        self.status_every = status_every
        self.allocatable: dict[str, str] = {}
        self.uid = ""
        self._ready_since = _now()

    async def register(self) -> None:
        """Create the Node if absent, then write its status (Ready)."""
        from kubernetes_asyncio.client.exceptions import ApiException

        try:
            node = await self._read()
        except ApiException as e:
            if e.status != _NOT_FOUND:
                raise
            try:
                node = await call_json(self.core.create_node, self.manifest)
            except ApiException as e2:
                if e2.status != _CONFLICT:
                    raise
                node = await self._read()
        self.uid = node["metadata"]["uid"]
        status = node.get("status") or {}
        self.allocatable = dict(status.get("allocatable") or self.manifest["status"]["allocatable"])
        await self.write_status(initial=True)
        await self.renew_lease()

    async def _read(self) -> dict[str, Any]:
        return await call_json(self.core.read_node, self.name)

    def status_body(self, *, initial: bool) -> dict[str, Any]:
        now = _now()
        since = _seconds(self._ready_since)
        beat = _seconds(now)

        def cond(kind: str, status: str, reason: str, message: str) -> dict[str, Any]:
            return {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": beat,
                "lastTransitionTime": since,
            }

        body: dict[str, Any] = {
            "conditions": [
                cond(
                    "MemoryPressure",
                    "False",
                    "KubeletHasSufficientMemory",
                    "kubelet has sufficient memory available",
                ),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                cond(
                    "PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"
                ),
                cond(
                    "Ready",
                    "True",
                    "KubeletReady",
                    "kubelet is posting ready status (testbed process runtime)",
                ),
            ]
        }
        if initial:
            uname = platform.uname()
            body["addresses"] = [{"type": "InternalIP", "address": self.ip}]
            body["daemonEndpoints"] = {"kubeletEndpoint": {"Port": self.kubelet_port}}
            body["nodeInfo"] = {
                "machineID": self.name,
                "systemUUID": self.name,
                "bootID": f"{os.getpid()}",
                "kernelVersion": uname.release,
                "osImage": "sparkrun testbed process node",
                "containerRuntimeVersion": "process://sparkrun-testbed",
                "kubeletVersion": self.kubelet_version,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64" if uname.machine in ("x86_64", "amd64") else uname.machine,
            }
        return body

    async def write_status(self, *, initial: bool = False) -> None:
        await call_json(self.core.patch_node_status, self.name, {"status": self.status_body(initial=initial)})

    async def renew_lease(self) -> None:
        from kubernetes_asyncio.client.exceptions import ApiException

        spec = {
            "holderIdentity": self.name,
            "leaseDurationSeconds": LEASE_SECONDS,
            "renewTime": _micro(_now()),
        }
        try:
            await call_json(
                self.coordination.patch_namespaced_lease, self.name, LEASE_NAMESPACE, {"spec": spec}
            )
        except ApiException as e:
            if e.status != _NOT_FOUND:
                raise
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": self.name,
                    "namespace": LEASE_NAMESPACE,
                    "ownerReferences": [
                        {"apiVersion": "v1", "kind": "Node", "name": self.name, "uid": self.uid}
                    ],
                },
                "spec": spec,
            }
            await call_json(self.coordination.create_namespaced_lease, LEASE_NAMESPACE, body)

    async def heartbeat(self) -> None:
        """Renew the lease and the status forever; errors are logged and retried."""
        since_status = 0.0
        while True:
            await asyncio.sleep(self.lease_renew)
            since_status += self.lease_renew
            try:
                await self.renew_lease()
                if since_status >= self.status_every:
                    since_status = 0.0
                    await self.write_status()
            except Exception as e:  # the apiserver may be restarting; try again next beat
                log.warning("node %s: heartbeat failed: %s", self.name, e)

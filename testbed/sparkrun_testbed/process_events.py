"""Kubernetes Events from the process runtime, as a kubelet records them (``kubectl describe``).

Events are best effort: they are sent in the background and a failure to send one is logged at
debug level and otherwise ignored, as client-go's recorder does.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Mapping
from typing import Any

from sparkrun_testbed.process_api import call_json
from sparkrun_testbed.process_status import now, rfc3339

log = logging.getLogger("sparkrun.testbed.process")


class Events:
    """Posts core/v1 Events with source ``kubelet`` on one node."""

    def __init__(self, core: Any, node_name: str) -> None:
        self.core = core
        self.node_name = node_name
        self._tasks: set[asyncio.Task[None]] = set()

    def pod(
        self,
        pod: Mapping[str, Any],
        reason: str,
        message: str,
        *,
        warning: bool = False,
        container: str | None = None,
        init: bool = False,
    ) -> None:
        """Record an event about ``pod`` (and one of its containers)."""
        meta = pod["metadata"]
        involved: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": meta["namespace"],
            "name": meta["name"],
            "uid": meta["uid"],
        }
        if container is not None:
            kind = "initContainers" if init else "containers"
            involved["fieldPath"] = f"spec.{kind}{{{container}}}"
        self._send(meta["namespace"], meta["name"], involved, reason, message, warning)

    def node(self, reason: str, message: str) -> None:
        involved = {"apiVersion": "v1", "kind": "Node", "name": self.node_name, "uid": self.node_name}
        self._send("default", self.node_name, involved, reason, message, False)

    def _send(
        self, namespace: str, name: str, involved: dict[str, Any], reason: str, message: str, warning: bool
    ) -> None:
        stamp = rfc3339(now())
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{name}.{secrets.token_hex(8)}", "namespace": namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "type": "Warning" if warning else "Normal",
            "source": {"component": "kubelet", "host": self.node_name},
            "reportingComponent": "kubelet",
            "reportingInstance": self.node_name,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        task = asyncio.get_running_loop().create_task(self._post(namespace, body))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _post(self, namespace: str, body: dict[str, Any]) -> None:
        try:
            await call_json(self.core.create_namespaced_event, namespace, body)
        except Exception as e:  # best effort, see module docs
            log.debug("event %s not recorded: %s", body["reason"], e)

    async def drain(self, *, seconds: float = 2.0) -> None:
        """Wait up to ``seconds`` for events still being sent."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=seconds)

"""Wake-on-request: hold requests for a Sleeping/Stopped workload until it is routable.

The gateway calls a pluggable :class:`Waker` (the Kubernetes one sets the workload's
``spec.state`` to Running) and then waits for the routing source to show the workload Running
with a ready endpoint. Concurrent requests for the same workload share one wake: one ``wake()``
call, one wait. Every request waits at most ``timeout`` seconds; the shared wake keeps going for
requests that arrive later.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import Protocol

from .errors import GatewayError
from .routing import RoutingSource, Workload

log = logging.getLogger("sparkrun.gateway.wake")


class Waker(Protocol):
    """Starts bringing a workload to Running; returns once the request to do so is made."""

    async def wake(self, workload: Workload) -> None: ...


class NoopWaker:
    """Asks nobody: requests are held until something else makes the workload routable."""

    async def wake(self, workload: Workload) -> None:
        log.info("workload %s is %s; waiting for it to be woken", workload.key, workload.state)


class WakeCoordinator:
    """Deduplicates wakes per workload and bounds how long a request is held."""

    def __init__(
        self,
        source: RoutingSource,
        waker: Waker,
        *,
        timeout: float,
        on_wake: Callable[[Workload, str], None] | None = None,
    ) -> None:
        self.source = source
        self.waker = waker
        self.timeout = timeout
        self.on_wake = on_wake
        self._pending: dict[str, asyncio.Task[Workload]] = {}

    async def ready(self, workload: Workload, model: str) -> Workload:
        """The routable workload serving ``model``; wakes it first if needed.

        Raises :class:`GatewayError` 503 (with ``Retry-After``) when it is not routable within
        ``timeout``, or when the waker fails.
        """
        task = self._pending.get(workload.key)
        if task is None:
            task = asyncio.create_task(self._wake(workload, model), name=f"wake-{workload.key}")
            self._pending[workload.key] = task
            task.add_done_callback(functools.partial(self._forget, workload.key))
        try:
            async with asyncio.timeout(self.timeout):
                return await asyncio.shield(task)
        except TimeoutError:
            raise GatewayError(
                503,
                f"Model {model} is waking up (workload {workload.key} is {workload.state}); retry shortly",
                code="model_waking",
                retry_after=max(1.0, self.timeout),
            ) from None

    def _forget(self, key: str, task: asyncio.Task[Workload]) -> None:
        if self._pending.get(key) is task:
            del self._pending[key]
        if not task.cancelled():
            task.exception()  # NB: mark it retrieved; every waiter already saw it

    async def _wake(self, workload: Workload, model: str) -> Workload:
        if self.on_wake:
            self.on_wake(workload, "started")
        try:
            await self.waker.wake(workload)
        except Exception as exc:
            log.warning("waking %s failed: %s", workload.key, exc)
            if self.on_wake:
                self.on_wake(workload, "failed")
            raise GatewayError(503, f"Model {model} could not be woken: {exc}", code="wake_failed") from exc
        table = self.source.snapshot()
        while True:
            current = table.lookup(model)
            if current is None:
                raise GatewayError(404, f"No instance found for model {model}", code="model_not_found")
            if current.routable:
                if self.on_wake:
                    self.on_wake(workload, "ready")
                return current
            table = await self.source.wait_changed(table.version)

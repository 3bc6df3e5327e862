"""Wake-on-request: hold requests for a Sleeping/Stopped workload until it is routable.

The gateway calls a pluggable :class:`Waker` (the Kubernetes one sets the workload's
``spec.state`` to Running) and then waits for the routing source to show the workload Running
with a ready endpoint. Concurrent requests for the same workload share one wake: one ``wake()``
call, one wait. Every request waits at most ``timeout`` seconds, and so does the shared wake
itself: when it runs out, every request it holds is answered (503 with ``Retry-After``) and the
next request starts a fresh wake. While it waits, the wake calls the waker again when the
workload went back to Sleeping/Stopped after it had been Running, and also every ``repatch``
back-off while it stays Sleeping/Stopped (the patch did not take, or something undid it). A waker
that fails answers every held request at once.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import Protocol

from ..retry import Attempts, Backoff
from .errors import GatewayError, clip
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
        repatch: Backoff | None = None,
    ) -> None:
        self.source = source
        self.waker = waker
        self.timeout = timeout
        self.on_wake = on_wake
        self.repatch = repatch or Backoff(initial=5.0, maximum=30.0)
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
        self._outcome(workload, "started")
        try:
            async with asyncio.timeout(self.timeout):
                current = await self._bring_up(workload, model)
        except TimeoutError:
            self._outcome(workload, "timeout")
            raise GatewayError(
                503,
                f"Model {model} is waking up (workload {workload.key} did not wake within "
                f"{self.timeout:g}s); retry shortly",
                code="model_waking",
                retry_after=max(1.0, min(self.timeout, 30.0)),
            ) from None
        except GatewayError:
            self._outcome(workload, "failed")
            raise
        self._outcome(workload, "ready")
        return current

    def _outcome(self, workload: Workload, outcome: str) -> None:
        if self.on_wake:
            self.on_wake(workload, outcome)

    async def _call_waker(self, workload: Workload, model: str) -> None:
        try:
            await self.waker.wake(workload)
        except Exception as exc:
            log.warning("waking %s failed: %s", workload.key, clip(str(exc)))
            raise GatewayError(
                503, f"Model {model} could not be woken: {exc}", code="wake_failed", retry_after=5.0
            ) from exc

    async def _bring_up(self, workload: Workload, model: str) -> Workload:
        loop = asyncio.get_running_loop()
        repatch = Attempts(self.repatch)
        await self._call_waker(workload, model)
        due = loop.time() + repatch.next_delay()
        seen_running = False
        table = self.source.snapshot()
        while True:
            current = table.lookup(model)
            if current is None or current.key != workload.key:
                raise GatewayError(404, f"No instance found for model {model}", code="model_not_found")
            if current.routable:
                return current
            if current.state == "Running":
                seen_running = True
            elif seen_running or loop.time() >= due:
                log.info("workload %s is %s again while waking; waking it again", current.key, current.state)
                await self._call_waker(current, model)
                seen_running = False
                due = loop.time() + repatch.next_delay()
            try:
                async with asyncio.timeout(max(0.0, due - loop.time())):
                    table = await self.source.wait_changed(table.version)
            except TimeoutError:
                table = self.source.snapshot()

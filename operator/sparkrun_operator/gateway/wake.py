"""Wake-on-request: hold requests for a workload that is not routable yet but will be.

Held: a workload that rests (Sleeping, Stopped, or zero replicas left by the idle policy) and one
that is starting (Running with replicas asked for, no ready endpoint yet: a wake someone else
began, or a fresh rollout). The gateway calls a pluggable :class:`Waker` for a resting workload
(the Kubernetes one sets ``spec.state`` to Running and, from zero, ``spec.replicas``; a starting
one needs no call) and then waits for the routing source to show it routable. Concurrent requests
for the same workload share one wake: at most one ``wake()`` call, one wait. Every request waits
at most ``timeout`` seconds, and so does the shared wake itself: when it runs out, every request
it holds is answered (503 with ``Retry-After``) and the next request starts a fresh wake. A
workload that never becomes ready (an engine that crash-loops) is held to that deadline too.

``Retry-After`` comes from the workload's own measured wakes of the same kind
(``status.scaling.wakeSeconds``, :func:`typical`) less the seconds this wake has run. Without
history of that kind it is a fixed figure: the request that began the wake reaches its own
deadline first and gets ``timeout`` itself; a request that joined the wake later is answered
when the shared wake runs out, with ``min(timeout, 30)``. While it waits, the wake calls the waker again
when the workload went back to resting after it had come up, and also every ``repatch`` back-off
while it stays resting (the patch did not take, or something undid it). A waker that fails
answers every held request at once.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import logging
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from ..plan.wake import Resting
from ..retry import Attempts, Backoff
from .errors import GatewayError, clip, no_instance
from .routing import RoutingSource, Workload

log = logging.getLogger("sparkrun.gateway.wake")


def typical(samples: Sequence[float]) -> float | None:
    """The wake time to expect from the measured ones (oldest first): the median of three or
    more, so one outlier (a first cold start that pulled an image) does not move it; with fewer,
    the latest, which reflects the nodes as they are now. ``None`` without any."""
    if not samples:
        return None
    if len(samples) < 3:
        return float(samples[-1])
    return float(statistics.median(samples))


def retry_after(estimate: float, elapsed: float) -> float:
    """Seconds a client should wait before it asks again: what the wake should still need, at least 1."""
    return float(max(1, math.ceil(estimate - elapsed)))


@dataclass
class _Pending:
    """One shared wake: its task, when it began (loop time) and from where."""

    task: asyncio.Task[Workload]
    started: float
    kind: Resting | None


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
        self._pending: dict[str, _Pending] = {}

    async def ready(self, workload: Workload, model: str) -> Workload:
        """The routable workload serving ``model``; wakes it first if it rests.

        Raises :class:`GatewayError` 503 (with ``Retry-After``) when it is not routable within
        ``timeout``, or when the waker fails; 404 when it stops being servable meanwhile.
        """
        pending = self._pending.get(workload.key)
        if pending is None:
            task = asyncio.create_task(self._wake(workload, model), name=f"wake-{workload.key}")
            pending = _Pending(
                task, asyncio.get_running_loop().time(), workload.resting or workload.wake_from
            )
            self._pending[workload.key] = pending
            task.add_done_callback(functools.partial(self._forget, workload.key))
        try:
            async with asyncio.timeout(self.timeout):
                return await asyncio.shield(pending.task)
        except TimeoutError:
            why = f"workload {workload.key} is {workload.resting or 'starting'}"
            raise self._waking(workload, model, pending, why, fallback=self.timeout) from None

    def _waking(
        self, workload: Workload, model: str, pending: _Pending, why: str, *, fallback: float
    ) -> GatewayError:
        """The 503 of a held request at its deadline: ``Retry-After`` from the wake history of the
        kind of this wake, else ``fallback`` seconds (at least 1)."""
        current = self.source.snapshot().lookup(model)
        if current is None or current.key != workload.key:
            current = workload
        kind = pending.kind or current.wake_from
        estimate = typical(current.wake_history.of(kind)) if kind is not None else None
        if estimate is None:
            return GatewayError(
                503,
                f"Model {model} is waking up ({why}); retry shortly",
                code="model_waking",
                retry_after=max(1.0, fallback),
            )
        elapsed = asyncio.get_running_loop().time() - pending.started
        if current.wake_since is not None:
            since = (dt.datetime.now(dt.UTC) - current.wake_since).total_seconds()
            elapsed = max(elapsed, min(since, 86_400.0))
        wait = retry_after(estimate, elapsed)
        return GatewayError(
            503,
            f"Model {model} is waking up ({why}); a wake from {kind} takes about {estimate:.0f}s, "
            f"{elapsed:.0f}s so far; retry in {wait:.0f}s",
            code="model_waking",
            retry_after=wait,
        )

    def _forget(self, key: str, task: asyncio.Task[Workload]) -> None:
        pending = self._pending.get(key)
        if pending is not None and pending.task is task:
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
            pending = self._pending.get(workload.key)
            if pending is None:  # NB: not reached: the entry goes only once this task is done
                raise
            why = f"workload {workload.key} did not wake within {self.timeout:g}s"
            raise self._waking(workload, model, pending, why, fallback=min(self.timeout, 30.0)) from None
        except GatewayError:
            self._outcome(workload, "failed")
            raise
        self._outcome(workload, "ready")
        return current

    def _outcome(self, workload: Workload, outcome: str) -> None:
        if self.on_wake:
            self.on_wake(workload, outcome)

    async def _call_waker(self, workload: Workload, model: str) -> None:
        self._outcome(workload, "patched")
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
        if workload.resting is not None:
            await self._call_waker(workload, model)
        due = loop.time() + repatch.next_delay()
        came_up = False
        table = self.source.snapshot()
        while True:
            current = table.lookup(model)
            if current is None or current.key != workload.key:
                raise no_instance(model)
            if current.routable:
                return current
            if current.resting is None:
                if current.replicas == 0:  # NB: the user's own replicas: 0 meanwhile, not a wake
                    raise no_instance(model)
                came_up = True
            elif came_up or loop.time() >= due:
                log.info(
                    "workload %s is %s again while waking; waking it again", current.key, current.resting
                )
                await self._call_waker(current, model)
                came_up = False
                due = loop.time() + repatch.next_delay()
            try:
                async with asyncio.timeout(max(0.0, due - loop.time())):
                    table = await self.source.wait_changed(table.version)
            except TimeoutError:
                table = self.source.snapshot()

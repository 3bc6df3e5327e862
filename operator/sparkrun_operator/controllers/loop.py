"""The body of a per-object reconciling daemon.

:func:`run_loop` waits for a poke (or the drift interval, or a requested requeue), coalesces
bursts, runs one pass (a resource controller's :func:`.reconciler.run_pass`), and repeats until stopped;
:func:`reconcile_daemon` wraps it for kopf.
Beside it, the status lane (:mod:`.lane`) writes status-only changes (readiness) without
waiting behind full passes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Hashable, Mapping
from typing import Any

import kopf

from sparkrun_operator.controllers.memo import Memo
from sparkrun_operator.k8s import errors
from sparkrun_operator.retry import Attempts, Backoff

#: When kopf restarts a loop whose pass met an unavailable apiserver: jittered, so that every
#: object's loop does not come back at the same instant after an outage.
RETRY_UNAVAILABLE = Backoff(initial=15.0, maximum=15.0, jitter=0.3)

#: A pass that met a conflict (its view of the object was stale: kopf's own finalizer, a user's
#: edit) runs again soon, in the same loop, once the watch has had a moment to deliver the newer
#: object; consecutive conflicts back off to a few seconds.
RETRY_CONFLICT = Backoff(initial=0.25, maximum=5.0, jitter=0.5)

Pass = Callable[[], Awaitable[float | None]]


async def run_loop(
    ctx: Memo,
    *,
    key: Hashable,
    kind: str,
    stopped: kopf.DaemonStopped,
    logger: logging.Logger | logging.LoggerAdapter[logging.Logger],
    reconcile: Pass,
    precheck: Callable[[], float | None] | None = None,
) -> None:
    """Reconcile ``key`` whenever poked, at least every drift interval, until ``stopped``.

    ``reconcile`` returns seconds after which to look again regardless of events (or ``None``).
    ``precheck`` (cheap, no I/O) returns seconds to wait instead of a pass, or ``None`` to pass.
    A conflict requeues the pass after :data:`RETRY_CONFLICT` (growing while conflicts repeat);
    API unavailability becomes ``kopf.TemporaryError``: kopf restarts the daemon after the
    delay, with its own backoff bookkeeping.
    """
    trigger = ctx.triggers.register(key)
    config = ctx.config
    conflicts = Attempts(RETRY_CONFLICT)
    requeue: float | None = None
    last_pass = -float("inf")
    loop = asyncio.get_running_loop()
    try:
        while not stopped:
            timeout = ctx.jitter(config.drift_seconds)
            if requeue is not None:
                timeout = min(timeout, requeue)
            await poked(trigger, stopped, timeout)
            if stopped:
                return
            # NB: the first event after a quiet spell is handled at once; passes that follow
            # each other keep at least debounce_seconds apart, so a burst of child events
            # coalesces into few passes.
            spacing = config.debounce_seconds - (loop.time() - last_pass)
            if spacing > 0:
                await asyncio.sleep(spacing)
            # NB: checked outside the gate: a pass that could not act yet takes no slot.
            wait = precheck() if precheck is not None else None
            if wait is not None:
                trigger.clear()
                requeue = wait
                continue
            async with ctx.gate:
                # NB: cleared once a slot is ours: pokes while queued for one need no extra pass.
                trigger.clear()
                with ctx.metrics.reconcile_seconds.labels(kind=kind).time():
                    try:
                        requeue = await reconcile()
                        conflicts.reset()
                    except errors.KubeConflict as error:
                        ctx.metrics.reconcile_errors.labels(kind=kind, error="Conflict").inc()
                        requeue = conflicts.next_delay()
                        logger.debug("conflict, again in %.2f s: %s", requeue, error)
                    except errors.KubeUnavailable as error:
                        ctx.metrics.reconcile_errors.labels(kind=kind, error="Unavailable").inc()
                        raise kopf.TemporaryError(str(error), delay=RETRY_UNAVAILABLE.delay(0)) from error
                    except errors.KubeError as error:
                        ctx.metrics.reconcile_errors.labels(kind=kind, error=type(error).__name__).inc()
                        logger.error("reconcile failed: %s", error)
                        requeue = 30.0
                    finally:
                        last_pass = loop.time()
    finally:
        ctx.triggers.unregister(key)


async def poked(trigger: asyncio.Event, stopped: kopf.DaemonStopped, patience: float | None) -> None:
    """Until ``trigger`` is set, ``stopped``, or ``patience`` seconds (``None``: no limit) pass."""
    waiter = asyncio.ensure_future(trigger.wait())
    stopper = asyncio.ensure_future(stopped.wait())
    try:
        await asyncio.wait({waiter, stopper}, timeout=patience, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (waiter, stopper):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def reconcile_daemon(
    registry: kopf.OperatorRegistry,
    resource: tuple[str, str, str],
    *,
    handler_id: str,
    kind: str,
    key: Callable[[str, str], Hashable],
    reconcile: Callable[[Memo, Mapping[str, Any]], Awaitable[float | None]],
) -> None:
    """Register one kopf daemon per object of ``resource`` that runs :func:`run_loop` over
    ``reconcile(ctx, body)``: the controllers whose pass needs nothing but the object
    (InferenceBenchmark, ModelCache; the workload and cluster daemons add indexes and lanes)."""

    @kopf.daemon(*resource, id=handler_id, cancellation_timeout=10.0, registry=registry)
    async def reconcile_each(
        *,
        name: str,
        namespace: str | None,
        body: kopf.Body,
        memo: Any,
        stopped: kopf.DaemonStopped,
        logger: logging.Logger | logging.LoggerAdapter[Any],
        **_: Any,
    ) -> None:
        ctx: Memo = memo.ctx

        async def one_pass() -> float | None:
            return await reconcile(ctx, body)

        await run_loop(
            ctx, key=key(str(namespace), name), kind=kind, stopped=stopped, logger=logger, reconcile=one_pass
        )

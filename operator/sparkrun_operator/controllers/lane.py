"""The status lane (ADR 0015, its fast path ADR 0030): status-only writes beside the full passes.

- its writes take a slot of the write budget both lanes share (``ctx.write_gate``, a
  :class:`~.gate.PriorityGate`): a readiness change goes before the full lane's actions, a
  progress report after them; a queued write that turns urgent moves up.
- :class:`Pending`: what a status-only planning step found to write, and whether it is urgent.
- :func:`run_status_lane`: per object, whenever poked: plan at once (pure, no slot), write
  nothing when nothing changed; write an urgent status (readiness) at once, first in the gate;
  let a progress-only status settle for ``OperatorConfig.status_settle_seconds`` so that the
  pod's next steps coalesce into one write; plan again when the slot is ours, so the newest
  observation is what is written.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any

import kopf

from sparkrun_operator.controllers.gate import PROGRESS, URGENT, Ticket
from sparkrun_operator.controllers.loop import poked
from sparkrun_operator.controllers.memo import Memo
from sparkrun_operator.k8s import errors


@dataclass(frozen=True)
class Pending:
    """A status to write: ``write()`` sends it (whether it wrote); ``urgent`` when it changes
    what users wait for (readiness), so it is neither delayed nor queued behind progress."""

    urgent: bool
    write: Callable[[], Awaitable[bool]]


Prepare = Callable[[], Pending | None]


async def run_status_lane(
    ctx: Memo,
    *,
    key: Hashable,
    kind: str,
    stopped: kopf.DaemonStopped,
    logger: logging.Logger | logging.LoggerAdapter[logging.Logger],
    prepare: Prepare,
) -> None:
    """Write the status ``prepare`` (a pure, status-only planning step) finds, whenever poked.

    Writes are bounded by ``ctx.write_gate`` (never ``ctx.gate``: full passes queued or
    running for any object do not delay them; their writes queue behind urgent ones). Errors
    are logged, never raised: the full lane repairs and retries.
    """
    trigger = ctx.triggers.register(key)
    trigger.clear()  # the full lane's first pass writes the first status
    trigger.taken()
    settle = ctx.config.status_settle_seconds
    try:
        while not stopped:
            await poked(trigger, stopped, None)
            if stopped:
                return
            trigger.clear()
            pending = _guarded(prepare, logger)
            fresh = True  # planned just now, nothing awaited since
            if pending is not None and not pending.urgent:
                pending = await _settled(trigger, stopped, settle, prepare, pending, logger)
                fresh = False
            wrote = None
            if pending is not None and not stopped:
                wrote = await _write(ctx, kind, trigger, stopped, prepare, pending, logger, fresh=fresh)
            if wrote is not None:
                ctx.metrics.status_passes.labels(kind=kind, wrote=str(wrote).lower()).inc()
            # NB: from the first poke this write took in (a child event) to the status written;
            # a poke that came after its last planning is the next write's
            poked_at = trigger.taken()
            if wrote and pending is not None and poked_at is not None:
                ctx.metrics.status_lane_seconds.labels(
                    kind=kind, stage="poked", urgent=str(pending.urgent).lower()
                ).observe(time.monotonic() - poked_at)
    finally:
        ctx.triggers.unregister(key)


async def _write(
    ctx: Memo,
    kind: str,
    trigger: asyncio.Event,
    stopped: kopf.DaemonStopped,
    prepare: Prepare,
    pending: Pending,
    logger: logging.Logger | logging.LoggerAdapter[logging.Logger],
    *,
    fresh: bool = False,
) -> bool | None:
    """Write in a slot of ``ctx.write_gate``; whether it wrote (``None``: failed or moot).
    ``fresh``: ``pending`` was planned without awaiting anything since."""
    loop = asyncio.get_running_loop()
    queued = loop.time()
    ticket = ctx.write_gate.enqueue(URGENT if pending.urgent else PROGRESS)
    at_once = fresh and ticket.granted
    try:
        if not await _granted(ticket, trigger, stopped, prepare, logger):
            return None
        started = loop.time()
        urgent = str(ticket.priority == URGENT).lower()
        ctx.metrics.status_lane_seconds.labels(kind=kind, stage="queued", urgent=urgent).observe(
            started - queued
        )
        # NB: planned again with the slot ours: the newest observation is written, and states
        # that came and went while queued are never written at all. A fresh plan whose slot was
        # granted at once, with no poke since, is that newest observation: written as it is.
        latest = pending if at_once and not trigger.is_set() else _guarded(prepare, logger)
        trigger.clear()
        if latest is None:
            return None
        try:
            return await latest.write()
        except errors.KubeError as error:
            logger.debug("status write failed: %s", error)
            return None
        except Exception:  # a bug here must not stop the full lane
            logger.exception("status write failed")
            return None
        finally:
            elapsed = loop.time() - started
            ctx.metrics.status_lane_seconds.labels(kind=kind, stage="write", urgent=urgent).observe(elapsed)
    finally:
        ticket.close()


async def _granted(
    ticket: Ticket,
    trigger: asyncio.Event,
    stopped: kopf.DaemonStopped,
    prepare: Prepare,
    logger: logging.Logger | logging.LoggerAdapter[logging.Logger],
) -> bool:
    """Wait for ``ticket``'s slot while pokes plan again: a status that turned urgent moves the
    ticket up the queue; one with nothing left to write gives it up (``False``)."""
    while not ticket.granted:
        waiter = asyncio.ensure_future(trigger.wait())
        stopper = asyncio.ensure_future(stopped.wait())
        try:
            waits: set[asyncio.Future[Any]] = {ticket.future, waiter, stopper}
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (waiter, stopper):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if stopped:
            return False
        if trigger.is_set() and not ticket.granted:
            trigger.clear()
            latest = _guarded(prepare, logger)
            if latest is None:
                return False
            if latest.urgent:
                ticket.promote(URGENT)
    return True


async def _settled(
    trigger: asyncio.Event,
    stopped: kopf.DaemonStopped,
    settle: float,
    prepare: Prepare,
    pending: Pending,
    logger: logging.Logger | logging.LoggerAdapter[logging.Logger],
) -> Pending | None:
    """``pending`` after up to ``settle`` seconds in which each poke plans again: ends early
    when the status became urgent, or has nothing left to write."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + settle
    current: Pending | None = pending
    while (remaining := deadline - loop.time()) > 0:
        await poked(trigger, stopped, remaining)
        if stopped:
            return None
        if trigger.is_set():
            trigger.clear()
            current = _guarded(prepare, logger)
            if current is None or current.urgent:
                break
    return current


def _guarded(
    prepare: Prepare, logger: logging.Logger | logging.LoggerAdapter[logging.Logger]
) -> Pending | None:
    try:
        return prepare()
    except Exception:  # a bug here must not stop the full lane
        logger.exception("status planning failed")
        return None

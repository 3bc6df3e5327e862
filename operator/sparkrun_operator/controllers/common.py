"""Pieces every controller uses: the one status write, engine calls, the reconcile loop.

- :func:`write_status`: one merge patch of the status subresource, skipped when nothing
  changed (idle objects cost no API writes); top-level fields that disappeared are nulled.
- :class:`Engine`: the few engine endpoints the operator calls (``/is_sleeping``, ``/sleep``,
  ``/wake_up``); every answer is read up to a cap and within a deadline (a tenant's engine may
  answer anything).
- :func:`run_loop`: the body of a per-object reconciling daemon: wait for a poke (or the drift
  interval, or a requested requeue), coalesce bursts, run one pass, repeat until stopped.
- beside it, the status lane (:mod:`.lane`) writes status-only changes (readiness) without
  waiting behind full passes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Hashable, Mapping
from typing import Any, TypeVar

import httpx
import kopf
from pydantic import BaseModel

from sparkrun_operator.controllers.context import Context
from sparkrun_operator.k8s import errors
from sparkrun_operator.k8s.client import Resource
from sparkrun_operator.retry import Attempts, Backoff

#: When kopf restarts a loop whose pass met an unavailable apiserver: jittered, so that every
#: object's loop does not come back at the same instant after an outage.
RETRY_UNAVAILABLE = Backoff(initial=15.0, maximum=15.0, jitter=0.3)
#: A pass that met a conflict (its view of the object was stale: kopf's own finalizer, a user's
#: edit) runs again soon, in the same loop, once the watch has had a moment to deliver the newer
#: object; consecutive conflicts back off to a few seconds.
RETRY_CONFLICT = Backoff(initial=0.25, maximum=5.0, jitter=0.5)


#: ``GET /is_sleeping``: the most of the answer read (vLLM's ``{"is_sleeping": false}`` is 22
#: bytes), and the deadline of the whole probe, connecting included (a pass waits for it).
IS_SLEEPING_MAX_BYTES = 4 * 1024
IS_SLEEPING_SECONDS = 2.0
#: ``POST /sleep``, ``POST /wake_up``: the most of the answer read (only its status and an
#: excerpt for the log matter); their deadline is the operator's engine timeout (10 s).
ENGINE_ANSWER_MAX_BYTES = 4 * 1024

log = logging.getLogger("sparkrun.operator.engine")

S = TypeVar("S", bound=BaseModel)


def current_status(body: Mapping[str, Any], model: type[S]) -> S:
    """The object's status as ``model``, or a fresh one when it does not parse (a hand-edited
    status: the planner starts over rather than failing the pass)."""
    try:
        return model.model_validate(body.get("status") or {})
    except ValueError:
        return model()


def status_patch(current: Mapping[str, Any] | None, desired: BaseModel) -> dict[str, Any] | None:
    """The merge patch turning ``current`` (the raw status) into ``desired``; ``None`` if equal.

    Compared after normalising ``current`` through the same model, so formatting differences
    (timestamps, omitted defaults) never cause a write.
    """
    wire = desired.model_dump(by_alias=True, exclude_none=True, mode="json")
    normalised: dict[str, Any] | None
    try:
        normalised = (
            type(desired)
            .model_validate(dict(current))
            .model_dump(by_alias=True, exclude_none=True, mode="json")
            if current
            else {}
        )
    except ValueError:
        normalised = None
    if normalised == wire:
        return None
    patch: dict[str, Any] = dict(wire)
    for key in current or {}:
        if key not in wire:
            patch[key] = None
    return patch


async def write_status(
    ctx: Context,
    *,
    resource: Resource,
    name: str,
    namespace: str | None,
    current: Mapping[str, Any] | None,
    desired: BaseModel,
) -> bool:
    """Write ``desired`` as the status when it differs from ``current``; whether it wrote."""
    patch = status_patch(current, desired)
    if patch is None:
        return False
    try:
        await ctx.kube.merge_patch(resource, name, {"status": patch}, namespace, subresource="status")
    except errors.NotFound:
        return False  # deleted meanwhile: nothing to report on
    return True


class StatusMemory:
    """The last status one object's loop wrote, so that a pass running before the watch has
    delivered that write does not write the same status again.

    With ``version`` (the ``resourceVersion`` of the object the pass looked at), a repeat is
    only skipped while the object is still the one the last write was planned from: once the
    watch delivered anything newer (our write, or someone else's), ``current`` is compared.
    """

    def __init__(self, *, patience: float = 10.0) -> None:
        self.patience = patience
        self.wire: dict[str, Any] | None = None
        self.at = 0.0
        self.version: str | None = None

    async def write(
        self,
        ctx: Context,
        *,
        resource: Resource,
        name: str,
        namespace: str | None,
        current: Mapping[str, Any] | None,
        desired: BaseModel,
        version: str | None = None,
    ) -> bool:
        """Like :func:`write_status`, skipping a repeat of a write younger than ``patience``."""
        wire = desired.model_dump(by_alias=True, exclude_none=True, mode="json")
        now = asyncio.get_running_loop().time()
        if wire == self.wire and now - self.at < self.patience and version == self.version:
            return False
        wrote = await write_status(
            ctx, resource=resource, name=name, namespace=namespace, current=current, desired=desired
        )
        if wrote:
            self.wire, self.at, self.version = wire, now, version
        return wrote


class EngineAnswerRefused(Exception):
    """An engine answer the operator does not read: over its cap, not complete within its
    deadline, or compressed although ``identity`` was asked for."""


async def read_bounded(
    http: httpx.AsyncClient, method: str, url: str, *, limit: int, deadline: float
) -> tuple[int, bytes]:
    """``method url``: the status and body, at most ``limit`` bytes, all within ``deadline``
    seconds from connecting to the last byte (httpx's own timeouts are per read: a body that
    drips a byte at a time would never time out). Raises :class:`EngineAnswerRefused` past a
    bound (the connection is closed, the rest never read) and ``httpx.HTTPError`` when the
    exchange fails."""
    try:
        async with (
            asyncio.timeout(deadline),
            http.stream(method, url, headers={"accept-encoding": "identity"}, timeout=deadline) as response,
        ):
            encoding = response.headers.get("content-encoding", "identity").strip().lower()
            if encoding != "identity":
                raise EngineAnswerRefused(f"answered with content-encoding {encoding[:40]!r}")
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > limit:
                raise EngineAnswerRefused(f"answer of {int(declared)} bytes, over {limit}")
            body = bytearray()
            async for part in response.aiter_raw():
                body += part
                if len(body) > limit:
                    raise EngineAnswerRefused(f"answer larger than {limit} bytes")
            return response.status_code, bytes(body)
    except TimeoutError:
        raise EngineAnswerRefused(f"no complete answer within {deadline:g} s") from None


class Engine:
    """Calls to a leader's vLLM server (dev-mode endpoints included), each bounded in size and
    time (:data:`IS_SLEEPING_MAX_BYTES`, :data:`IS_SLEEPING_SECONDS`,
    :data:`ENGINE_ANSWER_MAX_BYTES`, ``timeout``)."""

    def __init__(self, http: httpx.AsyncClient, *, timeout: float) -> None:
        self.http = http
        self.timeout = timeout

    async def is_sleeping(self, url: str) -> bool | None:
        """``GET /is_sleeping``; ``None`` when the engine cannot say (down, no sleep mode, an
        answer over its bounds or not ``{"is_sleeping": <bool>}``)."""
        deadline = min(self.timeout, IS_SLEEPING_SECONDS)
        try:
            status, body = await read_bounded(
                self.http, "GET", f"{url}/is_sleeping", limit=IS_SLEEPING_MAX_BYTES, deadline=deadline
            )
        except EngineAnswerRefused as refused:
            log.warning("engine %s: sleep state unknown: /is_sleeping %s", url, refused)
            return None
        except httpx.HTTPError as error:
            log.debug("engine %s: sleep state unknown: %s: %s", url, type(error).__name__, error)
            return None
        if status != 200:
            return None
        try:
            value = json.loads(body).get("is_sleeping")
        except (ValueError, AttributeError, RecursionError):
            return None
        return value if isinstance(value, bool) else None

    async def call(self, url: str, action: str) -> str | None:
        """``POST /sleep?level=1`` or ``POST /wake_up``; an error message, or ``None`` on success."""
        path = "/sleep?level=1" if action == "sleep" else "/wake_up"
        try:
            status, body = await read_bounded(
                self.http, "POST", f"{url}{path}", limit=ENGINE_ANSWER_MAX_BYTES, deadline=self.timeout
            )
        except EngineAnswerRefused as refused:
            return f"{action} on {url}: {refused}"
        except httpx.HTTPError as error:
            return f"{action} on {url} failed: {type(error).__name__}: {error}"
        if status >= 300:
            excerpt = body[:200].decode("utf-8", "replace")
            return f"{action} on {url} answered {status}: {excerpt!r}"
        return None


Pass = Callable[[], Awaitable[float | None]]


async def run_loop(
    ctx: Context,
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
                    except errors.Conflict as error:
                        ctx.metrics.reconcile_errors.labels(kind=kind, error="Conflict").inc()
                        requeue = conflicts.next_delay()
                        logger.debug("conflict, again in %.2f s: %s", requeue, error)
                    except errors.Unavailable as error:
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
    reconcile: Callable[[Context, Mapping[str, Any]], Awaitable[float | None]],
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
        ctx: Context = memo.ctx

        async def one_pass() -> float | None:
            return await reconcile(ctx, body)

        await run_loop(
            ctx, key=key(str(namespace), name), kind=kind, stopped=stopped, logger=logger, reconcile=one_pass
        )

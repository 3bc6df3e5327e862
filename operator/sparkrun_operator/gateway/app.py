"""The gateway ASGI application: dispatch and lifespan; the work is in the services it builds.

Request path (pure ASGI, no middleware stack), one way: the dispatch finds the route
(:mod:`.routes`), admits the request (:mod:`.admission`: who calls, in-flight limits, the body
read within its size, time and buffered-bytes budget), registers it for cancellation (:mod:`.cancellation`)
and calls the route's handler with the request (:class:`~.request.Ctx`) and the gateway's
:class:`~.services.Services`. A handler decodes and validates the body, resolves the model
(:mod:`.admission`: the caller's rights, capability, wake), connects to a backend (:mod:`.connector`) and
relays the answer (OpenAI byte for byte, :mod:`.openai_api` and :mod:`.splice`; Anthropic and
Ollama translated, :mod:`.translated`), counting it (:mod:`.accounting`). Handlers never import
this module; ``lint-imports`` enforces the direction (``pyproject.toml``, the gateway's layers).

Bounds (``GatewaySettings``, :mod:`.limits`): requests in flight in all and per key, the request
head's size, the bodies buffered by all requests together, a total deadline per request.

A client disconnect, or ``POST /v1/cancel/{id}``, cancels the request's task, which closes the
upstream response (and with it the upstream connection, which makes vLLM abort the request).
Every response carries ``x-request-id``; it is also the command id that ``/v1/cancel`` takes,
from the caller that sent the request only. An id the client chose reaches the engine with a new
one appended (engines key requests and aborts by it, and two callers may choose one id).
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
import os
import re
import time
from typing import TYPE_CHECKING

from . import routes
from .accounting import Accounting
from .admission import Admission, Held
from .auth import KeySource, digest, extract_key
from .cancellation import Cancellation, Slot
from .config import GatewaySettings
from .connector import Connector
from .errors import Family, GatewayError
from .metrics import GatewayMetrics
from .request import Cancelled, Ctx, Message, Receive, Scope, Send
from .routing import RoutingSource
from .services import Services
from .wake import NoopWaker, WakeCoordinator, Waker

if TYPE_CHECKING:  # NB: only --auth=kubernetes loads it (and with it the Kubernetes client)
    from .identity import KubeIdentity

log = logging.getLogger("sparkrun.gateway")

_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


class _RequestIds:
    """New request ids: 32 hex digits, the keyed BLAKE2b (key: 32 random bytes drawn once per
    process) of a per-process counter. Distinct within a process (a counter through a keyed
    hash: a collision is as likely as for ``uuid4``) and across processes (another key), and not
    guessable from ids seen before (no prefix, no step: predicting one means knowing the key),
    without a system call for randomness on each request (one hash, about a microsecond).
    ``/v1/cancel`` is scoped to its caller as well (ADR 0019), so a guessed id alone cancels
    nothing."""

    def __init__(self) -> None:
        self._key = os.urandom(32)
        self._count = itertools.count()

    def __call__(self) -> str:
        count = next(self._count).to_bytes(16, "little")
        return hashlib.blake2b(count, digest_size=16, key=self._key).hexdigest()


_new_request_id = _RequestIds()


class Gateway:
    """The ASGI application. Construct, then serve it with any ASGI server (lifespan "on")."""

    def __init__(
        self,
        source: RoutingSource,
        *,
        settings: GatewaySettings | None = None,
        waker: Waker | None = None,
        keys: KeySource | None = None,
        metrics: GatewayMetrics | None = None,
        identity: KubeIdentity | None = None,
    ) -> None:
        self.source = source
        self.settings = settings = settings or GatewaySettings()
        self.keys = keys
        self.identity = identity
        self.metrics = metrics = metrics or GatewayMetrics()
        accounting = Accounting(metrics)
        wakes = WakeCoordinator(
            source, waker or NoopWaker(), timeout=settings.wake_timeout, on_wake=accounting.wake
        )
        self.services = Services(
            settings=settings,
            admission=Admission(settings, source, keys, wakes, identity),
            connector=Connector(settings, metrics),
            accounting=accounting,
            cancellation=Cancellation(),
        )
        self._routes = routes.table()
        self._started = False

    # -- lifecycle --------------------------------------------------------------------------

    async def startup(self) -> None:
        """Open the upstream pool and start the routing source and key source (idempotent)."""
        if self._started:
            return
        self.services.connector.open()
        await self.source.start()
        start_keys = getattr(self.keys, "start", None)  # watch-fed key sources (Secrets)
        if start_keys is not None:
            await start_keys()
        if self.identity is not None:
            await self.identity.start()
        self._started = True

    async def shutdown(self) -> None:
        if not self._started:
            return
        self._started = False
        await self.source.close()
        close_keys = getattr(self.keys, "close", None)
        if close_keys is not None:
            await close_keys()
        await self.services.connector.close()

    # -- ASGI -------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.startup()
                except Exception as exc:
                    log.exception("gateway startup failed")
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope["headers"])
        given = headers.get(b"x-request-id", b"").decode("latin-1")
        # NB: a client's own id is echoed, but engines get it made unique (Ctx.upstream_rid).
        chosen = _REQUEST_ID.fullmatch(given) is not None
        rid = given if chosen else _new_request_id()
        path: str = scope["path"]
        method: str = scope["method"]
        route = self._routes.get((method, path))
        family: Family = "ollama" if path.startswith(("/api/", "/ollama")) else "openai"
        if route is None and method == "POST" and path.startswith("/v1/cancel/"):
            route = routes.CANCEL
        if route is not None:
            family = route.family
        ctx = Ctx(
            scope, receive, send, rid, family, route.name if route else "none", time.perf_counter(), headers
        )
        if chosen:
            ctx.upstream_rid = f"{rid}.{_new_request_id()}"
        if route is None:
            allowed = any(p == path for (_, p) in self._routes)
            exc = (
                GatewayError(405, "Method Not Allowed")
                if allowed
                else GatewayError(404, f"Not Found: {path}")
            )
            await ctx.error(exc)
            return
        services = self.services
        admission = services.admission
        ctx.task = asyncio.current_task()
        if self.keys is not None:
            ctx.api_key = extract_key(headers) or None
            ctx.caller = digest(ctx.api_key).hex() if ctx.api_key else "-"
        elif self.identity is not None:
            ctx.api_key = extract_key(headers) or None
        watcher: asyncio.Future[Message] | None = None
        slot: Slot | None = None
        counted: tuple[Held] | None = None
        try:
            if route.inference:
                # NB: who calls first: the in-flight cap and the cancel registry are per caller.
                await admission.identify(ctx)
                counted = (admission.enter(ctx),)
            if route.reads_body:
                await admission.read_body(ctx)
            if route.inference:
                slot = services.cancellation.track(ctx)
                watcher = ctx.watch_disconnect()
            await route.handler(services, ctx)
        except GatewayError as exc:
            if not ctx.started:
                await ctx.error(exc)
            elif not ctx.finished:
                await ctx.body_part(b"", more=False)
        except Cancelled:
            pass
        except asyncio.CancelledError:
            # Ours (a disconnect or /v1/cancel) ends this request only; anything else propagates.
            if ctx.cancel_reason is None or ctx.task is None:
                raise
            ctx.task.uncancel()
            if ctx.cancel_reason == "cancelled" and not ctx.finished:
                await ctx.cancelled_response()
            elif ctx.cancel_reason == "deadline" and not ctx.finished:
                await ctx.deadline_response()
        finally:
            if watcher is not None:
                watcher.cancel()
            if ctx.deadline is not None:
                ctx.deadline.cancel()
            if counted is not None:
                admission.leave(counted[0])
            admission.release_body(ctx)
            services.connector.release(ctx)
            if slot is not None:
                services.cancellation.forget(slot, ctx)
            services.accounting.finished(ctx)

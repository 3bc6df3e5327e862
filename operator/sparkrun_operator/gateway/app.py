"""The gateway ASGI application: dispatch, admission and forwarding to a backend.

Request path (pure ASGI, no middleware stack):

1. read the body (bounded by size and time), decode the JSON once with the C decoder to read
   ``model``/``stream`` and validate the few fields seed 004 makes the gateway refuse;
2. check the API key (when keys are configured) and the model's capability;
3. resolve the model in the routing snapshot; hold the request while a Sleeping/Stopped workload
   wakes;
4. connect to a backend (least outstanding / prefix affinity; another backend on connect errors);
5. relay: OpenAI responses pass through byte for byte (streams are cut at event boundaries so
   an in-band error follows a complete event, unless an event is too large to hold); Anthropic
   and Ollama responses are translated. A dead upstream ends every stream with an in-band error
   in the client's protocol.

Bounds (``GatewaySettings``, :mod:`.limits`): requests in flight in all and per key, the request
head's size, the bodies buffered by all requests together, a total deadline per request.

A client disconnect, or ``POST /v1/cancel/{id}``, cancels the request's task, which closes the
upstream response (and with it the upstream connection, which makes vLLM abort the request).
Every response carries ``x-request-id``; it is also the command id that ``/v1/cancel`` takes.

The route table is :mod:`.routes`; the handlers live in :mod:`.openai_api` (OpenAI routes and
their byte-for-byte relay), :mod:`.translated` (Anthropic Messages and Ollama chat/generate) and
:mod:`.listing` (model listings, cancel, metrics, health); :mod:`.context` holds the per-request
:class:`~.context.Ctx` (body reading, responses, disconnect watch) they all share.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import re
import time
from typing import Any

from sparkrun_operator.plan.served import TEXT_GENERATION

from . import routes
from .auth import Grant, KeySource, digest, extract_key
from .balancer import Backend, Balancer
from .config import GatewaySettings
from .context import Cancelled, Ctx, Message, Receive, Scope, Send
from .errors import Family, GatewayError, bad_request, lacks_capability, no_instance
from .limits import ByteBudget, InFlight
from .metrics import GatewayMetrics
from .routing import RoutingSource, Workload
from .upstream import ConnectFailed, UpstreamError, UpstreamPool, UpstreamResponse, UpstreamTimeout
from .wake import NoopWaker, WakeCoordinator, Waker

log = logging.getLogger("sparkrun.gateway")

_USAGE_IN = re.compile(rb'"(?:prompt_tokens|input_tokens)"\s*:\s*(\d+)')
_USAGE_OUT = re.compile(rb'"(?:completion_tokens|output_tokens)"\s*:\s*(\d+)')
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


class _RequestIds:
    """New request ids: 32 hex digits, a random prefix per process and a counter, so that no two
    requests of any process of a gateway share one (as ``uuid4().hex`` would, but without a
    system call for randomness on every request). Ids are no secret: ``/v1/cancel`` is scoped
    to its caller (ADR 0019)."""

    def __init__(self) -> None:
        self._prefix = os.urandom(8).hex()
        self._count = itertools.count()

    def __call__(self) -> str:
        return f"{self._prefix}{next(self._count) & 0xFFFFFFFFFFFFFFFF:016x}"


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
    ) -> None:
        self.source = source
        self.settings = settings or GatewaySettings()
        self.keys = keys
        self.metrics = metrics or GatewayMetrics()
        self.balancer = Balancer(
            eject_base=self.settings.eject_base,
            eject_max=self.settings.eject_max,
            consecutive=self.settings.consecutive_failures,
            max_ejected_percent=self.settings.max_ejected_percent,
        )
        self.wakes = WakeCoordinator(
            source, waker or NoopWaker(), timeout=self.settings.wake_timeout, on_wake=self._on_wake
        )
        self.in_flight = InFlight(self.settings.max_in_flight, self.settings.max_in_flight_per_key)
        self.bodies = ByteBudget(self.settings.max_buffered_body_bytes)
        self._pool: UpstreamPool | None = None
        #: In-flight requests by (caller, request id): ids are per caller (see :meth:`principal`).
        self._inflight: dict[tuple[str, str], Ctx] = {}
        self._routes = routes.table()
        self._started = False

    # -- lifecycle --------------------------------------------------------------------------

    async def startup(self) -> None:
        """Open the upstream client and start the routing source (idempotent)."""
        if self._started:
            return
        self._pool = UpstreamPool()
        await self.source.start()
        start_keys = getattr(self.keys, "start", None)  # watch-fed key sources (Secrets)
        if start_keys is not None:
            await start_keys()
        self._started = True

    async def shutdown(self) -> None:
        if not self._started:
            return
        self._started = False
        await self.source.close()
        close_keys = getattr(self.keys, "close", None)
        if close_keys is not None:
            await close_keys()
        if self._pool is not None:
            await self._pool.aclose()

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
        rid = given if _REQUEST_ID.fullmatch(given) else _new_request_id()
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
        if route is None:
            allowed = any(p == path for (_, p) in self._routes)
            exc = (
                GatewayError(405, "Method Not Allowed")
                if allowed
                else GatewayError(404, f"Not Found: {path}")
            )
            await ctx.error(exc)
            return
        ctx.task = asyncio.current_task()
        if self.keys is not None:
            ctx.api_key = extract_key(headers) or None
            ctx.caller = digest(ctx.api_key).hex() if ctx.api_key else "-"
        watcher: asyncio.Future[Message] | None = None
        slot: tuple[str, str] | None = None
        counted: tuple[str | None] | None = None
        try:
            if route.inference:
                per_key = ctx.caller if ctx.api_key else None
                self.in_flight.enter(per_key)
                counted = (per_key,)
            if route.reads_body:
                ctx.body = await ctx.read_body(self.settings, self.bodies)
            if route.inference:
                slot = (ctx.caller, rid)
                self._inflight[slot] = ctx
                watcher = ctx.watch_disconnect()
            await route.handler(self, ctx)
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
                self.in_flight.leave(counted[0])
            if ctx.reserved:
                self.bodies.release(ctx.reserved)
            self.release(ctx)
            if slot is not None and self._inflight.get(slot) is ctx:
                del self._inflight[slot]
            if route.name not in {"metrics", "health"}:
                self.metrics.requests.labels(ctx.model_label, route.name, str(ctx.status)).inc()
                self.metrics.duration.labels(ctx.model_label, route.name).observe(
                    time.perf_counter() - ctx.start
                )

    def cancel(self, caller: str, command_id: str) -> bool:
        """Cancel ``caller``'s in-flight request ``command_id``; False when it has none."""
        target = self._inflight.get((caller, command_id))
        if target is None or target.finished or target.task is None or target.cancel_reason is not None:
            return False
        target.cancel_reason = "cancelled"
        target.task.cancel()
        return True

    # -- admission --------------------------------------------------------------------------

    def parse_json(self, ctx: Ctx) -> dict[str, Any]:
        """Decode the body once (C decoder); 400 unless it is a JSON object."""
        if not ctx.body:
            raise bad_request("Request body is empty; expected a JSON object")
        try:
            doc = json.loads(ctx.body)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
            # NB: RecursionError: nested deeper than the C decoder recurses (about 1000 levels)
            raise bad_request(f"Invalid JSON in request body: {exc}") from None
        if not isinstance(doc, dict):
            raise bad_request("Request body must be a JSON object")
        ctx.doc = doc
        return doc

    def authorize(self, ctx: Ctx) -> Grant | None:
        """The caller's grant; 401 when keys are configured and the key is missing or unknown."""
        if self.keys is None:
            return None
        if not ctx.api_key:
            raise GatewayError(401, "Missing API key (send Authorization: Bearer <key> or x-api-key)")
        grant = self.keys.lookup(ctx.api_key)
        if grant is None:
            raise GatewayError(401, "Invalid API key", code="invalid_api_key")
        return grant

    async def admit(self, ctx: Ctx, model: Any, capability: str) -> Workload:
        """Resolve ``model`` to a routable workload, waking it if needed (seed 004 admission)."""
        if not isinstance(model, str) or not model:
            raise bad_request("'model' is required and must be a non-empty string", param="model")
        grant = self.authorize(ctx)
        workload = self.source.snapshot().lookup(model)
        if workload is None or (grant is not None and not grant.allows(model, workload.namespace)):
            raise no_instance(model)
        ctx.model_label = model
        if capability not in workload.capabilities:
            nice = "TextGeneration" if capability == TEXT_GENERATION else "TextEmbedding"
            raise lacks_capability(model, nice)
        if workload.routable:
            return workload
        if workload.state == "Running":
            raise no_instance(model)
        return await self.wakes.ready(workload, model)

    def _on_wake(self, workload: Workload, outcome: str) -> None:
        self.metrics.wakes.labels(workload.key, outcome).inc()

    # -- upstream ---------------------------------------------------------------------------

    async def connect(
        self, ctx: Ctx, workload: Workload, path: str, payload: bytes, affinity: bytes | None
    ) -> UpstreamResponse:
        """Send the request to a backend; tries others while connecting fails.

        On return ``ctx.backend`` is the backend that answered (its outstanding count is held
        until :meth:`release`). Raises :class:`GatewayError` 502/504 when no backend answers.
        """
        assert self._pool is not None, "gateway not started"
        tried: list[str] = []
        connect_timeout = workload.connect_timeout or self.settings.connect_timeout
        read_timeout = workload.read_timeout or self.settings.read_timeout
        headers = b"x-request-id: " + ctx.rid.encode() + b"\r\n"
        last = ""
        ctx.endpoints = workload.endpoints
        if ctx.deadline is None and ctx.task is not None:
            total = workload.total_timeout or self.settings.total_timeout
            ctx.deadline = asyncio.get_running_loop().call_later(total, ctx.expire)
        for _ in range(self.settings.max_attempts):
            backend = self.balancer.pick(
                workload.endpoints, affinity_key=affinity if workload.prefix_affinity else None, exclude=tried
            )
            if backend is None:
                break
            tried.append(backend.url)
            self._hold(ctx, backend)
            try:
                response = await self._pool.request(
                    backend.url,
                    path,
                    payload,
                    headers,
                    connect_timeout=connect_timeout,
                    read_timeout=read_timeout,
                )
            except ConnectFailed as exc:
                self._fail(backend, "connect", workload.endpoints)
                self.release(ctx)
                last = str(exc)
                log.warning("request %s: %s; trying another backend", ctx.rid, last)
                continue
            except UpstreamTimeout:
                self._fail(backend, "timeout", workload.endpoints)
                self.release(ctx)
                raise GatewayError(504, f"Upstream {backend.url} timed out before answering") from None
            except UpstreamError as exc:
                self._fail(backend, "read", workload.endpoints)
                self.release(ctx)
                raise GatewayError(502, f"Upstream {backend.url} failed: {exc}") from None
            if response.status >= 500:
                self._fail(backend, "status", workload.endpoints)
            else:
                self.balancer.success(backend)
            return response
        raise GatewayError(502, f"No backend of model {workload.served_name} could be reached ({last})")

    def _hold(self, ctx: Ctx, backend: Backend) -> None:
        ctx.backend = backend
        backend.outstanding += 1
        self.metrics.in_flight.labels(backend.url).inc()

    def release(self, ctx: Ctx) -> None:
        backend, ctx.backend = ctx.backend, None
        if backend is not None:
            backend.outstanding -= 1
            self.metrics.in_flight.labels(backend.url).dec()

    def _fail(self, backend: Backend, kind: str, endpoints: tuple[str, ...]) -> None:
        self.metrics.upstream_errors.labels(backend.url, kind).inc()
        backoff = self.balancer.failure(backend, endpoints, at_once=kind == "connect")
        if backoff is not None:
            self.metrics.ejections.labels(backend.url).inc()
            log.warning("backend %s ejected for %.1fs after a %s failure", backend.url, backoff, kind)

    def upstream_failed(self, ctx: Ctx, exc: BaseException) -> str:
        """Record a failure after the upstream answered; returns a message for the client."""
        backend = ctx.backend
        if backend is None:
            return "upstream failed"
        kind = exc.kind if isinstance(exc, UpstreamError) else "read"
        self._fail(backend, kind, ctx.endpoints)
        what = "timed out" if kind == "timeout" else "went away"
        return f"Upstream {backend.url} {what} in the middle of the response"

    def record_usage(self, ctx: Ctx, tail: bytes) -> None:
        m_in = _USAGE_IN.findall(tail)
        m_out = _USAGE_OUT.findall(tail)
        if m_in:
            self.metrics.tokens.labels(ctx.model_label, "in").inc(int(m_in[-1]))
        if m_out:
            self.metrics.tokens.labels(ctx.model_label, "out").inc(int(m_out[-1]))

    def first_byte(self, ctx: Ctx) -> None:
        self.metrics.ttfb.labels(ctx.model_label, ctx.route).observe(time.perf_counter() - ctx.start)

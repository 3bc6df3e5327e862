"""Upstream selection and connection: one backend per attempt, passive health, the total deadline.

:meth:`Connector.connect` picks a backend of the workload (:mod:`.balancer`: least outstanding,
prefix affinity), sends the request over the keep-alive pool (:mod:`.upstream`) and returns once
the response head arrived. A connect error ejects the backend and the next attempt goes to
another one (at most ``max_attempts`` backends); nothing is retried once a byte of the request
was written. The chosen backend's outstanding count is held on the request (``ctx.backend``)
until :meth:`Connector.release`. Failures, ejections and requests in flight per backend are
counted in :class:`~.metrics.GatewayMetrics`.

A service below the route handlers: it knows requests (:class:`~.request.Ctx`) and workloads,
never a handler or the application.
"""

from __future__ import annotations

import asyncio
import logging

from .balancer import Backend, Balancer
from .config import GatewaySettings
from .errors import GatewayError
from .metrics import GatewayMetrics
from .request import Ctx
from .routing import Workload
from .upstream import ConnectFailed, UpstreamError, UpstreamPool, UpstreamResponse, UpstreamTimeout

log = logging.getLogger("sparkrun.gateway")


class Connector:
    """The backends of one gateway, their health, and the upstream connection pool."""

    def __init__(self, settings: GatewaySettings, metrics: GatewayMetrics) -> None:
        self.settings = settings
        self.metrics = metrics
        self.balancer = Balancer(
            eject_base=settings.eject_base,
            eject_max=settings.eject_max,
            consecutive=settings.consecutive_failures,
            max_ejected_percent=settings.max_ejected_percent,
        )
        self._pool: UpstreamPool | None = None

    def open(self) -> None:
        """Open the upstream pool (at startup, on the event loop that serves)."""
        if self._pool is None:
            self._pool = UpstreamPool()

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.aclose()

    async def connect(
        self, ctx: Ctx, workload: Workload, path: str, payload: bytes, affinity: bytes | None
    ) -> UpstreamResponse:
        """Send the request to a backend; tries others while connecting fails.

        Arms the request's total deadline (once). On return ``ctx.backend`` is the backend that
        answered (its outstanding count is held until :meth:`release`). Raises
        :class:`GatewayError` 502/504 when no backend answers.
        """
        pool = self._pool
        if pool is None:  # not started, or shutting down: no upstream connections any more
            raise GatewayError(503, "the gateway is shutting down", code="service_unavailable")
        settings = self.settings
        tried: list[str] = []
        connect_timeout = workload.connect_timeout or settings.connect_timeout
        read_timeout = workload.read_timeout or settings.read_timeout
        headers = b"x-request-id: " + (ctx.upstream_rid or ctx.rid).encode() + b"\r\n"
        last = ""
        ctx.endpoints = workload.endpoints
        if ctx.deadline is None and ctx.task is not None:
            total = workload.total_timeout or settings.total_timeout
            ctx.deadline = asyncio.get_running_loop().call_later(total, ctx.expire)
        for _ in range(settings.max_attempts):
            backend = self.balancer.pick(
                workload.endpoints, affinity_key=affinity if workload.prefix_affinity else None, exclude=tried
            )
            if backend is None:
                break
            tried.append(backend.url)
            self._hold(ctx, backend)
            try:
                response = await pool.request(
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
        """Give back the request's hold on its backend (if it has one)."""
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

    def failed(self, ctx: Ctx, exc: BaseException) -> str:
        """Record a failure after the upstream answered; returns a message for the client."""
        backend = ctx.backend
        if backend is None:
            return "upstream failed"
        kind = exc.kind if isinstance(exc, UpstreamError) else "read"
        self._fail(backend, kind, ctx.endpoints)
        what = "timed out" if kind == "timeout" else "went away"
        return f"Upstream {backend.url} {what} in the middle of the response"

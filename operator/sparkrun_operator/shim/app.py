"""The daemon-compatible HTTP API (``/v1``) over Kubernetes resources, as one ASGI application.

Routes, each with the reference daemon's permission (``docs/security.md``, "Authorization matrix"):

======  ========================================  ===============================================
GET     /v1/health                                public
GET     /v1/info                                  read
GET     /v1/ops                                   read; filtered by permission and availability
POST    /v1/ops/{name} and every ``http_path``    the operation's scope; query 200 / job 202
GET     /v1/jobs                                  read; non-admins see their own jobs
GET     /v1/jobs/{id}                             owner or admin, plus the operation's scope
DELETE  /v1/jobs/{id}                             job access + operate
POST    /v1/jobs/{id}/input                       job access + scope (+ answer-secret)
GET     /v1/jobs/{id}/artifacts/diagnostics       job access; finished jobs only
GET     /v1/jobs/{id}/events                      job access; SSE, Last-Event-ID, 410 / gap
GET     /v1/events                                read; SSE snapshots every 2 s
GET     /v1/streams/logs, /v1/streams/monitor     read; SSE
GET     /v1/reservations                          admin
POST    /v1/reservations/{owner}/reconcile        admin
GET     /v1/snapshots/discovery.snapshot          read
POST    /v1/maintenance                           admin
POST    /v1/shutdown                              admin
GET     /openapi.json                             authenticated
GET     /docs                                     read
======  ========================================  ===============================================

The order of checks on an operation request is the reference daemon's: JSON body (422),
operation lookup (404), permission (403), arguments against the request schema (422),
availability (403 ``FeatureDisabled``), per-request trust (403), maintenance (409), then a job
(202) or an inline query (200). The application holds no state that a restart would lose: jobs
are DaemonJobs, read through a watch-backed cache.

This module holds the route table and dispatch; the handlers live in one mixin per route family
(:mod:`.routes_info`, :mod:`.routes_ops`, :mod:`.routes_jobs`, :mod:`.routes_events`,
:mod:`.routes_admin`) over :class:`~sparkrun_operator.shim.state.ShimState`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from importlib import metadata

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from sparkrun_operator.k8s.auth import RequestHeaderConfig
from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.k8s.daemonjobs import JobCache
from sparkrun_operator.ops.catalog import Catalog
from sparkrun_operator.ops.invocation import ArgumentCheck, Executor
from sparkrun_operator.ops.jobstore import JobService
from sparkrun_operator.shim import docs
from sparkrun_operator.shim.boundary import Boundary, Errors, json_response
from sparkrun_operator.shim.identity import Gate
from sparkrun_operator.shim.querycache import QueryCache
from sparkrun_operator.shim.routes_admin import AdminRoutes
from sparkrun_operator.shim.routes_events import EventRoutes
from sparkrun_operator.shim.routes_info import InfoRoutes
from sparkrun_operator.shim.routes_jobs import JobRoutes
from sparkrun_operator.shim.routes_ops import OperationRoutes
from sparkrun_operator.shim.sse import Subscriptions
from sparkrun_operator.shim.state import Handler, ShimConfig
from sparkrun_operator.shim.streams import Streams

__all__ = ["Shim", "ShimConfig"]


def _version() -> str:
    try:
        return metadata.version("sparkrun-operator")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a checkout
        return "0+unknown"


_JOB_PATH = re.compile(r"^/v1/jobs/(?P<identifier>[^/]+)(?P<rest>/input|/events|/artifacts/diagnostics)?$")
_RECONCILE = re.compile(r"^/v1/reservations/(?P<owner>[^/]+)/reconcile$")


class Shim(InfoRoutes, OperationRoutes, JobRoutes, EventRoutes, AdminRoutes):
    """The application: its routes and dispatch (handlers live in the route-family mixins)."""

    def __init__(
        self,
        *,
        config: ShimConfig,
        rest: Kube,
        gate: Gate,
        jobs: JobService,
        cache: JobCache,
        catalog: Catalog,
        executors: dict[str, Executor],
        argument_checks: Mapping[str, ArgumentCheck] | None = None,
        front_proxy: RequestHeaderConfig | None = None,
        on_shutdown: Callable[[], None] | None = None,
    ) -> None:
        self.config = config
        self.rest = rest
        self.gate = gate
        self.jobs = jobs
        self.cache = cache
        self.catalog = catalog
        self.executors = executors
        self.argument_checks = argument_checks or {}
        self.front_proxy = front_proxy
        self.on_shutdown = on_shutdown
        self.draining = False
        self.queries_in_flight = 0
        self.query_cache = QueryCache(
            config.query_cache_ttl, config.query_cache_size, config.query_cache_bytes
        )
        self.subscriptions = Subscriptions(config.max_streams, per_principal=config.max_streams_per_principal)
        self.streams = Streams(rest=rest, settings=config.settings)
        self.version = _version()
        self._openapi: bytes | None = None
        self._routes: dict[str, dict[str, Handler]] = {
            "/v1/health": {"GET": self.health},
            "/v1/info": {"GET": self.info},
            "/v1/ops": {"GET": self.operations},
            "/v1/jobs": {"GET": self.list_jobs},
            "/v1/events": {"GET": self.global_events},
            "/v1/reservations": {"GET": self.reservations},
            "/v1/maintenance": {"POST": self.maintenance},
            "/v1/shutdown": {"POST": self.shutdown},
            "/openapi.json": {"GET": self.openapi},
            "/docs": {"GET": self.docs},
        }
        for path, op in catalog.paths.items():
            self._routes[path] = {"POST": self._alias(op.name)}

    def app(self) -> ASGIApp:
        """The complete ASGI application (error envelopes, authentication, routes)."""
        boundary = Boundary(
            self._dispatch,
            gate=self.gate,
            body_limit=self.config.body_limit,
            body_timeout=self.config.body_timeout,
            front_proxy=self.front_proxy,
        )
        return Errors(_Prefix(boundary, self.config.aggregated_prefix))

    def _resolve(self, path: str) -> tuple[dict[str, Handler] | None, dict[str, str]]:
        found = self._routes.get(path)
        if found is not None:
            return found, {}
        if path.startswith("/v1/ops/"):
            return {"POST": self.operation}, {"name": path[len("/v1/ops/") :]}
        match = _JOB_PATH.match(path)
        if match:
            rest = match.group("rest") or ""
            table: dict[str, dict[str, Handler]] = {
                "": {"GET": self.get_job, "DELETE": self.cancel_job},
                "/input": {"POST": self.answer},
                "/events": {"GET": self.job_events},
                "/artifacts/diagnostics": {"GET": self.diagnostics},
            }
            return table[rest], {"identifier": match.group("identifier")}
        match = _RECONCILE.match(path)
        if match:
            return {"POST": self.reconcile}, {"owner": match.group("owner")}
        if path.startswith("/v1/snapshots/"):
            return {"GET": self.snapshot}, {"name": path[len("/v1/snapshots/") :]}
        if path.startswith("/v1/streams/"):
            return {"GET": self.stream}, {"kind": path[len("/v1/streams/") :]}
        if path.startswith(docs.STATIC_PREFIX):
            return {"GET": self.docs_asset}, {"asset": path[len(docs.STATIC_PREFIX) :]}
        return None, {}

    async def _dispatch(self, scope: Scope, receive: Receive, send: Send) -> None:
        handlers, params = self._resolve(scope["path"])
        if handlers is None:
            await json_response(send, 404, {"detail": "Not Found"})
            return
        method = scope["method"]
        if method == "HEAD" and "GET" in handlers:
            method = "GET"
        handler = handlers.get(method)
        if handler is None:
            await json_response(
                send, 405, {"detail": "Method Not Allowed"}, {"Allow": ", ".join(sorted(handlers))}
            )
            return
        request = Request(scope, receive)
        response = await handler(request, **params)
        await response(scope, receive, send)


class _Prefix:
    """Serve the same routes under the aggregated API's prefix (the prefix is stripped)."""

    def __init__(self, app: ASGIApp, prefix: str) -> None:
        self.app = app
        self.prefix = prefix.rstrip("/")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.prefix and scope["path"].startswith(self.prefix + "/"):
            scope = dict(scope)
            scope["path"] = scope["path"][len(self.prefix) :]
            scope["raw_path"] = scope["path"].encode()
        await self.app(scope, receive, send)

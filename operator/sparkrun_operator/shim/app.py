"""The daemon-compatible HTTP API (``/v1``) over Kubernetes resources, as one ASGI application.

Routes (seed 000, "Infrastructure routes"), each with the document's permission:

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
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from sparkrun_operator.k8s.auth import RequestHeaderConfig
from sparkrun_operator.k8s.client import CONFIG_MAPS, Kube
from sparkrun_operator.k8s.daemonjobs import JobCache
from sparkrun_operator.ops import jobs as joblib
from sparkrun_operator.ops.catalog import Catalog, Operation
from sparkrun_operator.ops.context import Executor, OperationContext, Settings
from sparkrun_operator.ops.errors import (
    Conflict,
    DaemonError,
    FeatureDisabled,
    Forbidden,
    Invalid,
    NotFound,
)
from sparkrun_operator.ops.jobstore import JobService
from sparkrun_operator.ops.runner import run_query
from sparkrun_operator.ops.schema import parse_json_object, request_validator
from sparkrun_operator.shim import docs, openapi
from sparkrun_operator.shim.boundary import CALLER, Boundary, Errors, json_response
from sparkrun_operator.shim.identity import Caller, Gate
from sparkrun_operator.shim.querycache import QueryCache
from sparkrun_operator.shim.sse import HEARTBEAT, EventStream, Subscriptions, frame
from sparkrun_operator.shim.streams import Streams

__all__ = ["Shim", "ShimConfig"]

PROTOCOL = 1


def _version() -> str:
    try:
        return metadata.version("sparkrun-operator")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a checkout
        return "0+unknown"


@dataclass
class ShimConfig:
    """Knobs of one shim process."""

    settings: Settings = field(default_factory=Settings)
    controller_id: str = "sparkrun-shim"
    allow_request_trust: bool = False
    max_streams: int = 64
    #: Concurrent SSE streams of one principal (429 beyond).
    max_streams_per_principal: int = 16
    max_queued_queries: int = 32
    query_cache_ttl: float = 2.0
    query_cache_size: int = 128
    #: Bytes the query cache may hold in all; larger answers are not cached.
    query_cache_bytes: int = 16 * 1024 * 1024
    body_limit: int = 1024 * 1024
    body_timeout: float = 30.0
    snapshot_interval: float = 2.0
    heartbeat: float = 10.0
    #: URL prefix under which the aggregated API serves the same routes.
    aggregated_prefix: str = "/apis/daemon.sparkrun.dev/v1alpha1"


def _json(body: Any, status: int = 200) -> Response:
    return Response(
        json.dumps(body, separators=(",", ":"), allow_nan=False).encode(),
        status_code=status,
        media_type="application/json",
    )


Handler = Callable[..., Awaitable[Response | ASGIApp]]
_JOB_PATH = re.compile(r"^/v1/jobs/(?P<identifier>[^/]+)(?P<rest>/input|/events|/artifacts/diagnostics)?$")
_RECONCILE = re.compile(r"^/v1/reservations/(?P<owner>[^/]+)/reconcile$")


class Shim:
    """The application and everything its handlers share."""

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

    # -- ASGI -----------------------------------------------------------------------------

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

    # -- helpers --------------------------------------------------------------------------

    @staticmethod
    def caller(request: Request) -> Caller:
        caller: Caller = request.scope[CALLER]
        return caller

    async def _body(self, request: Request) -> dict[str, Any]:
        return parse_json_object(await request.body())

    async def _job_access(self, request: Request, identifier: str) -> tuple[dict[str, Any], Operation | None]:
        """The job, if the caller may see it: owner or admin, and the operation's scope."""
        caller = self.caller(request)
        await self.gate.require(caller, "read")
        obj = await self.jobs.find(identifier)
        if obj is None:
            raise NotFound("'Unknown job'", type_name="KeyError")
        owner = (obj.get("spec", {}).get("principal") or {}).get("username")
        if owner != caller.principal and not await self.gate.is_admin(caller):
            raise Forbidden("Job belongs to another principal")
        op = self.catalog.find(obj.get("spec", {}).get("operation", ""))
        scope = op.scope if op else "admin"
        if not await self.gate.allows(caller, scope):
            raise Forbidden("Job requires its operation permission")
        return obj, op

    def _public(self, obj: dict[str, Any]) -> dict[str, Any]:
        op = self.catalog.find(obj.get("spec", {}).get("operation", ""))
        return joblib.public_job(obj, scope=op.scope if op else "admin")

    async def _visible_jobs(self, caller: Caller, *, state: str | None, limit: int) -> list[dict[str, Any]]:
        admin = await self.gate.is_admin(caller)
        rows = self.jobs.listing(principal=None if admin else caller.principal, state=state, limit=limit)
        out = []
        allowed: dict[str, bool] = {}
        for obj in rows:
            op = self.catalog.find(obj.get("spec", {}).get("operation", ""))
            scope = op.scope if op else "admin"
            if scope not in allowed:
                allowed[scope] = await self.gate.allows(caller, scope)
            if allowed[scope]:
                out.append(self._public(obj))
        return out

    # -- infrastructure routes ------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        return _json({"status": "ok", "protocol": PROTOCOL})

    async def info(self, request: Request) -> Response:
        caller = self.caller(request)
        await self.gate.require(caller, "read")
        settings = self.config.settings
        return _json(
            {
                "profile": "kubernetes",
                "binding": settings.namespace,
                "config_path": "",
                "controller": {
                    "schema_version": 1,
                    "application": {
                        "id": "sparkrun-operator",
                        "command": "sparkrun-k8s",
                        "package": "sparkrun-operator",
                        "resource_namespace": settings.namespace,
                    },
                    "controller_id": self.config.controller_id,
                },
                "protocol": PROTOCOL,
                "runtime": {
                    "version": self.version,
                    "package": "sparkrun-operator",
                    "kubernetes": {"server": self.rest.host, "namespace": settings.namespace},
                    "principal": caller.principal,
                    "identity": caller.via,
                },
                "restart_required": self.draining,
                "manager": caller.manager,
            }
        )

    async def operations(self, request: Request) -> Response:
        caller = self.caller(request)
        await self.gate.require(caller, "read")
        rows = []
        for op in self.catalog:
            if op.enabled and await self.gate.allows(caller, op.scope, secret=op.secret):
                rows.append(op.discovery())
        return _json(rows)

    async def openapi(self, request: Request) -> Response:
        if self._openapi is None:
            self._openapi = json.dumps(openapi.build(self.catalog, version=self.version)).encode()
        return Response(self._openapi, media_type="application/json")

    async def docs(self, request: Request) -> Response:
        await self.gate.require(self.caller(request), "read")
        return docs.index()

    async def docs_asset(self, request: Request, asset: str) -> Response:
        await self.gate.require(self.caller(request), "read")
        return docs.asset(asset)

    # -- operations -----------------------------------------------------------------------

    def _alias(self, name: str) -> Handler:
        async def alias(request: Request) -> Response:
            return await self._operate(name, await self._body(request), request)

        return alias

    async def operation(self, request: Request, name: str) -> Response:
        return await self._operate(name, await self._body(request), request)

    async def _operate(self, name: str, arguments: dict[str, Any], request: Request) -> Response:
        op = self.catalog.find(name)
        if op is None:
            raise NotFound(f"Unknown operation: {name}")
        caller = self.caller(request)
        await self.gate.require(caller, op.scope, secret=op.secret)
        request_validator(op.name, op.version, op.request_schema).check_request(arguments)
        if not op.enabled:
            availability = op.availability
            raise FeatureDisabled(
                availability.describe(op.name),
                attrs={
                    "reason": availability.code,
                    "alternative": availability.alternative,
                    "feature_flag": op.feature_flag,
                },
            )
        if arguments.get("trust") and not self.config.allow_request_trust:
            raise Forbidden("Per-request trust is disabled for this listener")
        if self.draining:
            raise Conflict("Daemon is draining or needs restart before accepting operations")
        if op.kind == "stream":
            raise Invalid("Use a stream endpoint for this operation")
        if op.kind == "job":
            self.query_cache.clear()
            key = request.headers.get("idempotency-key") or None
            job_id = await self.jobs.submit(
                op,
                arguments,
                user=caller.user,
                manager=caller.manager,
                client=request.headers.get("x-sparkrun-client"),
                key=key,
            )
            return _json({"job_id": job_id, "events_url": f"/v1/jobs/{job_id}/events"}, 202)
        return await self._query(op, arguments, caller)

    async def _query(self, op: Operation, arguments: dict[str, Any], caller: Caller) -> Response:
        cache_key = (op.name, json.dumps(arguments, sort_keys=True), caller.principal, caller.manager)
        if op.cacheable:
            cached = self.query_cache.get(cache_key)
            if cached is not None:
                return Response(cached, media_type="application/json")
        if self.queries_in_flight >= self.config.max_queued_queries:
            raise Conflict("Query admission limit reached", retryable=True)
        self.queries_in_flight += 1
        try:
            ctx = OperationContext(
                rest=self.rest,
                settings=self.config.settings,
                principal=caller.principal,
                manager=caller.manager,
                operation=op.name,
            )
            result = await run_query(
                op, arguments, ctx, self.executors, limit=self.config.settings.query_timeout
            )
        finally:
            self.queries_in_flight -= 1
        body = json.dumps(result, separators=(",", ":"), allow_nan=False).encode()
        if op.cacheable:
            self.query_cache.put(cache_key, body)
        return Response(body, media_type="application/json")

    # -- jobs -----------------------------------------------------------------------------

    async def list_jobs(self, request: Request) -> Response:
        caller = self.caller(request)
        await self.gate.require(caller, "read")
        state = request.query_params.get("state")
        raw_limit = request.query_params.get("limit", "200")
        try:
            limit = int(raw_limit)
        except ValueError:
            return _json(
                {
                    "detail": [
                        {
                            "type": "int_parsing",
                            "loc": ["query", "limit"],
                            "msg": "Input should be a valid integer, unable to parse string as an integer",
                            "input": raw_limit,
                        }
                    ]
                },
                422,
            )
        return _json(await self._visible_jobs(caller, state=state, limit=min(max(limit, 1), 1000)))

    async def get_job(self, request: Request, identifier: str) -> Response:
        obj, _ = await self._job_access(request, identifier)
        # NB: the cache leaves large results out (k8s/daemonjobs.py): this reads them.
        return _json(self._public(await self.cache.full(obj)))

    async def cancel_job(self, request: Request, identifier: str) -> Response:
        obj, _ = await self._job_access(request, identifier)
        await self.gate.require(self.caller(request), "operate")
        return _json(self._public(await self.jobs.cancel(obj)))

    async def answer(self, request: Request, identifier: str) -> Response:
        obj, op = await self._job_access(request, identifier)
        data = await self._body(request)
        if set(data) != {"prompt_id", "value"} or not isinstance(data["prompt_id"], str):
            raise Invalid("Expected prompt_id and value")
        prompt = (obj.get("status") or {}).get("prompt") or {}
        if prompt.get("id") != data["prompt_id"]:
            answered = any(
                a.get("promptId") == data["prompt_id"] for a in obj.get("spec", {}).get("answers") or ()
            )
            if not answered:
                raise Conflict("Prompt expired or unavailable")
        secret = prompt.get("kind") == "secret"
        await self.gate.require(self.caller(request), op.scope if op else "admin", secret=secret)
        await self.jobs.answer(obj, data["prompt_id"], data["value"])
        return _json({})

    async def diagnostics(self, request: Request, identifier: str) -> Response:
        obj, _ = await self._job_access(request, identifier)
        if joblib.state_of(obj) not in joblib.TERMINAL:
            raise Conflict("Diagnostic bundle is available after the job finishes")
        found = await self.rest.get(CONFIG_MAPS, f"{identifier}-diagnostics", self.config.settings.namespace)
        if found is None:
            return _json({"detail": "Diagnostic bundle not found"}, 404)
        from sparkrun_operator.ops.executors.diagnostics import read_bundle

        return Response(
            read_bundle(found),
            media_type="application/x-ndjson",
            headers={"content-disposition": f'attachment; filename="diagnostics-{identifier}.ndjson"'},
        )

    async def job_events(self, request: Request, identifier: str) -> ASGIApp:
        obj, _ = await self._job_access(request, identifier)
        raw = request.headers.get("last-event-id", "0").strip() or "0"
        try:
            after = int(raw)
        except ValueError as error:
            raise Invalid("Invalid event cursor") from error
        if after < 0:
            raise Invalid("Invalid event cursor")
        _, first = joblib.events(obj)
        if after and after < first - 1:
            raise _gone(first)
        release = self.subscriptions.acquire(self.caller(request).principal)
        return EventStream(self._follow(request, identifier, after), release=release)

    async def _follow(self, request: Request, identifier: str, after: int) -> AsyncGenerator[bytes, None]:
        while True:
            obj, _ = await self._job_access(request, identifier)
            events, first = joblib.events(obj)
            if after and after < first - 1:
                yield frame({"type": "gap", "detail": str(_gone(first).detail)})
                return
            for event in events:
                if event["id"] > after:
                    after = event["id"]
                    yield frame(event)
            if joblib.state_of(obj) in joblib.TERMINAL and after >= joblib.last_event_id(obj):
                return
            if not await self.cache.changed(self.config.heartbeat):
                yield HEARTBEAT

    async def global_events(self, request: Request) -> ASGIApp:
        caller = self.caller(request)
        await self.gate.require(caller, "read")
        release = self.subscriptions.acquire(caller.principal)

        async def snapshots() -> AsyncIterator[bytes]:
            while True:
                await self.gate.require(caller, "read")
                yield frame(
                    {"type": "snapshot", "jobs": await self._visible_jobs(caller, state=None, limit=200)}
                )
                await asyncio.sleep(self.config.snapshot_interval)

        return EventStream(snapshots(), release=release)

    # -- streams, snapshots, administration -----------------------------------------------

    async def stream(self, request: Request, kind: str) -> ASGIApp:
        caller = self.caller(request)
        await self.gate.require(caller, "read")
        if kind not in ("logs", "monitor"):
            raise NotFound("Unknown stream")
        params = dict(request.query_params)
        producer = (
            self.streams.logs(params, lambda: self.gate.require(caller, "read"))
            if kind == "logs"
            else self.streams.monitor(params, lambda: self.gate.require(caller, "read"))
        )
        try:
            first = await producer.__anext__()  # validates parameters before any header is sent
            release = self.subscriptions.acquire(caller.principal)
        except BaseException:
            await producer.aclose()
            raise

        async def chained() -> AsyncIterator[bytes]:
            try:
                if first:
                    yield first
                async for chunk in producer:
                    yield chunk
            finally:
                await producer.aclose()

        return EventStream(chained(), release=release)

    async def snapshot(self, request: Request, name: str) -> Response:
        caller = self.caller(request)
        await self.gate.require(caller, "read")
        if name != "discovery.snapshot":
            raise NotFound("Unknown snapshot")
        op = self.catalog.get("discovery.snapshot")
        ctx = OperationContext(
            rest=self.rest, settings=self.config.settings, principal=caller.principal, manager=caller.manager
        )
        cache_key = ("snapshot", name)
        cached = self.query_cache.get(cache_key)
        if cached is not None:
            return Response(cached, media_type="application/json")
        result = await run_query(
            op, {"metadata_only": True}, ctx, self.executors, limit=self.config.settings.query_timeout
        )
        body = json.dumps(result, separators=(",", ":")).encode()
        self.query_cache.put(cache_key, body)
        return Response(body, media_type="application/json")

    async def reservations(self, request: Request) -> Response:
        await self.gate.require(self.caller(request), "admin")
        claims: dict[str, dict[str, Any]] = {}
        for obj in self.cache.values():
            if joblib.state_of(obj) not in joblib.ACTIVE:
                continue
            executor = (obj.get("status") or {}).get("executor") or "unknown"
            op = self.catalog.find(obj.get("spec", {}).get("operation", ""))
            entry = claims.setdefault(executor, {"owner": executor, "alive": None, "claims": []})
            entry["claims"].append(
                {
                    "job_id": obj["metadata"]["name"],
                    "operation": obj.get("spec", {}).get("operation"),
                    "policy": op.resources if op else "auto",
                    "state": joblib.state_of(obj),
                }
            )
        leases = await self._executor_leases()
        for owner, entry in claims.items():
            entry["alive"] = leases.get(owner)
        return _json(sorted(claims.values(), key=lambda e: e["owner"]))

    async def _executor_leases(self) -> dict[str, bool]:
        from sparkrun_operator.ops.leases import executor_liveness

        return await executor_liveness(self.rest, self.config.settings.namespace)

    async def reconcile(self, request: Request, owner: str) -> Response:
        await self.gate.require(self.caller(request), "admin")
        data = await self._body(request)
        if set(data) != {"acknowledge_effects"} or data["acknowledge_effects"] is not True:
            raise Invalid("Explicit acknowledgement of reconciled effects is required")
        leases = await self._executor_leases()
        if leases.get(owner):
            raise Conflict(f"Owner {owner} is alive; only a dead owner's claims can be released")
        released = 0
        from sparkrun_operator.ops.leases import mark_lost

        for obj in self.cache.values():
            status = obj.get("status") or {}
            if joblib.state_of(obj) in joblib.ACTIVE and status.get("executor") == owner:
                await self.cache.observe(await mark_lost(self.jobs.daemonjobs, obj))
                released += 1
        if not released and owner not in leases:
            raise NotFound(f"No claims of owner {owner}")
        return _json({"released": owner, "jobs": released})

    async def maintenance(self, request: Request) -> Response:
        await self.gate.require(self.caller(request), "admin")
        data = await self._body(request)
        if set(data) != {"drain"} or type(data["drain"]) is not bool:
            raise Invalid("Expected boolean drain")
        self.draining = data["drain"]
        return _json({"draining": self.draining})

    async def shutdown(self, request: Request) -> Response:
        await self.gate.require(self.caller(request), "admin")
        if await self._body(request) != {}:
            raise Invalid("Expected an empty shutdown object")
        if self.on_shutdown is None:
            raise Conflict("Server shutdown is unavailable")
        asyncio.get_running_loop().call_later(0.1, self.on_shutdown)
        return _json({"stopping": True, "workers_continue": True})


def _gone(first: int) -> DaemonError:
    from sparkrun_operator.ops.errors import Gone

    return Gone(f"Event cursor expired; retained events start at {first}")


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

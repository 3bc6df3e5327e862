"""What every route family of the shim shares: its configuration, the query cache, the JSON reply
and :class:`ShimState` (the attributes :class:`~sparkrun_operator.shim.app.Shim` sets, and the
caller/job-access helpers its handlers use)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp

from sparkrun_operator import safeload
from sparkrun_operator.api.meta import DAEMON_API_PREFIX
from sparkrun_operator.k8s.auth import RequestHeaderConfig
from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.k8s.daemonjobs import JobCache
from sparkrun_operator.ops import jobs as joblib
from sparkrun_operator.ops import paging
from sparkrun_operator.ops.catalog import Catalog, Operation
from sparkrun_operator.ops.errors import Forbidden, NotFound
from sparkrun_operator.ops.invocation import ArgumentCheck, Executor
from sparkrun_operator.ops.jobstore import JobService
from sparkrun_operator.ops.schema import parse_json_object
from sparkrun_operator.ops.settings import Settings
from sparkrun_operator.shim.boundary import CALLER
from sparkrun_operator.shim.identity import Caller, Gate
from sparkrun_operator.shim.querycache import QueryCache
from sparkrun_operator.shim.sse import Subscriptions
from sparkrun_operator.shim.streams import Streams

__all__ = ["PROTOCOL", "Handler", "ShimConfig", "ShimState", "json_reply"]

PROTOCOL = 1


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
    #: Bytes of a request body (413 beyond, before it is read); the JSON loader's bound too.
    body_limit: int = safeload.REQUEST_BODY.max_bytes
    body_timeout: float = 30.0
    snapshot_interval: float = 2.0
    heartbeat: float = 10.0
    #: URL prefix under which the aggregated API serves the same routes.
    aggregated_prefix: str = DAEMON_API_PREFIX


def json_reply(body: Any, status: int = 200) -> Response:
    return Response(
        json.dumps(body, separators=(",", ":"), allow_nan=False).encode(),
        status_code=status,
        media_type="application/json",
    )


Handler = Callable[..., Awaitable[Response | ASGIApp]]


class ShimState:
    """The state a Shim holds (set in ``Shim.__init__``) and the helpers its route families share."""

    config: ShimConfig
    rest: Kube
    gate: Gate
    jobs: JobService
    cache: JobCache
    catalog: Catalog
    executors: dict[str, Executor]
    argument_checks: Mapping[str, ArgumentCheck]
    front_proxy: RequestHeaderConfig | None
    on_shutdown: Callable[[], None] | None
    draining: bool
    queries_in_flight: int
    query_cache: QueryCache
    subscriptions: Subscriptions
    streams: Streams
    version: str
    _openapi: bytes | None

    @staticmethod
    def caller(request: Request) -> Caller:
        caller: Caller = request.scope[CALLER]
        return caller

    async def _body(self, request: Request) -> dict[str, Any]:
        return parse_json_object(await request.body())

    async def _job_access(self, request: Request, identifier: str) -> tuple[dict[str, Any], Operation | None]:
        """The job, if the caller may see it: owner or admin, and the operation's scope.

        Another principal's job is answered exactly as an unknown id (404), not 403: keyed job
        ids are computable (``sha256(principal NUL key)``), so a 403 would tell anyone with read
        whether a principal used an idempotency key (docs/security.md).
        """
        caller = self.caller(request)
        await self.gate.require(caller, "read")
        # NB: asked whether the job exists or not, so a review's time tells nothing either
        admin = await self.gate.admin(caller)
        obj = await self.jobs.find(identifier)
        if obj is None:
            raise NotFound("'Unknown job'", type_name="KeyError")
        owner = (obj.get("spec", {}).get("principal") or {}).get("username")
        if owner != caller.principal and not admin:
            raise NotFound("'Unknown job'", type_name="KeyError")
        op = self.catalog.find(obj.get("spec", {}).get("operation", ""))
        scope = op.scope if op else "admin"
        if not await self.gate.allows(caller, scope):
            raise Forbidden("Job requires its operation permission")
        return obj, op

    def _public(self, obj: dict[str, Any]) -> dict[str, Any]:
        op = self.catalog.find(obj.get("spec", {}).get("operation", ""))
        return joblib.public_job(obj, scope=op.scope if op else "admin")

    async def _visible_jobs(self, caller: Caller, *, state: str | None, limit: int) -> list[dict[str, Any]]:
        admin = await self.gate.admin(caller)
        rows = self.jobs.listing(principal=None if admin else caller.principal, state=state, limit=limit)
        return [self._public(obj) for obj in await self._permitted(caller, rows)]

    async def _visible_job_page(
        self, caller: Caller, *, state: str | None, after: paging.Key | None, limit: int
    ) -> tuple[list[dict[str, Any]], paging.Key | None]:
        """One cursor page of ``/v1/jobs`` (``ops/paging.py``, newest first): the caller's
        visibility (owner unless admin, the operation's scope) is applied to every job before
        the page is cut, so a page is never short of visible jobs nor shows another's."""
        admin = await self.gate.admin(caller)
        rows = self.jobs.matching(principal=None if admin else caller.principal, state=state)
        found = paging.page(await self._permitted(caller, rows), paging.JOBS, after, limit)
        return [self._public(obj) for obj in found.items], found.after

    async def _permitted(self, caller: Caller, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The jobs whose operation's scope the caller holds (one check per scope)."""
        out = []
        allowed: dict[str, bool] = {}
        for obj in rows:
            op = self.catalog.find(obj.get("spec", {}).get("operation", ""))
            scope = op.scope if op else "admin"
            if scope not in allowed:
                allowed[scope] = await self.gate.allows(caller, scope)
            if allowed[scope]:
                out.append(obj)
        return out

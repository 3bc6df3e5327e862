"""Operation routes: the checks in the reference daemon's order, then a job or a query."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from sparkrun_operator.ops import ifmatch, paging
from sparkrun_operator.ops import jobs as joblib
from sparkrun_operator.ops.catalog import Operation
from sparkrun_operator.ops.errors import (
    Conflict,
    FeatureDisabled,
    Forbidden,
    Invalid,
    NotFound,
    PreconditionFailed,
)
from sparkrun_operator.ops.invocation import OperationContext
from sparkrun_operator.ops.runner import run_query
from sparkrun_operator.ops.schema import request_validator
from sparkrun_operator.shim.identity import Caller
from sparkrun_operator.shim.paging import asked, paged_reply
from sparkrun_operator.shim.state import Handler, ShimState, json_reply

__all__ = ["OperationRoutes"]


class OperationRoutes(ShimState):
    """``POST /v1/ops/{name}`` and every operation alias: a job (202) or an inline query (200)."""

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
        given = ifmatch.header_of(request.headers.getlist("if-match"))
        if op.kind == "job":
            check = self.argument_checks.get(op.name)
            if check is not None:
                # NB: pure but not always cheap (catalog.import parses up to 256 KiB of YAML).
                await asyncio.to_thread(check, arguments, self.config.settings)
            key = request.headers.get("idempotency-key") or None
            precondition, job_id = await self._precondition(op, arguments, given, caller, key)
            self.query_cache.clear()
            if job_id is None:
                job_id = await self.jobs.submit(
                    op,
                    arguments,
                    user=caller.user,
                    manager=caller.manager,
                    client=request.headers.get("x-sparkrun-client"),
                    key=key,
                    if_match=precondition,
                )
            return json_reply({"job_id": job_id, "events_url": f"/v1/jobs/{job_id}/events"}, 202)
        # NB: a query that writes one object may register for If-Match; any other: 422 naming it
        precondition, _ = await self._precondition(op, arguments, given, caller, None)
        return await self._query(op, arguments, caller, request, if_match=precondition)

    async def _precondition(
        self,
        op: Operation,
        arguments: dict[str, Any],
        given: ifmatch.IfMatch | None,
        caller: Caller,
        key: str | None,
    ) -> tuple[str | None, str | None]:
        """If-Match at submission (ADR 0049, ``ops/ifmatch.py``): ``(precondition, None)`` for the
        job to carry, or ``(None, job id)`` when a stale or vanished target is explained by this
        very request's own job (a retry with its Idempotency-Key after the job wrote: the
        replay answers the job, as a retry without If-Match would)."""
        if given is None:
            return None, None
        resolve = ifmatch.ResolveContext(self.rest, self.config.settings.namespace)
        try:
            return await ifmatch.check(resolve, op.name, arguments, given), None
        except (PreconditionFailed, NotFound):
            replayed = await self._replayed(op, arguments, given, caller, key)
            if replayed is None:
                raise
            return None, replayed

    async def _replayed(
        self,
        op: Operation,
        arguments: dict[str, Any],
        given: ifmatch.IfMatch,
        caller: Caller,
        key: str | None,
    ) -> str | None:
        """The job an earlier submission of this same request made (same principal, key, digest,
        and a precondition this If-Match names), else ``None``."""
        if key is None:
            return None
        name = joblib.job_name(caller.principal, key)
        found = await self.jobs.find(name)
        spec = (found or {}).get("spec") or {}
        if (spec.get("principal") or {}).get("username") != caller.principal:
            return None
        carried = spec.get("ifMatch")
        if not (given.any if carried is None else carried in given.strong):
            return None
        digest = joblib.request_digest(op.name, op.version, arguments, caller.manager, if_match=carried)
        return name if spec.get("requestDigest") == digest else None

    async def _query(
        self,
        op: Operation,
        arguments: dict[str, Any],
        caller: Caller,
        request: Request,
        *,
        if_match: str | None = None,
    ) -> Response:
        """The query's answer; for a list operation asked for a page (``cursor``/``limit`` query
        parameters, ``shim/paging.py``), one page of the full answer (cached whole, paged after)."""
        spec = paging.LISTS.get(op.name)
        ask = None
        if spec is not None:
            filters = {"arguments": arguments, "manager": caller.manager}
            ask = asked(request, route=op.name, filters=filters, principal=caller.principal, parts=spec.parts)
        cache_key = (op.name, json.dumps(arguments, sort_keys=True), caller.principal, caller.manager)
        if op.cacheable:
            cached = self.query_cache.get(cache_key)
            if cached is not None:
                if spec is None or ask is None:
                    return Response(cached, media_type="application/json")
                return paged_reply(json.loads(cached), spec, ask)
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
                user=caller.user,
                if_match=if_match,
            )
            result = await run_query(
                op, arguments, ctx, self.executors, limit=self.config.settings.query_timeout
            )
        finally:
            self.queries_in_flight -= 1
        body = json.dumps(result, separators=(",", ":"), allow_nan=False).encode()
        if op.cacheable:
            self.query_cache.put(cache_key, body)
        reply = (
            paged_reply(result, spec, ask)
            if spec is not None and ask is not None
            else Response(body, media_type="application/json")
        )
        if ctx.etag is not None:  # NB: a query that answered one object's ETag (ADR 0049), paged too
            reply.headers["ETag"] = ctx.etag
        return reply

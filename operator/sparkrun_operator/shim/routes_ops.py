"""Operation routes: the checks in the reference daemon's order, then a job or a query."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from sparkrun_operator.ops.catalog import Operation
from sparkrun_operator.ops.errors import Conflict, FeatureDisabled, Forbidden, Invalid, NotFound
from sparkrun_operator.ops.invocation import OperationContext
from sparkrun_operator.ops.runner import run_query
from sparkrun_operator.ops.schema import request_validator
from sparkrun_operator.shim.identity import Caller
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
        if op.kind == "job":
            check = self.argument_checks.get(op.name)
            if check is not None:
                # NB: pure but not always cheap (catalog.import parses up to 256 KiB of YAML).
                await asyncio.to_thread(check, arguments, self.config.settings)
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
            return json_reply({"job_id": job_id, "events_url": f"/v1/jobs/{job_id}/events"}, 202)
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
                user=caller.user,
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

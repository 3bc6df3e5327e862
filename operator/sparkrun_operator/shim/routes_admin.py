"""Administration routes: ``/v1/snapshots``, ``/v1/reservations``, ``/v1/maintenance``, ``/v1/shutdown``."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from sparkrun_operator.ops import jobs as joblib
from sparkrun_operator.ops.errors import Conflict, Invalid, NotFound
from sparkrun_operator.ops.invocation import OperationContext
from sparkrun_operator.ops.runner import run_query
from sparkrun_operator.shim.state import ShimState, json_reply

__all__ = ["AdminRoutes"]


class AdminRoutes(ShimState):
    """Snapshots, reservations, reconcile, maintenance and shutdown."""

    async def snapshot(self, request: Request, name: str) -> Response:
        caller = self.caller(request)
        await self.gate.require(caller, "read")
        if name != "discovery.snapshot":
            raise NotFound("Unknown snapshot")
        op = self.catalog.get("discovery.snapshot")
        ctx = OperationContext(
            rest=self.rest,
            settings=self.config.settings,
            principal=caller.principal,
            manager=caller.manager,
            user=caller.user,
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
        return json_reply(sorted(claims.values(), key=lambda e: e["owner"]))

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
        return json_reply({"released": owner, "jobs": released})

    async def maintenance(self, request: Request) -> Response:
        await self.gate.require(self.caller(request), "admin")
        data = await self._body(request)
        if set(data) != {"drain"} or type(data["drain"]) is not bool:
            raise Invalid("Expected boolean drain")
        self.draining = data["drain"]
        return json_reply({"draining": self.draining})

    async def shutdown(self, request: Request) -> Response:
        await self.gate.require(self.caller(request), "admin")
        if await self._body(request) != {}:
            raise Invalid("Expected an empty shutdown object")
        if self.on_shutdown is None:
            raise Conflict("Server shutdown is unavailable")
        asyncio.get_running_loop().call_later(0.1, self.on_shutdown)
        return json_reply({"stopping": True, "workers_continue": True})

"""Event and stream routes: ``/v1/jobs/{id}/events``, ``/v1/events``, ``/v1/streams/{kind}``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator

from starlette.requests import Request
from starlette.types import ASGIApp

from sparkrun_operator.ops import jobs as joblib
from sparkrun_operator.ops.errors import DaemonError, Invalid, NotFound
from sparkrun_operator.shim.sse import HEARTBEAT, EventStream, frame
from sparkrun_operator.shim.state import ShimState

__all__ = ["EventRoutes"]


class EventRoutes(ShimState):
    """Server-sent events: one job's events, all jobs' snapshots, logs and monitor."""

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


def _gone(first: int) -> DaemonError:
    from sparkrun_operator.ops.errors import Gone

    return Gone(f"Event cursor expired; retained events start at {first}")

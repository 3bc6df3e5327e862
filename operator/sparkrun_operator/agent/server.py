"""The agent's HTTP endpoints (plain HTTP on the pod's ``telemetry`` port, read-only):

- ``GET /v1/sample``: the latest :class:`~sparkrun_operator.api.telemetry.NodeSample` as JSON
  (the shim's ``/v1/streams/monitor`` reads it); 503 before the first sample;
- ``GET /metrics``: Prometheus text (:mod:`.metrics`);
- ``GET /healthz``: 200 while samples are fresh (the sampling loop runs), else 503. NVML being
  unavailable is not unhealthy: the agent reports it and keeps running.

Nothing here is secret (the same numbers as ``nvidia-smi``); the chart's NetworkPolicy narrows
who may connect.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from sparkrun_operator.api.telemetry import SAMPLE_PATH, NodeSample

#: Prometheus' text format.
METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Source(Protocol):
    """What the endpoints read: the latest sample, its metrics, and when it was taken."""

    @property
    def latest(self) -> NodeSample | None: ...

    def metrics(self) -> bytes: ...

    def fresh(self, now: float) -> bool: ...


def app(source: Source, clock: Callable[[], float] = time.monotonic) -> Starlette:
    """The ASGI application over ``source``."""

    async def sample(_: Request) -> Response:
        latest = source.latest
        if latest is None:
            return JSONResponse({"error": "no sample yet"}, status_code=503)
        return JSONResponse(latest.model_dump(mode="json", by_alias=True))

    async def metrics(_: Request) -> Response:
        return Response(source.metrics(), media_type=METRICS_TYPE)

    async def healthz(_: Request) -> Response:
        if source.fresh(clock()):
            return PlainTextResponse("ok\n")
        return PlainTextResponse("sampling stalled\n", status_code=503)

    return Starlette(
        routes=[
            Route(SAMPLE_PATH, sample, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
            Route("/healthz", healthz, methods=["GET"]),
        ]
    )

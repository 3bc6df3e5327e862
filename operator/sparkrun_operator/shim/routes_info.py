"""Infrastructure routes: ``/v1/health``, ``/v1/info``, ``/v1/ops``, ``/openapi.json``, ``/docs``."""

from __future__ import annotations

import json

from starlette.requests import Request
from starlette.responses import Response

from sparkrun_operator.shim import docs, openapi
from sparkrun_operator.shim.state import PROTOCOL, ShimState, json_reply

__all__ = ["InfoRoutes"]


class InfoRoutes(ShimState):
    """Health, info, the operation list, the OpenAPI document and the docs page."""

    async def health(self, request: Request) -> Response:
        return json_reply({"status": "ok", "protocol": PROTOCOL})

    async def info(self, request: Request) -> Response:
        caller = self.caller(request)
        await self.gate.require(caller, "read")
        settings = self.config.settings
        return json_reply(
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
        return json_reply(rows)

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

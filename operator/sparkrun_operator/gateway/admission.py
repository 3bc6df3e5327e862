"""Admission: whether a request may go on, and to which workload.

- **Limits and budgets** (:mod:`.limits`): an inference request counts against the requests in
  flight (in all and per API key, 503/429 beyond) for as long as it runs, and a request's body
  holds its reservation in the buffered-bytes budget until the request ends.
- **Keys** (:mod:`.auth`): with a key source configured a request needs a known key (401); a
  model the key does not grant is treated as absent (404 ``No instance found``).
- **Resolution**: a model name or alias resolves in the routing snapshot (a dict lookup) to a
  workload with the endpoint's capability (400 otherwise); a Sleeping/Stopped workload is woken
  (:mod:`.wake`) and the request held until it routes.

A service below the route handlers: it knows requests (:class:`~.request.Ctx`) and workloads,
never a handler or the application.
"""

from __future__ import annotations

from typing import Any

from sparkrun_operator.plan.served import TEXT_GENERATION

from .auth import Grant, KeySource
from .config import GatewaySettings
from .errors import GatewayError, bad_request, lacks_capability, no_instance
from .limits import ByteBudget, InFlight
from .request import Ctx
from .routing import RoutingSource, Workload
from .wake import WakeCoordinator


class Admission:
    """Limits, keys and model resolution for the requests of one gateway."""

    def __init__(
        self,
        settings: GatewaySettings,
        source: RoutingSource,
        keys: KeySource | None,
        wakes: WakeCoordinator,
    ) -> None:
        self.settings = settings
        self.source = source
        self.keys = keys
        self.wakes = wakes
        self.in_flight = InFlight(settings.max_in_flight, settings.max_in_flight_per_key)
        self.bodies = ByteBudget(settings.max_buffered_body_bytes)

    # -- limits and budgets -----------------------------------------------------------------

    def enter(self, ctx: Ctx) -> str | None:
        """Count an inference request in flight (503/429 over a limit); returns what to
        :meth:`leave` with (the caller's digest when it sent a key)."""
        per_key = ctx.caller if ctx.api_key else None
        self.in_flight.enter(per_key)
        return per_key

    def leave(self, per_key: str | None) -> None:
        self.in_flight.leave(per_key)

    async def read_body(self, ctx: Ctx) -> None:
        """Read the request body into ``ctx.body``, reserved in the buffered-bytes budget
        (held until :meth:`release_body`)."""
        ctx.body = await ctx.read_body(self.settings, self.bodies)

    def release_body(self, ctx: Ctx) -> None:
        if ctx.reserved:
            self.bodies.release(ctx.reserved)
            ctx.reserved = 0

    # -- keys and models ----------------------------------------------------------------------

    def authorize(self, ctx: Ctx) -> Grant | None:
        """The caller's grant; 401 when keys are configured and the key is missing or unknown."""
        if self.keys is None:
            return None
        if not ctx.api_key:
            raise GatewayError(401, "Missing API key (send Authorization: Bearer <key> or x-api-key)")
        grant = self.keys.lookup(ctx.api_key)
        if grant is None:
            raise GatewayError(401, "Invalid API key", code="invalid_api_key")
        return grant

    def granted(self, ctx: Ctx, name: str) -> Workload | None:
        """The workload serving ``name`` if the caller's key grants it (401 for a bad key)."""
        grant = self.authorize(ctx)
        workload = self.source.snapshot().lookup(name)
        if workload is None or (grant is not None and not grant.allows(name, workload.namespace)):
            return None
        return workload

    def visible(self, ctx: Ctx) -> list[tuple[str, Workload]]:
        """Every (name, workload) that routes and the caller's key may use, aliases included (a
        name another workload keeps is not listed for the loser)."""
        grant = self.authorize(ctx)
        table = self.source.snapshot()
        return [
            (name, wl)
            for name, wl in table.by_name.items()
            if grant is None or grant.allows(name, wl.namespace)
        ]

    async def admit(self, ctx: Ctx, model: Any, capability: str) -> Workload:
        """Resolve ``model`` to a routable workload with ``capability``, waking it if needed."""
        if not isinstance(model, str) or not model:
            raise bad_request("'model' is required and must be a non-empty string", param="model")
        workload = self.granted(ctx, model)
        if workload is None:
            raise no_instance(model)
        ctx.model_label = model
        if capability not in workload.capabilities:
            nice = "TextGeneration" if capability == TEXT_GENERATION else "TextEmbedding"
            raise lacks_capability(model, nice)
        if workload.routable:
            return workload
        if workload.state == "Running":
            raise no_instance(model)
        return await self.wakes.ready(workload, model)

"""Admission: whether a request may go on, and to which workload.

- **Limits and budgets** (:mod:`.limits`): an inference request counts against the requests in
  flight (in all and per API key, 503/429 beyond) for as long as it runs, and a request's body
  holds its reservation in the buffered-bytes budget until the request ends.
- **Who calls** (the gateway's authentication mode): ``none``, every caller is the same caller;
  ``keys`` (:mod:`.auth`), a request needs a known key (401); ``kubernetes``
  (:mod:`.identity`), a token the apiserver authenticates (401), and each workload needs a
  SubjectAccessReview (cached). A model the caller may not use is treated as absent (404
  ``No instance found``): in listings, in resolution, and so for a wake, which only a resolved
  request starts.
- **Resolution**: a model name or alias resolves in the routing snapshot (a dict lookup) to a
  workload with the endpoint's capability (400 otherwise); a resting workload (Sleeping, Stopped,
  zero replicas of the idle policy) is woken (:mod:`.wake`) and the request held until it routes,
  as is one that is starting (Running, replicas asked for, no ready endpoint yet); a workload the
  user scaled to 0 replicas is not served (404).

A service below the route handlers: it knows requests (:class:`~.request.Ctx`) and workloads,
never a handler or the application.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from sparkrun_operator.api import servedname
from sparkrun_operator.api.clip import echo
from sparkrun_operator.plan.served import TEXT_GENERATION
from sparkrun_operator.render.keys import HEADER_GATEWAY_MODEL_NAME

from .auth import KeySource
from .config import GatewaySettings
from .errors import GatewayError, bad_request, lacks_capability, no_instance
from .limits import ByteBudget, InFlight
from .request import Ctx
from .routing import RoutingSource, Workload
from .wake import WakeCoordinator

if TYPE_CHECKING:  # NB: only --auth=kubernetes loads it (and with it the Kubernetes client)
    from .identity import KubeIdentity

Held = tuple[str | None, str | None]
"""What :meth:`Admission.enter` counted: (caller, tenant)."""

MODEL_HEADER: Final = HEADER_GATEWAY_MODEL_NAME.encode()
"""``x-gateway-model-name`` as ASGI names it (lower case): the Inference Extension's model header."""
MODEL_HEADER_MAX_BYTES: Final = 4 * servedname.SERVED_NAME_MAX_LENGTH
"""The most bytes of the header decoded (a served name's characters, each at most 4 bytes of UTF-8)."""
_ECHO: Final = 128
"""Characters of each name quoted when the body and the header disagree."""


def model_of(ctx: Ctx, doc: dict[str, Any]) -> Any:
    """The model name a request uses: the body's ``model`` or, when the body names none
    (absent, ``null`` or ``""``), ``X-Gateway-Model-Name``. When both are given they must be
    equal (400 in the route's family otherwise). The header is sent once, at most
    :data:`MODEL_HEADER_MAX_BYTES`, UTF-8, and a valid served name (:mod:`~..api.servedname`).
    Without the header this is ``doc.get("model")`` and one dict probe."""
    raw = ctx.headers.get(MODEL_HEADER)
    if raw is None:
        return doc.get("model")
    name = _header_name(ctx, raw)
    given = doc.get("model")
    if given is None or given == "":
        return name
    if given != name:
        raise bad_request(
            f"The body's model {echo(given, _ECHO)} differs from the X-Gateway-Model-Name header's "
            f"{echo(name, _ECHO)}: send one of them, or the same name in both",
            param="model",
        )
    return given


def _header_name(ctx: Ctx, raw: bytes) -> str:
    """The header's model name, checked (see :func:`model_of`)."""
    if sum(1 for key, _ in ctx.scope["headers"] if key == MODEL_HEADER) > 1:
        raise bad_request("X-Gateway-Model-Name must be sent once", param="model")
    if len(raw) > MODEL_HEADER_MAX_BYTES:
        raise bad_request(f"X-Gateway-Model-Name has more than {MODEL_HEADER_MAX_BYTES} bytes", param="model")
    try:
        name = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise bad_request("X-Gateway-Model-Name is not UTF-8", param="model") from None
    problem = servedname.problem(name)
    if problem is not None:
        raise bad_request(f"X-Gateway-Model-Name {problem}", param="model")
    return name


class Admission:
    """Limits, keys and model resolution for the requests of one gateway."""

    def __init__(
        self,
        settings: GatewaySettings,
        source: RoutingSource,
        keys: KeySource | None,
        wakes: WakeCoordinator,
        identity: KubeIdentity | None = None,
    ) -> None:
        if keys is not None and identity is not None:
            raise ValueError("one authentication mode: API keys or Kubernetes tokens, not both")
        self.settings = settings
        self.source = source
        self.keys = keys
        self.identity = identity
        self.wakes = wakes
        self.in_flight = InFlight(
            settings.max_in_flight, settings.max_in_flight_per_key, settings.tenant_limit
        )
        self.bodies = ByteBudget(settings.max_buffered_body_bytes)

    # -- limits and budgets -----------------------------------------------------------------

    def enter(self, ctx: Ctx) -> Held:
        """Count an inference request in flight (503/429 over a limit); returns what to
        :meth:`leave` with: the caller when it sent a key or token, and its tenant, the namespace
        of its key's Secret or of its ServiceAccount (``None`` for an administrator's key, a
        user that is no ServiceAccount, or without authentication)."""
        per_key = ctx.caller if ctx.api_key else None
        tenant = self.tenant_of(ctx)
        self.in_flight.enter(per_key, tenant)
        return per_key, tenant

    @staticmethod
    def tenant_of(ctx: Ctx) -> str | None:
        """The caller's tenant: its key Secret's namespace, or its ServiceAccount's (see :meth:`enter`)."""
        if ctx.grant is not None:
            return ctx.grant.namespace
        if ctx.user is not None and (account := ctx.user.service_account) is not None:
            return account[0]
        return None

    def leave(self, held: Held) -> None:
        self.in_flight.leave(*held)

    async def read_body(self, ctx: Ctx) -> None:
        """Read the request body into ``ctx.body``, reserved in the buffered-bytes budget
        (held until :meth:`release_body`; one tenant holds at most half of it)."""
        ctx.body = await ctx.read_body(self.settings, self.bodies, self.tenant_of(ctx))

    def release_body(self, ctx: Ctx) -> None:
        if ctx.reserved:
            self.bodies.release(ctx.reserved, ctx.reserved_for)
            ctx.reserved = 0

    # -- callers and models -----------------------------------------------------------------

    async def identify(self, ctx: Ctx) -> None:
        """Who calls (once per request): sets ``ctx.caller`` and the caller's grant or user.

        401 for a missing or unknown key or token; in ``kubernetes`` mode 429/503 when the
        TokenReview is throttled or could not be made. Mode ``none`` knows one caller ("")."""
        if ctx.identified:
            return
        if self.keys is not None:
            if not ctx.api_key:
                raise GatewayError(401, "Missing API key (send Authorization: Bearer <key> or x-api-key)")
            grant = self.keys.lookup(ctx.api_key)
            if grant is None:
                raise GatewayError(401, "Invalid API key", code="invalid_api_key")
            ctx.grant = grant
        elif self.identity is not None:
            client = ctx.scope.get("client")
            ctx.user = await self.identity.authenticate(ctx.api_key, source=str(client[0]) if client else "")
            ctx.caller = self.identity.caller_of(ctx.user)
        ctx.identified = True

    async def may_use(self, ctx: Ctx, name: str, workload: Workload) -> bool:
        """Whether the (identified) caller may use ``name`` of ``workload``."""
        if ctx.grant is not None:
            return ctx.grant.allows(name, workload.namespace)
        if ctx.user is not None and self.identity is not None:
            return await self.identity.may_use(ctx.user, workload.namespace, workload.name)
        return True

    async def granted(self, ctx: Ctx, name: str) -> Workload | None:
        """The workload serving ``name`` if the caller may use it (401 for a bad key or token)."""
        await self.identify(ctx)
        workload = self.source.snapshot().lookup(name)
        if workload is None or not await self.may_use(ctx, name, workload):
            return None
        return workload

    async def visible(self, ctx: Ctx) -> list[tuple[str, Workload]]:
        """Every (name, workload) that routes and the caller may use, aliases included (a name
        another workload keeps is not listed for the loser)."""
        await self.identify(ctx)
        named = list(self.source.snapshot().by_name.items())
        if ctx.grant is not None:
            grant = ctx.grant
            return [(name, wl) for name, wl in named if grant.allows(name, wl.namespace)]
        if ctx.user is not None and self.identity is not None:
            usable = await self.identity.usable(ctx.user, {wl.key: wl for _, wl in named}.values())
            return [(name, wl) for name, wl in named if wl.key in usable]
        return named

    async def may_read_metrics(self, ctx: Ctx) -> bool:
        """``/metrics`` on the serving port: open without authentication; else an administrator
        key, or (``kubernetes``) a user that may ``get`` the non-resource URL ``/metrics``."""
        await self.identify(ctx)
        if ctx.grant is not None:
            return ctx.grant.admin
        if ctx.user is not None and self.identity is not None:
            return await self.identity.may_read_metrics(ctx.user)
        return True

    async def admit(self, ctx: Ctx, model: Any, capability: str) -> Workload:
        """Resolve ``model`` to a routable workload with ``capability``, waking it or waiting for it
        (bounded by the wake deadline; the request counts in flight meanwhile) if needed."""
        if not isinstance(model, str) or not model:
            raise bad_request("'model' is required and must be a non-empty string", param="model")
        workload = await self.granted(ctx, model)
        if workload is None:
            raise no_instance(model)
        ctx.model_label = model
        if capability not in workload.capabilities:
            nice = "TextGeneration" if capability == TEXT_GENERATION else "TextEmbedding"
            raise lacks_capability(model, nice)
        if workload.routable:
            return workload
        if not workload.wakeable:  # NB: the user's own replicas: 0 (or a file's unplaced entry)
            raise no_instance(model)
        return await self.wakes.ready(workload, model)

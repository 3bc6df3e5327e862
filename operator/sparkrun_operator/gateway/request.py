"""One request as the gateway holds it: its ASGI channel and state (:class:`Ctx`), and ASGI types.

A :class:`Ctx` owns one request's ASGI channel: it reads and decodes the body (bounded), writes
the response, watches for a client disconnect and answers a cancelled request. The dispatch
(:mod:`.app`), the services (:mod:`.services`) and the route handlers all use it; it imports none
of them (only the leaf modules below them).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sparkrun_operator.errors import SparkrunError

from .auth import Grant
from .balancer import Backend
from .config import GatewaySettings
from .errors import Family, GatewayError, bad_request, render
from .limits import ByteBudget

if TYPE_CHECKING:  # NB: the gateway imports no Kubernetes client unless --auth=kubernetes
    from sparkrun_operator.k8s.auth import UserInfo

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Headers = Sequence[tuple[bytes, bytes]]

JSON = b"application/json"
NDJSON = b"application/x-ndjson"


DIRECT_BODY = "sparkrun.direct_body"
"""The ASGI scope extension (``{"body": DirectBody}``) of the gateway's own HTTP protocol."""


class DirectBody:
    """Chunked body writes straight to the client transport, bypassing ASGI ``send``.

    Offered by the gateway's HTTP protocol (``server.HeaderDeadlineProtocol``) for the response
    of one request; used only between ``http.response.start`` and the final ``send`` (both still
    go through ASGI, so the server's own state stays right). ``cycle`` is uvicorn's
    request/response cycle: its ``transport``, ``flow`` (write pause) and ``disconnected``.
    """

    __slots__ = ("_cycle",)

    def __init__(self, cycle: Any) -> None:
        self._cycle = cycle

    def write(self, data: bytes) -> bool:
        """Send ``data`` as one chunk; False when the client is gone (nothing is written)."""
        cycle = self._cycle
        if cycle.disconnected or cycle.transport.is_closing():
            return False
        cycle.transport.write(b"%x\r\n%b\r\n" % (len(data), data))
        return True

    @property
    def chunked(self) -> bool:
        """True when the response started with chunked framing (what :meth:`write` speaks)."""
        return self._cycle.chunked_encoding is True

    @property
    def paused(self) -> bool:
        """True while the client's socket buffer is over its high-water mark."""
        return bool(self._cycle.flow.write_paused) and not self._cycle.disconnected

    async def drain(self) -> None:
        """Until the client's socket buffer drained below its low-water mark (or it left)."""
        await self._cycle.flow.drain()


class Cancelled(SparkrunError):
    """Raised inside a request task that ``/v1/cancel`` or a disconnect stopped."""


@dataclass(eq=False)
class Ctx:
    """Per-request state."""

    scope: Scope
    receive: Receive
    send: Send
    rid: str
    family: Family
    route: str
    start: float
    headers: dict[bytes, bytes]
    task: asyncio.Task[Any] | None = None
    upstream_rid: str = ""
    """The ``x-request-id`` the engine gets when it is not :attr:`rid`: a client-chosen id with a
    new one appended, so requests of two callers that chose one id never share it at an engine
    (engines key their requests, and aborts, by it)."""
    body: bytes = b""
    doc: dict[str, Any] = field(default_factory=dict)
    model_label: str = "unknown"
    status: int = 0
    started: bool = False
    finished: bool = False
    cancel_reason: str | None = None
    backend: Backend | None = None
    deadline: asyncio.TimerHandle | None = None
    """The total deadline's timer (armed when the request goes upstream)."""
    reserved: int = 0
    """Body bytes this request holds in the gateway's :class:`~.limits.ByteBudget`."""
    reserved_for: str | None = None
    """The tenant :attr:`reserved` counts against (``None``: no tenant)."""
    endpoints: tuple[str, ...] = ()
    """The endpoints of the workload the request went to (for the ejection cap)."""
    stream_end: Callable[[str], bytes] | None = None
    """Bytes that end the current stream with an in-band error in the family's protocol."""
    api_key: str | None = None
    """The API key or token the request sent (read once; ``None`` without one or without
    authentication)."""
    caller: str = ""
    """Who is calling: the key's digest (hex) with keys, the TokenReview user's uid (else name)
    with Kubernetes tokens, ``""`` without authentication (one caller). Scopes the cancel
    registry and the per-caller in-flight cap; the raw key or token is never a dict key."""
    identified: bool = False
    """The caller was authenticated (``Admission.identify`` ran)."""
    grant: Grant | None = None
    """The caller's key grant (API keys mode)."""
    user: UserInfo | None = None
    """The caller's Kubernetes user (``kubernetes`` mode)."""

    async def start_response(self, status: int, ctype: bytes, extra: Headers = ()) -> None:
        self.status = status
        self.started = True
        headers = [(b"content-type", ctype), (b"x-request-id", self.rid.encode()), *extra]
        await self.send({"type": "http.response.start", "status": status, "headers": headers})

    async def body_part(self, data: bytes, more: bool = True) -> None:
        if not more:
            self.finished = True
        await self.send({"type": "http.response.body", "body": data, "more_body": more})

    async def respond(self, status: int, body: bytes, ctype: bytes = JSON, extra: Headers = ()) -> None:
        self.finished = True
        await self.start_response(status, ctype, ((b"content-length", str(len(body)).encode()), *extra))
        await self.send({"type": "http.response.body", "body": body, "more_body": False})

    async def error(self, exc: GatewayError) -> None:
        extra: Headers = ()
        if exc.retry_after is not None:
            extra = ((b"retry-after", str(round(exc.retry_after)).encode()),)
        await self.respond(exc.status, exc.body(self.family), extra=extra)

    def parse_json(self) -> dict[str, Any]:
        """Decode the body once (C decoder) into ``doc``; 400 unless it is a JSON object."""
        if not self.body:
            raise bad_request("Request body is empty; expected a JSON object")
        try:
            doc = json.loads(self.body)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
            # NB: RecursionError: nested deeper than the C decoder recurses (about 1000 levels)
            raise bad_request(f"Invalid JSON in request body: {exc}") from None
        if not isinstance(doc, dict):
            raise bad_request("Request body must be a JSON object")
        self.doc = doc
        return doc

    async def read_body(
        self, settings: GatewaySettings, budget: ByteBudget | None = None, tenant: str | None = None
    ) -> bytes:
        """The request body: 413 above ``max_body_bytes``, 408 when not read in ``body_timeout``.

        With ``budget``, the declared size (else ``max_body_bytes``) is reserved first (for
        ``tenant``), cut to the size read once it is read (a small body sent without a length must
        not hold ``max_body_bytes`` while its request waits), and held in ``reserved`` until
        whoever owns the request releases it.
        """
        limit = settings.max_body_bytes
        declared = self.headers.get(b"content-length")
        size = limit
        if declared is not None:
            try:
                size = int(declared)
            except ValueError:
                raise bad_request("Invalid Content-Length header") from None
            if size > limit:
                raise GatewayError(413, f"Request body of {size} bytes exceeds the limit of {limit} bytes")
        if budget is not None and size:
            self.reserved = await budget.reserve(size, settings.body_timeout, tenant)
            self.reserved_for = tenant
        parts: list[bytes] = []
        total = 0
        try:
            async with asyncio.timeout(settings.body_timeout):
                while True:
                    message = await self.receive()
                    if message["type"] == "http.disconnect":
                        raise Cancelled()
                    chunk = message.get("body", b"")
                    total += len(chunk)
                    if total > limit:
                        raise GatewayError(413, f"Request body exceeds the limit of {limit} bytes")
                    parts.append(chunk)
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            raise GatewayError(408, "Timed out reading the request body") from None
        if budget is not None and self.reserved > total:
            budget.release(self.reserved - total, self.reserved_for)
            self.reserved = total
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def watch_disconnect(self) -> asyncio.Future[Message]:
        """Cancel the request's task when the client disconnects before the response finished.

        NB: after the body is read, ``receive()`` only returns on disconnect (or once the
        response completed, which ``finished`` tells apart).
        """
        watcher = asyncio.ensure_future(self.receive())

        def on_done(fut: asyncio.Future[Message]) -> None:
            if fut.cancelled() or fut.exception() is not None or self.finished:
                return
            if fut.result().get("type") == "http.disconnect" and self.task is not None:
                self.cancel_reason = self.cancel_reason or "disconnect"
                self.task.cancel()

        watcher.add_done_callback(on_done)
        return watcher

    def expire(self) -> None:
        """The total deadline passed: stop the request (answered by :meth:`deadline_response`)."""
        if self.finished or self.task is None or self.cancel_reason is not None:
            return
        self.cancel_reason = "deadline"
        self.task.cancel()

    async def deadline_response(self) -> None:
        message = "The request exceeded the gateway's total deadline"
        if not self.started:
            await self.error(GatewayError(504, message, code="deadline_exceeded"))
        elif self.stream_end is not None:
            await self.body_part(self.stream_end(message), more=False)
        else:
            await self.body_part(b"", more=False)

    async def cancelled_response(self) -> None:
        # A cancelled stream ends with an error event (then [DONE]); a non-streamed
        # request gets an error body instead of a partial answer.
        message = "The generation was cancelled before it completed"
        if not self.started:
            await self.respond(499, render(self.family, 499, message, code="cancelled"))
        elif self.stream_end is not None:
            await self.body_part(self.stream_end(message), more=False)
        else:
            await self.body_part(b"", more=False)

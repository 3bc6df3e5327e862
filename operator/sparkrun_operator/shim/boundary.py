"""The ASGI boundary of the shim: authentication, request-body limits and error envelopes.

Pure ASGI (no ``BaseHTTPMiddleware``), so streaming responses pass through untouched.

- ``/v1/health`` is public; every other request needs a caller: a ``Bearer`` token reviewed by
  TokenReview, or, on the aggregated-API listener only (the connection's client certificate was
  verified against the request-header CA and its CN is allowed, see :mod:`.server`), the user in
  the front-proxy headers. Anything else is 401 with ``WWW-Authenticate: Bearer``. A source
  address that keeps sending unknown tokens is 429 (``RateLimited``, ``Retry-After``) once its
  TokenReview budget is spent (``k8s.auth.SourceLimiter``).
- Bodies of POST/PUT/PATCH are read up front: more than ``body_limit`` bytes is 413, a body that
  does not arrive within ``body_timeout`` seconds is 408.
- :class:`Errors` turns a :class:`~sparkrun_operator.ops.errors.DaemonError` raised before the
  response started into its JSON envelope, and anything unexpected into an opaque 500.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any
from urllib.parse import unquote

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sparkrun_operator.k8s import errors as k8s_errors
from sparkrun_operator.k8s.auth import RequestHeaderConfig, ReviewsThrottled
from sparkrun_operator.ops.errors import (
    BodyTooLarge,
    DaemonError,
    RequestTimeout,
    TooManyRequests,
    Unauthenticated,
    error_body,
)
from sparkrun_operator.ops.runner import as_daemon_error
from sparkrun_operator.shim.identity import Caller, Gate

__all__ = ["CALLER", "FRONT_PROXY", "PUBLIC_PATHS", "Boundary", "Errors", "json_response"]

log = logging.getLogger(__name__)

#: ASGI scope keys set by the shim.
CALLER = "sparkrun.caller"
FRONT_PROXY = "sparkrun.front_proxy"
PUBLIC_PATHS = frozenset({"/v1/health"})


async def json_response(send: Send, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
    """Send one complete JSON response."""
    data = json.dumps(body, separators=(",", ":"), allow_nan=False).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": data})


class Errors:
    """Envelopes for errors raised before a response started."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking)
        except Exception as error:
            if isinstance(error, k8s_errors.KubeError):
                # NB: typed (and retryable when the apiserver did not answer), not an opaque 500.
                log.warning("%s %s: %s", scope.get("method"), scope.get("path"), error, exc_info=error)
                mapped: Exception = as_daemon_error(error)
            else:
                if not isinstance(error, DaemonError):
                    log.exception("%s %s failed", scope.get("method"), scope.get("path"))
                mapped = error
            if started:
                raise
            status, body, headers = error_body(mapped)
            await json_response(send, status, body, headers)


def _header_values(scope: Scope, name: bytes) -> list[str]:
    return [v.decode("latin-1") for k, v in scope.get("headers", ()) if k == name]


class Boundary:
    """Authentication and body limits in front of the shim's routes."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        gate: Gate,
        body_limit: int = 1024 * 1024,
        body_timeout: float = 30.0,
        front_proxy: RequestHeaderConfig | None = None,
    ) -> None:
        self.app = app
        self.gate = gate
        self.body_limit = body_limit
        self.body_timeout = body_timeout
        self.front_proxy = front_proxy

    async def _caller(self, scope: Scope) -> Caller | None:
        if scope.get(FRONT_PROXY):
            config = self.front_proxy or RequestHeaderConfig(client_ca_pem="")
            username = next(
                (v for h in config.username_headers for v in _header_values(scope, h.lower().encode()) if v),
                "",
            )
            if not username:
                return None
            groups = [v for h in config.group_headers for v in _header_values(scope, h.lower().encode())]
            extra: dict[str, list[str]] = {}
            prefixes = [p.lower().encode() for p in config.extra_headers_prefixes]
            for key, value in scope.get("headers", ()):
                for prefix in prefixes:
                    if key.startswith(prefix) and len(key) > len(prefix):
                        name = unquote(key[len(prefix) :].decode("latin-1")).lower()
                        extra.setdefault(name, []).append(value.decode("latin-1"))
            return await self.gate.from_front_proxy(username, groups, extra)
        authorization = next(iter(_header_values(scope, b"authorization")), "")
        if not authorization.startswith("Bearer "):
            return None
        token = authorization[7:].strip()
        if not token or len(token) > 16384:
            return None
        client = scope.get("client")
        return await self.gate.from_token(token, source=str(client[0]) if client else "")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"] not in PUBLIC_PATHS:
            try:
                caller = await self._caller(scope)
            except DaemonError:
                raise
            except ReviewsThrottled as error:
                raise TooManyRequests(
                    "Too many authentication attempts from this address", retry_after=error.retry_after
                ) from error
            except Exception as error:
                raise DaemonError(
                    "Authentication is unavailable: the Kubernetes API did not answer",
                    retryable=True,
                    type_name="AuthenticationUnavailable",
                ) from error
            if caller is None:
                raise Unauthenticated()
            scope[CALLER] = caller
        if scope["method"] in ("POST", "PUT", "PATCH"):
            body = await self._read_body(receive)
            if body is None:
                return  # client went away
            delivered = False

            async def replay() -> Message:
                nonlocal delivered
                if not delivered:
                    delivered = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()

            await self.app(scope, replay, send)
            return
        await self.app(scope, receive, send)

    async def _read_body(self, receive: Receive) -> bytes | None:
        chunks = bytearray()
        deadline = time.monotonic() + self.body_timeout
        while True:
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - time.monotonic()))
            except TimeoutError as error:
                raise RequestTimeout("Request body timed out") from error
            if message["type"] == "http.disconnect":
                return None
            chunks.extend(message.get("body", b""))
            if len(chunks) > self.body_limit:
                raise BodyTooLarge("Request body exceeds limit")
            if not message.get("more_body", False):
                return bytes(chunks)

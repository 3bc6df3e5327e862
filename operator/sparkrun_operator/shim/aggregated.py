"""The shim as a Kubernetes aggregated API: ``APIService v1alpha1.daemon.sparkrun.dev``.

kube-apiserver proxies ``/apis/daemon.sparkrun.dev/v1alpha1/...`` to the shim's aggregated
listener over TLS, authenticating itself with the front-proxy client certificate and passing the
user it authenticated in ``X-Remote-User`` / ``X-Remote-Group`` / ``X-Remote-Extra-*``.

- :class:`Discovery` answers the discovery documents (``/apis``, ``/apis/daemon.sparkrun.dev``,
  ``/apis/daemon.sparkrun.dev/v1alpha1``) the aggregator and kubectl read; the group has no
  resources of its own, the daemon routes live under the version prefix
  (``/apis/daemon.sparkrun.dev/v1alpha1/v1/info`` is ``/v1/info``).
- :class:`FrontProxyProtocol` is the HTTP protocol of the aggregated listener. The listener's TLS
  context requires a client certificate signed by the request-header CA
  (``requestheader-client-ca-file``); the protocol additionally checks the certificate's common
  name against ``requestheader-allowed-names`` (when the list is not empty) and only then marks
  the connection's requests as coming from the front proxy, so identity headers from anyone
  else are never trusted.
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from sparkrun_operator.api.meta import DAEMON_API_GROUP, DAEMON_API_PREFIX, VERSION
from sparkrun_operator.shim.boundary import FRONT_PROXY, json_response
from sparkrun_operator.shim.listener import GuardedProtocol

__all__ = ["GROUP", "VERSION", "Discovery", "FrontProxyProtocol", "front_proxy_protocol"]

GROUP = DAEMON_API_GROUP
GROUP_VERSION = f"{GROUP}/{VERSION}"
PREFIX = DAEMON_API_PREFIX


def _group() -> dict[str, Any]:
    version = {"groupVersion": GROUP_VERSION, "version": VERSION}
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": GROUP,
        "versions": [version],
        "preferredVersion": version,
    }


class Discovery:
    """Serves the aggregated API's discovery documents; everything else goes to ``app``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET":
            path = scope["path"].rstrip("/") or "/"
            if path == PREFIX:
                await json_response(
                    send,
                    200,
                    {
                        "kind": "APIResourceList",
                        "apiVersion": "v1",
                        "groupVersion": GROUP_VERSION,
                        "resources": [],
                    },
                )
                return
            if path == f"/apis/{GROUP}":
                await json_response(send, 200, _group())
                return
            if path == "/apis":
                await json_response(
                    send, 200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": [_group()]}
                )
                return
            if path in ("/healthz", "/readyz", "/livez"):
                await json_response(send, 200, {"status": "ok"})
                return
        await self.app(scope, receive, send)


def _common_name(cert: dict[str, Any] | None) -> str | None:
    for rdn in (cert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


class FrontProxyProtocol(GuardedProtocol):
    """Marks requests of connections authenticated with an allowed front-proxy certificate."""

    #: Common names accepted (empty: any certificate signed by the request-header CA).
    allowed_names: frozenset[str] = frozenset()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        ssl_object = transport.get_extra_info("ssl_object")
        cert = ssl_object.getpeercert() if ssl_object is not None else None
        name = _common_name(cert)
        trusted = cert is not None and (not self.allowed_names or name in self.allowed_names)
        inner = self.app

        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] == "http":
                scope[FRONT_PROXY] = trusted
                if not trusted and not scope["path"].startswith("/healthz"):
                    await json_response(send, 401, {"detail": "Authentication required"})
                    return
            await inner(scope, receive, send)

        self.app = app
        super().connection_made(transport)


def front_proxy_protocol(allowed: frozenset[str]) -> type[FrontProxyProtocol]:
    """The protocol class for one aggregated listener, accepting the common names ``allowed``."""
    return type("BoundFrontProxyProtocol", (FrontProxyProtocol,), {"allowed_names": allowed})

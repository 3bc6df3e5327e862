"""Serving the gateway with uvicorn: the command line, and a header deadline uvicorn lacks.

``python -m sparkrun_operator.gateway --routes FILE [--host H] [--port P] [--keys FILE] ...``

uvicorn has no limit on how long a client may take to send its request head (a slow-loris client
holds a connection forever), nor on its size, so the HTTP protocol is uvicorn's httptools
protocol plus a timer and a byte count: a connection whose request head is not complete
``header_timeout`` seconds after the connection (or after the first byte of a later request) gets
``408``, one whose head exceeds ``max_header_bytes`` gets ``431``; both are then closed.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import socket
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from sparkrun_operator.api import namepolicy
from sparkrun_operator.api.namepolicy import NamePolicy

from .app import Gateway
from .auth import KeySource, MergedKeySource, StaticKeySource
from .config import GatewaySettings
from .request import DIRECT_BODY, DirectBody
from .routing import StaticRoutingSource
from .workers import supervise, worker_index

if TYPE_CHECKING:  # NB: loaded (with the Kubernetes client) only for --auth=kubernetes
    from .identity import KubeIdentity

log = logging.getLogger("sparkrun.gateway")


def _refusal(status: bytes, message: bytes, kind: bytes) -> bytes:
    code = status.split(b" ")[0]
    body = b'{"error":{"message":"%s","type":"%s","code":%s}}' % (message, kind, code)
    return (
        b"HTTP/1.1 %s\r\ncontent-type: application/json\r\nconnection: close\r\n"
        b"content-length: %d\r\n\r\n%s" % (status, len(body), body)
    )


_TIMEOUT_RESPONSE = _refusal(b"408 Request Timeout", b"request head not received in time", b"timeout_error")
_TOO_LARGE_RESPONSE = _refusal(
    b"431 Request Header Fields Too Large", b"request head too large", b"invalid_request_error"
)
_HEAD_ENDS = (b"\r\n\r\n", b"\n\n")


class HeaderDeadlineProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a deadline and a size limit for each request head."""

    header_timeout: float = 10.0
    max_header_bytes: int = 32 * 1024

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None
        self._in_head = True
        self._head_bytes = 0
        self._head_tail = b""

    def data_received(self, data: bytes) -> None:
        if self._in_head and not self._head_fits(data):
            self._refuse(_TOO_LARGE_RESPONSE)
            return
        super().data_received(data)

    def _head_fits(self, data: bytes) -> bool:
        window = self._head_tail + data
        ends = [i + len(sep) for sep in _HEAD_ENDS if (i := window.find(sep)) >= 0]
        if ends:
            size = self._head_bytes - len(self._head_tail) + min(ends)
        else:
            size = self._head_bytes = self._head_bytes + len(data)
            self._head_tail = window[-3:]
        return size <= self.max_header_bytes

    def _refuse(self, response: bytes) -> None:
        self._disarm()
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(response)
            self.transport.close()

    def _arm(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.header_timeout, self._head_expired)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_expired(self) -> None:
        self._head_timer = None
        self._refuse(_TIMEOUT_RESPONSE)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm()

    def on_headers_complete(self) -> None:
        self._disarm()
        self._in_head = False
        self._head_bytes = 0
        self._head_tail = b""
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and cycle.scope is self.scope:  # NB: not after an upgrade
            self.scope.setdefault("extensions", {})[DIRECT_BODY] = {"body": DirectBody(cycle)}

    def on_message_complete(self) -> None:
        self._in_head = True  # whatever follows is the head of the next request
        super().on_message_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)


def protocol_class(header_timeout: float, max_header_bytes: int = 32 * 1024) -> type[HeaderDeadlineProtocol]:
    """A protocol class bound to the head limits (uvicorn instantiates it per connection)."""
    limits = {"header_timeout": header_timeout, "max_header_bytes": max_header_bytes}
    return type("GatewayHttpProtocol", (HeaderDeadlineProtocol,), limits)


_OPS_PATHS = {"/metrics", "/healthz", "/readyz", "/health"}


class MetricsListener:
    """The gateway, plus a second port (``--metrics-port``) that serves only ``/metrics`` and the
    health routes, without a key: for Prometheus (a ServiceMonitor on its own port) and probes.
    Requests are told apart by the local port they arrived on (ASGI ``scope["server"]``)."""

    def __init__(self, gateway: Gateway, metrics_port: int) -> None:
        self.gateway = gateway
        self.settings = gateway.settings
        self.metrics_port = metrics_port

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        server = scope.get("server") or (None, None)
        if scope["type"] != "http" or server[1] != self.metrics_port:
            await self.gateway(scope, receive, send)
            return
        path, method = scope["path"], scope["method"]
        if method != "GET" or path not in _OPS_PATHS:
            status, body, kind = 404, b'{"error":"only /metrics and health here"}', b"application/json"
        elif path == "/metrics":
            status, body, kind = (
                200,
                self.gateway.metrics.render(),
                b"text/plain; version=0.0.4; charset=utf-8",
            )
        else:
            status, body, kind = 200, b'{"status":"ok"}', b"application/json"
        headers = [(b"content-type", kind), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def listen(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    """A listening TCP socket (uvicorn serves several when given them); with ``reuse_port``,
    one of several on the same port (``SO_REUSEPORT``: the kernel spreads connections)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server((host, port), family=family, backlog=4096, reuse_port=reuse_port)
    sock.set_inheritable(True)
    return sock


def uvicorn_config(
    app: Gateway | MetricsListener, *, host: str, port: int, log_level: str = "info"
) -> uvicorn.Config:
    """The uvicorn configuration the gateway runs with (uvloop when installed, no access log)."""
    try:
        import uvloop  # noqa: F401

        loop = "uvloop"
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        loop = "asyncio"
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=protocol_class(app.settings.header_timeout, app.settings.max_header_bytes),
        loop=loop,
        lifespan="on",
        access_log=False,
        # NB: the gateway never reads the client address; uvicorn's X-Forwarded-* middleware
        # would only cost a coroutine layer per request (and trust forwarded headers).
        proxy_headers=False,
        log_level=log_level,
        timeout_keep_alive=75,
        server_header=False,
        backlog=4096,
    )


def _name_flags(p: argparse.ArgumentParser) -> None:
    """The name policy (issue 26): which model names each namespace may claim."""
    p.add_argument(
        "--name-prefixes",
        type=namepolicy.flag,
        default=NamePolicy(),
        metavar="JSON",
        help="with --kubernetes: model names each namespace may claim, by prefix, e.g. "
        '\'{"team-a": ["a-"], "*": []}\'; other names (and imperative aliases) are not routed '
        "(default {}: any name)",
    )
    p.add_argument(
        "--inference-pools",
        choices=("auto", "off"),
        default="auto",
        help="with --kubernetes: auto (default) routes InferencePools other products created that "
        "carry the sparkrun.dev/model-name annotation, when the apiserver serves them (needs "
        "get/list/watch on inferencepools and pods); off: never",
    )


def _namespace_flags(p: argparse.ArgumentParser) -> None:
    """Where routes and API keys come from (the chart's watchNamespaces, issue 26)."""
    p.add_argument(
        "--namespace",
        action="append",
        default=[],
        metavar="NS",
        help="route only these namespaces' workloads, one watch each (repeatable; default: all)",
    )
    p.add_argument(
        "--key-namespace",
        action="append",
        default=[],
        metavar="NS",
        help="with --secret-keys: read key Secrets only in NS (repeatable; default: the --namespace "
        "list, else every namespace); the chart passes its release namespace when it serves all",
    )
    p.add_argument(
        "--secret-keys",
        action="store_true",
        help="with --kubernetes: require API keys, read from Secrets labelled sparkrun.dev/gateway-key "
        "(merged with --keys); a key grants at most its Secret's namespace",
    )
    p.add_argument(
        "--admin-key-namespace",
        action="append",
        default=[],
        metavar="NS",
        help="keys from Secrets in NS may grant models of every namespace (repeatable; default: none)",
    )


_DESCRIPTION = """\
The OpenAI/Anthropic/Ollama inference gateway: one endpoint for every served model
(docs/gateway.md). In the cluster the chart runs it with --kubernetes.
"""
_EPILOG = """\
examples:
  sparkrun-k8s gateway --kubernetes --namespace team-a --port 8080
  sparkrun-k8s gateway --routes routes.yaml --keys keys.yaml

exit codes:
  0  stopped cleanly
  1  the server did not start (the port is taken)
  2  usage (bad options, an unreadable routes or keys file)
"""


def _parser() -> argparse.ArgumentParser:
    d = GatewaySettings()
    p = argparse.ArgumentParser(prog="sparkrun-k8s gateway", description=_DESCRIPTION, epilog=_EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--routes", help="routing file (YAML or JSON), re-read on change")
    where.add_argument(
        "--kubernetes",
        action="store_true",
        help="route from InferenceWorkloads and their EndpointSlices (watches); wake by patching spec.state",
    )
    p.add_argument("--kubeconfig", help="kubeconfig (default: in-cluster, else $KUBECONFIG)")
    _namespace_flags(p)
    _name_flags(p)
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="gateway processes sharing the port (SO_REUSEPORT), each with its own routing state; "
        "metrics aggregate over all of them (default: 1)",
    )
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument(
        "--metrics-port",
        type=int,
        help="also listen here for /metrics and health only, without a key (for Prometheus); "
        "with keys on, /metrics on --port needs an administrator key",
    )
    p.add_argument("--keys", help="API keys file (YAML); without it the gateway is open")
    p.add_argument(
        "--auth",
        choices=AUTH_MODES,
        help="who may call: none (one caller), keys (API keys; implied by --keys/--secret-keys), "
        "kubernetes (bearer Kubernetes tokens: TokenReview, then a SubjectAccessReview per workload)",
    )
    p.add_argument(
        "--auth-ttl",
        type=float,
        default=10.0,
        help="with --auth=kubernetes: seconds a token and an access decision stay cached (a "
        "rejected token: half of it); a revoked token or a RoleBinding change takes effect within it",
    )
    p.add_argument(
        "--auth-audience",
        action="append",
        default=[],
        metavar="AUD",
        help="with --auth=kubernetes: accept only tokens minted for AUD (repeatable; default: any "
        "token the apiserver accepts)",
    )
    p.add_argument("--max-body-bytes", type=int, default=d.max_body_bytes)
    p.add_argument("--header-timeout", type=float, default=d.header_timeout)
    p.add_argument("--body-timeout", type=float, default=d.body_timeout)
    p.add_argument("--connect-timeout", type=float, default=d.connect_timeout)
    p.add_argument("--read-timeout", type=float, default=d.read_timeout)
    p.add_argument("--wake-timeout", type=float, default=d.wake_timeout)
    p.add_argument("--total-timeout", type=float, default=d.total_timeout)
    p.add_argument("--max-header-bytes", type=int, default=d.max_header_bytes)
    p.add_argument("--max-in-flight", type=int, default=d.max_in_flight)
    p.add_argument("--max-in-flight-per-key", type=int, default=d.max_in_flight_per_key)
    p.add_argument(
        "--max-in-flight-per-tenant",
        type=int,
        default=d.max_in_flight_per_tenant,
        help="requests in flight per namespace of a key's Secret or a ServiceAccount (default: half "
        "of --max-in-flight)",
    )
    p.add_argument("--max-buffered-body-bytes", type=int, default=d.max_buffered_body_bytes)
    p.add_argument("--max-event-bytes", type=int, default=d.max_event_bytes)
    p.add_argument("--max-answer-bytes", type=int, default=d.max_answer_bytes)
    p.add_argument("--consecutive-failures", type=int, default=d.consecutive_failures)
    p.add_argument("--max-ejected-percent", type=int, default=d.max_ejected_percent)
    p.add_argument("--poll-interval", type=float, default=1.0, help="seconds between routing-file checks")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    return p


AUTH_MODES = ("none", "keys", "kubernetes")


def auth_mode(ns: argparse.Namespace) -> str:
    """The authentication mode of a command line: ``--auth``, else ``keys`` when keys are given,
    else ``none``. Keys with another mode are a usage error."""
    keyed = bool(ns.keys or ns.secret_keys)
    mode: str = ns.auth or ("keys" if keyed else "none")
    if keyed and mode != "keys":
        _parser().error(f"--keys/--secret-keys need --auth=keys, not --auth={mode}")
    if mode == "keys" and not keyed:
        _parser().error("--auth=keys needs --keys FILE or --secret-keys")
    return mode


def _identity(ns: argparse.Namespace, mode: str, conn: Any = None) -> KubeIdentity | None:
    """The Kubernetes identity of ``--auth=kubernetes`` (``mode``) on ``conn`` (the gateway's
    ``KubeConnection``; a new one from ``--kubeconfig`` when routes come from a file)."""
    if mode != "kubernetes":
        return None
    from .identity import KubeIdentity

    if conn is None:
        from .kube import KubeConnection

        conn = KubeConnection(kubeconfig=ns.kubeconfig)
    ttl = ns.auth_ttl
    return KubeIdentity(
        conn.kube,
        token_ttl=ttl,
        rejected_ttl=ttl / 2,
        access_ttl=ttl,
        denied_ttl=ttl,
        audiences=tuple(ns.auth_audience),
    )


def build(argv: Sequence[str]) -> tuple[Gateway, argparse.Namespace]:
    """The gateway a command line describes (not started)."""
    ns = _parser().parse_args(list(argv))
    mode = auth_mode(ns)
    settings = GatewaySettings(
        max_body_bytes=ns.max_body_bytes,
        header_timeout=ns.header_timeout,
        body_timeout=ns.body_timeout,
        connect_timeout=ns.connect_timeout,
        read_timeout=ns.read_timeout,
        wake_timeout=ns.wake_timeout,
        total_timeout=ns.total_timeout,
        max_header_bytes=ns.max_header_bytes,
        max_in_flight=ns.max_in_flight,
        max_in_flight_per_key=ns.max_in_flight_per_key,
        max_in_flight_per_tenant=ns.max_in_flight_per_tenant,
        max_buffered_body_bytes=ns.max_buffered_body_bytes,
        max_event_bytes=ns.max_event_bytes,
        max_answer_bytes=ns.max_answer_bytes,
        consecutive_failures=ns.consecutive_failures,
        max_ejected_percent=ns.max_ejected_percent,
    )
    if ns.kubernetes:
        from .kube import KubeConnection, KubeRoutingSource, KubeWaker, SecretKeySource

        conn = KubeConnection(kubeconfig=ns.kubeconfig)
        sources: list[KeySource] = []
        if ns.keys:
            sources.append(StaticKeySource.from_file(ns.keys))
        if ns.secret_keys:
            admins = [n for arg in ns.admin_key_namespace for n in arg.split(",") if n]
            where = ns.key_namespace or ns.namespace
            sources.append(SecretKeySource(conn, namespace=where, admin_namespaces=admins))
        return (
            Gateway(
                KubeRoutingSource(
                    conn,
                    namespace=ns.namespace,
                    name_policy=ns.name_prefixes,
                    inference_pools=ns.inference_pools == "auto",
                ),
                settings=settings,
                waker=KubeWaker(conn),
                keys=MergedKeySource(*sources) if sources else None,
                identity=_identity(ns, mode, conn),
            ),
            ns,
        )
    keys = StaticKeySource.from_file(ns.keys) if ns.keys else None
    source = StaticRoutingSource(ns.routes, poll_interval=ns.poll_interval)
    identity = _identity(ns, mode)
    return Gateway(source, settings=settings, keys=keys, identity=identity), ns


def main(argv: Sequence[str] | None = None) -> int:
    """Run the gateway until SIGINT/SIGTERM; returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    ns = _parser().parse_args(args)
    logging.basicConfig(level=ns.log_level.upper(), format="%(levelname)s %(asctime)s %(name)s %(message)s")
    if ns.workers < 1:
        log.error("--workers must be at least 1")
        return 2
    if ns.workers > 1:
        if ns.port == 0 or ns.metrics_port == 0:
            log.error("--workers needs fixed ports (they are shared): not 0")
            return 2
        return supervise(args, ns.workers)
    gateway, ns = build(args)
    shared = worker_index() is not None
    app: Gateway | MetricsListener = gateway
    sockets = [listen(ns.host, ns.port, reuse_port=shared)] if shared else []
    if ns.metrics_port is not None:
        app = MetricsListener(gateway, ns.metrics_port)
        sockets = [
            listen(ns.host, ns.port, reuse_port=shared),
            listen(ns.host, ns.metrics_port, reuse_port=shared),
        ]
    server = uvicorn.Server(uvicorn_config(app, host=ns.host, port=ns.port, log_level=ns.log_level))
    server.run(sockets=sockets or None)
    return 0 if server.started else 1

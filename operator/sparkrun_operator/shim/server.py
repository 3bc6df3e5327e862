"""Running the shim: wiring (Kubernetes client, auth, job cache, app) and the listeners.

Listeners:

- the daemon API listener (``--port``, default 8443): TLS by default (``--tls-cert``/
  ``--tls-key``); plaintext only with the explicit ``--insecure-plaintext`` (bearer tokens would
  otherwise cross the network in clear text, as the daemon document forbids);
- the aggregated API listener (``--aggregated-port``, optional): TLS that requires a client
  certificate from the apiserver's request-header CA (read from
  ``kube-system/extension-apiserver-authentication``); only there are ``X-Remote-*`` identity
  headers trusted.

Both listeners bound request heads (``--head-timeout`` seconds: 408; ``--max-head-bytes``: 431)
and reload their certificate when its files change (:mod:`.listener`), with Python's default
TLS settings. ``--token-audience`` (repeatable) makes TokenReview accept only tokens issued for
one of those audiences.

:func:`build` returns the :class:`~sparkrun_operator.shim.app.Shim` with its cache started (for
tests and benchmarks that serve it themselves); :func:`serve` runs everything until ``stop``
is set or ``POST /v1/shutdown`` asks for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn

from sparkrun_operator.api.namepolicy import NamePolicy
from sparkrun_operator.k8s.auth import Authenticator, Authorizer, ManagerDirectory, request_header_config
from sparkrun_operator.k8s.client import DAEMON_API_MANAGER, Kube
from sparkrun_operator.k8s.daemonjobs import DaemonJobs, JobCache
from sparkrun_operator.ops import catalog as catalog_mod
from sparkrun_operator.ops.executors import ARGUMENT_CHECKS, EXECUTORS
from sparkrun_operator.ops.jobstore import DEFAULT_MAX_ACTIVE_JOBS, JobService
from sparkrun_operator.ops.settings import Settings
from sparkrun_operator.shim.aggregated import Discovery, front_proxy_protocol
from sparkrun_operator.shim.app import Shim, ShimConfig
from sparkrun_operator.shim.identity import Gate
from sparkrun_operator.shim.listener import GuardedProtocol, Limits, ReloadingTls, listener_config

__all__ = ["ServeOptions", "build", "serve"]

log = logging.getLogger("sparkrun.shim")


@dataclass
class ServeOptions:
    """How to run the shim (the ``sparkrun-k8s shim serve`` flags)."""

    namespace: str = "sparkrun-system"
    #: The chart's watchNamespaces: GPU occupancy lists pods only there and in ``namespace``
    #: (empty: every namespace).
    watch_namespaces: tuple[str, ...] = ()
    #: The chart's ``tenancy.names.prefixes`` (``--name-prefixes``): ``proxy.models`` lists only
    #: the names the gateway routes.
    name_policy: NamePolicy = field(default_factory=NamePolicy)
    kubeconfig: str | None = None
    context: str | None = None
    host: str = "0.0.0.0"
    port: int = 8443
    tls_cert: str | None = None
    tls_key: str | None = None
    insecure_plaintext: bool = False
    aggregated_port: int | None = None
    aggregated_host: str | None = None
    allow_request_trust: bool = False
    #: Audiences a bearer token must be issued for (TokenReview ``spec.audiences``; empty: the apiserver's).
    token_audiences: tuple[str, ...] = ()
    limits: Limits = field(default_factory=Limits)
    #: Unfinished jobs per principal (429 beyond).
    max_active_jobs: int = DEFAULT_MAX_ACTIVE_JOBS
    #: Concurrent SSE streams per principal (429 beyond).
    max_streams_per_principal: int = 16
    #: Seconds between checks of the certificate files for rotation.
    tls_reload_poll: float = 2.0
    controller_id: str = field(default_factory=lambda: f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}")
    #: Bind the daemon API to this already-listening socket instead of host:port (tests).
    sock: socket.socket | None = None
    aggregated_sock: socket.socket | None = None


async def build(options: ServeOptions, rest: Kube | None = None, *, sync_timeout: float = 60.0) -> Shim:
    """The wired application with its job cache started.

    Raises ``TimeoutError`` when the DaemonJob cache cannot list within ``sync_timeout``
    seconds (the apiserver is unreachable or the CRD is not installed).
    """
    if rest is None:
        rest = await Kube.connect(
            field_manager=DAEMON_API_MANAGER, kubeconfig=options.kubeconfig, context=options.context
        )
    pods = (
        tuple(dict.fromkeys((*options.watch_namespaces, options.namespace)))
        if options.watch_namespaces
        else ()
    )
    settings = Settings(namespace=options.namespace, pod_namespaces=pods, name_policy=options.name_policy)
    daemonjobs = DaemonJobs(rest, options.namespace)
    cache = JobCache(daemonjobs)
    try:
        await asyncio.wait_for(cache.start(), sync_timeout)
    except BaseException:
        await cache.stop()
        await rest.close()
        raise
    gate = Gate(
        Authenticator(rest, audiences=options.token_audiences),
        Authorizer(rest, options.namespace),
        ManagerDirectory(rest),
    )
    front_proxy = (
        await request_header_config(rest) if options.aggregated_port or options.aggregated_sock else None
    )
    return Shim(
        config=ShimConfig(
            settings=settings,
            controller_id=options.controller_id,
            allow_request_trust=options.allow_request_trust,
            max_streams_per_principal=options.max_streams_per_principal,
        ),
        rest=rest,
        gate=gate,
        jobs=JobService(daemonjobs, cache, max_active_jobs=options.max_active_jobs),
        cache=cache,
        catalog=catalog_mod.load(),
        executors=EXECUTORS,
        argument_checks=ARGUMENT_CHECKS,
        front_proxy=front_proxy,
    )


class _Server(uvicorn.Server):
    """A uvicorn server that leaves signal handling to whoever runs :func:`serve`."""

    @contextlib.contextmanager
    def capture_signals(self) -> Any:
        yield


def _check_tls(options: ServeOptions) -> None:
    if bool(options.tls_cert) != bool(options.tls_key):
        raise ValueError("TLS needs both --tls-cert and --tls-key")
    if not options.tls_cert and not options.insecure_plaintext:
        raise ValueError(
            "the daemon API listener requires TLS (--tls-cert/--tls-key); pass --insecure-plaintext to serve "
            "bearer tokens without TLS (development only)"
        )


def _aggregated_listener(
    shim: Shim, app: Any, options: ServeOptions
) -> tuple[uvicorn.Config, ReloadingTls, tempfile.TemporaryDirectory[str]]:
    """The aggregated API listener: client certificates from the request-header CA required."""
    if shim.front_proxy is None:
        raise RuntimeError("the apiserver publishes no request-header CA: is the aggregation layer enabled?")
    if not options.tls_cert or not options.tls_key:
        raise ValueError("the aggregated API listener needs --tls-cert/--tls-key")
    ca_dir = tempfile.TemporaryDirectory(prefix="sparkrun-shim-")
    ca_file = Path(ca_dir.name) / "requestheader-ca.crt"
    ca_file.write_text(shim.front_proxy.client_ca_pem)
    tls = ReloadingTls(
        options.tls_cert, options.tls_key, client_ca=str(ca_file), poll=options.tls_reload_poll
    )
    protocol: type[GuardedProtocol] = front_proxy_protocol(frozenset(shim.front_proxy.allowed_names))
    config = listener_config(
        Discovery(app),
        host=options.aggregated_host or options.host,
        port=options.aggregated_port or 0,
        limits=options.limits,
        tls=tls,
        protocol=protocol,
    )
    return config, tls, ca_dir


async def serve(
    options: ServeOptions, *, stop: asyncio.Event | None = None, ready: asyncio.Event | None = None
) -> None:
    """Serve until ``stop`` is set (or ``POST /v1/shutdown``)."""
    _check_tls(options)
    stop = stop or asyncio.Event()
    building = asyncio.create_task(build(options))
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait({building, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if not building.done():  # stopped while still connecting
        building.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await building
        return
    stopping.cancel()
    shim = building.result()
    shim.on_shutdown = stop.set
    app = shim.app()
    servers: list[tuple[_Server, list[socket.socket] | None]] = []
    tls = (
        ReloadingTls(options.tls_cert, options.tls_key, poll=options.tls_reload_poll)
        if options.tls_cert and options.tls_key
        else None
    )
    config = listener_config(app, host=options.host, port=options.port, limits=options.limits, tls=tls)
    servers.append((_Server(config), [options.sock] if options.sock else None))
    ca_dir: tempfile.TemporaryDirectory[str] | None = None
    reloading = [tls] if tls is not None else []
    if options.aggregated_port or options.aggregated_sock:
        aggregated, front_tls, ca_dir = _aggregated_listener(shim, app, options)
        reloading.append(front_tls)
        servers.append((_Server(aggregated), [options.aggregated_sock] if options.aggregated_sock else None))
    tasks = [asyncio.create_task(server.serve(sockets=sockets)) for server, sockets in servers]

    async def announce() -> None:
        while not all(server.started for server, _ in servers):
            if any(task.done() for task in tasks):
                return
            await asyncio.sleep(0.02)
        log.info("daemon API shim serving (namespace %s)", options.namespace)
        if ready is not None:
            ready.set()

    announcer = asyncio.create_task(announce())
    watchers = [asyncio.create_task(reload.watch()) for reload in reloading]
    stopper = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({stopper, *tasks}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for server, _ in servers:
            server.should_exit = True
        await asyncio.gather(*tasks, return_exceptions=True)
        for task in (stopper, announcer, *watchers):
            task.cancel()
        await shim.cache.stop()
        await shim.rest.close()
        if ca_dir is not None:
            ca_dir.cleanup()
    for task in tasks:
        if task.done() and not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]


def default_controller_id() -> str:
    return os.environ.get("POD_NAME") or socket.gethostname()

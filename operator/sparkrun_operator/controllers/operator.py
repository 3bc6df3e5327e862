"""Running the operator: kopf settings, the shared context, metrics, liveness and peering.

:func:`run` connects, builds the :class:`~.memo.Memo` (kopf's ``memo``), registers the
workload, cluster and recipe controllers on a fresh kopf registry and runs kopf until stopped.

High availability: run two (or more) replicas with peering on (the default). kopf's peering
lets only the highest-priority live operator work and pauses the others; every replica picks
a random priority at start unless one is given, so exactly one is active and another takes
over within the peering lifetime after it dies. The ``ClusterKopfPeering`` CRD must be
installed (``manifests/kopf-peering.yaml``); the peering object itself is created at start.

kopf's own bookkeeping (finalizer, progress and diff-base annotations) uses the
``operator.sparkrun.dev`` prefix, not ``kopf.zalando.org``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import httpx
import kopf
from prometheus_client import start_http_server

from sparkrun_operator.api.resources import RECIPE
from sparkrun_operator.controllers import (
    autoscale,
    benchmark,
    cluster,
    daemonjob,
    indexes,
    inferencepools,
    modelcache,
    ownership,
    recipe,
    workload,
    workload_pokes,
)
from sparkrun_operator.controllers import registry as recipe_registries
from sparkrun_operator.controllers.collector import collect_when_quiet
from sparkrun_operator.controllers.config import OperatorConfig
from sparkrun_operator.controllers.diffbase import ChangeHandledKindsDiffBase
from sparkrun_operator.controllers.gate import PriorityGate
from sparkrun_operator.controllers.memo import Memo
from sparkrun_operator.controllers.metrics import Metrics
from sparkrun_operator.k8s import errors
from sparkrun_operator.k8s.client import OPERATOR_MANAGER, Kube, connect
from sparkrun_operator.k8s.resources import CLUSTER_PEERINGS, PEERINGS, Resource
from sparkrun_operator.ops.settings import Settings
from sparkrun_operator.render import keys
from sparkrun_operator.retry import Backoff, Schedule

PEERING_NAME: Final = keys.PEERING_NAME
#: kopf's retries of a failed API request (its watches' lists and watches, its patches): about
#: kopf's own 1, 1, 2, 3, 5, 8, 13, 21 s, but jittered per request. kopf's fixed steps made every
#: watch stream that broke at one instant (an apiserver outage) retry at the same instants
#: and come back together (docs/performance.md, "Outage").
KOPF_BACKOFFS: Final = Schedule(Backoff(initial=1.0, maximum=21.0, factor=1.6, jitter=0.5), count=8)
log = logging.getLogger("sparkrun.operator")


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """How to run the operator (the ``sparkrun-k8s operator run`` flags)."""

    kubeconfig: str | None = None
    context: str | None = None
    #: Namespaces to serve; empty serves all (cluster-wide).
    namespaces: tuple[str, ...] = ()
    standalone: bool = False
    priority: int | None = None
    peering_name: str = PEERING_NAME
    #: Seconds a replica's keep-alive stays valid; a dead active replica is replaced after this.
    peering_lifetime: int = 60
    liveness_endpoint: str | None = None
    metrics_host: str = "0.0.0.0"
    metrics_port: int | None = None
    config: OperatorConfig = field(default_factory=OperatorConfig)


#: The (group, kind) of every resource with change handlers (``on.create``/``on.update``/...):
#: kopf keeps a diff base for these only (:mod:`.diffbase`; a unit test checks the registry).
CHANGE_HANDLED_KINDS: Final = frozenset({(RECIPE.group, RECIPE.kind)})


def build_settings(options: RunOptions) -> kopf.OperatorSettings:
    """kopf settings: our annotation prefix, explicit watch timeouts, events for warnings only."""
    settings = kopf.OperatorSettings()
    settings.persistence.finalizer = f"{keys.KOPF_PREFIX}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=keys.KOPF_PREFIX)
    # NB: only Recipes have change handlers (controllers/recipe.py): no diff base for the rest.
    settings.persistence.diffbase_storage = ChangeHandledKindsDiffBase(
        kinds=CHANGE_HANDLED_KINDS, prefix=keys.KOPF_PREFIX, key="last-handled-configuration"
    )
    # NB: server-side watch timeouts, so a silently dropped connection is noticed (kopf#698).
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 10
    settings.networking.request_timeout = 60
    settings.networking.error_backoffs = KOPF_BACKOFFS
    settings.posting.default_backoffs = KOPF_BACKOFFS
    settings.posting.logging_backoffs = Schedule(KOPF_BACKOFFS.policy, count=5)
    # Handler log lines at INFO would become Kubernetes Events; only warnings should.
    settings.posting.level = logging.WARNING
    settings.peering.name = options.peering_name
    settings.peering.clusterwide = not options.namespaces
    settings.peering.mandatory = not options.standalone
    settings.peering.standalone = options.standalone
    settings.peering.lifetime = options.peering_lifetime
    settings.peering.priority = options.priority if options.priority is not None else random.randint(1, 2**31)
    return settings


def daemon_settings(config: OperatorConfig) -> Settings:
    """Settings of the DaemonJob executor: the tool Jobs of ``model_cache.*`` run the image and
    mount path of the ModelCache download Jobs."""
    return Settings(
        namespace=config.executor_namespace,
        pod_namespaces=config.served_namespaces,
        name_policy=config.name_policy,
        tools_image=config.render.tools_image,
        cache_mount_path=config.render.cache_mount_path,
        cache_tool_scheduling=dict(config.cache_tool_scheduling),
        hub_token_secret=config.hub_token_secret,
        credential_endpoints=config.credential_endpoints,
        workload_scheduling=dict(config.workload_scheduling),
        benchmark_via=config.benchmark_via,
        benchmark_scheduling=dict(config.benchmark_scheduling),
        benchmark_hf_endpoint=config.benchmark_hf_endpoint,
    )


def build_registry(config: OperatorConfig) -> kopf.OperatorRegistry:
    """A registry with every controller, the login handler and nothing from import-time globals."""
    registry = kopf.OperatorRegistry()
    indexes.register(
        registry, name_policy=config.name_policy, network_policies=config.engine_policy is not None
    )
    workload.register(
        registry, drift_seconds=config.drift_seconds, network_policies=config.engine_policy is not None
    )
    if config.inference_pools.manages:
        # NB: only where served: kopf cannot watch a resource the apiserver does not serve
        inferencepools.register(registry, network_policies=config.engine_policy is not None)
    autoscale.register(registry)
    cluster.register(registry, drift_seconds=config.drift_seconds)
    recipe.register(registry)
    recipe_registries.register(registry)
    daemonjob.register(registry, settings=daemon_settings(config))
    modelcache.register(registry)
    benchmark.register(registry)
    ownership.register(registry)

    # NB: kopf posts the Events of cluster-scoped objects (an InferenceCluster's drain steps) in
    # the login's default namespace, else "default", where a namespaced operator may not write.
    events_home = config.executor_namespace if config.served_namespaces else None

    @kopf.on.login(id="login", registry=registry)
    async def login(*, memo: Any, **_: Any) -> kopf.ConnectionInfo:
        return await connection_info(memo.ctx.kube, default_namespace=events_home)

    return registry


async def connection_info(kube: Kube, *, default_namespace: str | None = None) -> kopf.ConnectionInfo:
    """kopf's credentials, taken from our own (already loaded) client configuration;
    ``default_namespace``: where kopf posts the Events of cluster-scoped objects."""
    configuration = kube.api.configuration
    header = await configuration.get_api_key_with_prefix("BearerToken")
    scheme: str | None = None
    token: str | None = None
    if header:
        parts = str(header).split(" ", 1)
        scheme, token = (parts[0], parts[1]) if len(parts) == 2 else (None, parts[0])
    return kopf.ConnectionInfo(
        server=str(configuration.host),
        ca_path=configuration.ssl_ca_cert,
        insecure=not configuration.verify_ssl,
        scheme=scheme,
        token=token,
        certificate_path=configuration.cert_file,
        private_key_path=configuration.key_file,
        default_namespace=default_namespace,
    )


async def ensure_peering(kube: Kube, name: str, namespaces: Sequence[str] = ()) -> None:
    """Create the peering object(s) kopf keeps keep-alives in, if missing.

    Cluster-wide operators share a ClusterKopfPeering; namespaced ones a KopfPeering in each
    namespace they serve.
    """
    targets: list[tuple[Resource, str | None]] = (
        [(PEERINGS, ns) for ns in namespaces] if namespaces else [(CLUSTER_PEERINGS, None)]
    )
    for resource, namespace in targets:
        metadata: dict[str, Any] = {"name": name}
        if namespace is not None:
            metadata["namespace"] = namespace
        try:
            await kube.create(
                resource, {"apiVersion": "kopf.dev/v1", "kind": resource.kind, "metadata": metadata}
            )
        except errors.KubeAlreadyExists:
            continue
        except errors.KubeNotFound as error:
            raise errors.KubeError(
                f"the {resource.kind} CRD is not installed: apply manifests/kopf-peering.yaml, "
                "or run with --standalone (single replica)"
            ) from error


def serve_metrics(metrics: Metrics, *, host: str, port: int) -> None:
    """Serve ``/metrics`` from a daemon thread (prometheus_client's server never touches the loop)."""
    start_http_server(port, addr=host, registry=metrics.registry)


async def run(
    options: RunOptions,
    *,
    stop_flag: asyncio.Event | threading.Event | None = None,
    ready_flag: asyncio.Event | threading.Event | None = None,
) -> None:
    """Run the operator until ``stop_flag`` is set or the process is signalled."""
    api = await connect(
        kubeconfig=options.kubeconfig, context=options.context, connections=options.config.api_connections
    )
    metrics = Metrics()
    kube = Kube(api, field_manager=OPERATOR_MANAGER, on_write=metrics.count_write)
    try:
        pools = await inferencepools.discover(kube, options.config.inference_pools)
    except BaseException:
        await kube.close()
        raise
    config = dataclasses.replace(options.config, inference_pools=pools)
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
    http = httpx.AsyncClient(limits=limits, timeout=config.engine_timeout)
    ctx = Memo(
        config=config,
        kube=kube,
        http=http,
        metrics=metrics,
        gate=asyncio.Semaphore(options.config.max_concurrent_passes),
        write_gate=PriorityGate(
            options.config.max_concurrent_writes, reserved=options.config.max_concurrent_writes // 4
        ),
    )
    lag = asyncio.create_task(watch_loop_lag(metrics))
    collector = asyncio.create_task(collect_when_quiet(ctx.triggers))
    queues = asyncio.create_task(
        ctx.queues.run(
            kube,
            poke_workload=lambda key: ctx.triggers.poke(workload_pokes.status_key(*key)),
            poke_cluster=lambda name: ctx.triggers.poke(cluster.lane_key(name)),
        )
    )
    stack = contextlib.ExitStack()
    stack.enter_context(observing_gc(metrics))
    ctx.pauses.install()
    stack.callback(ctx.pauses.remove)
    try:
        if options.metrics_port is not None:
            serve_metrics(metrics, host=options.metrics_host, port=options.metrics_port)
        if not options.standalone:
            await ensure_peering(kube, options.peering_name, options.namespaces)
        await kopf.operator(
            registry=build_registry(config),
            settings=build_settings(options),
            memo=kopf.Memo(ctx=ctx),
            clusterwide=not options.namespaces,
            namespaces=list(options.namespaces),
            # NB: no peering_name here: kopf would make peering mandatory even when standalone;
            # the settings carry the name.
            standalone=options.standalone,
            liveness_endpoint=options.liveness_endpoint,
            stop_flag=stop_flag,
            ready_flag=ready_flag,
        )
    finally:
        stack.close()
        for task in (lag, collector, queues):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await http.aclose()
        await kube.close()


async def watch_loop_lag(metrics: Metrics, *, period: float = 0.25) -> None:
    """Observe how late the event loop wakes a sleeper (its queue of ready callbacks: the
    process's CPU saturation), every ``period`` seconds, until cancelled."""
    loop = asyncio.get_running_loop()
    while True:
        start = loop.time()
        await asyncio.sleep(period)
        metrics.loop_lag_seconds.observe(max(0.0, loop.time() - start - period))


@contextlib.contextmanager
def observing_gc(metrics: Metrics) -> Iterator[None]:
    """Observe every pause of the cyclic garbage collector (the loop runs nothing meanwhile)
    in ``metrics.gc_pause_seconds`` while the block runs."""
    started: list[float] = []

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started.append(time.perf_counter())
        elif started:
            pause = time.perf_counter() - started.pop()
            metrics.gc_pause_seconds.labels(generation=str(info["generation"])).observe(pause)

    observe: Callable[[str, dict[str, int]], None] = callback
    gc.callbacks.append(observe)
    try:
        yield
    finally:
        gc.callbacks.remove(observe)


def describe(options: RunOptions) -> Sequence[str]:
    """Lines logged at start: what this replica serves and how."""
    scope = ", ".join(options.namespaces) if options.namespaces else "all namespaces"
    peering = "standalone" if options.standalone else f"peering {options.peering_name!r}"
    sent = options.config.credential_endpoints.to_wire()
    where = "; ".join(f"{name} only to {', '.join(urls) or 'nowhere'}" for name, urls in sent.items())
    return [
        f"serving {scope}; {peering}; drift check every {options.config.drift_seconds:.0f}s",
        f"credentials: {where or 'none sent anywhere'} (--credential-endpoints)",
    ]

"""What every controller shares: settings, the API client, wake-up triggers and metrics.

One :class:`Context` per operator process, built at startup and handed to kopf as ``memo``
(no module globals). Triggers are the operator's work queue: each reconciling daemon waits on
its own ``asyncio.Event``; watch handlers of children and dependencies set it. Several pokes
before the daemon wakes coalesce into one reconcile.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import httpx
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from sparkrun_operator.api.credentials import CredentialEndpoints
from sparkrun_operator.controllers.gate import PriorityGate
from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.plan.names import Claim
from sparkrun_operator.render.workload import RenderOptions

DEFAULT_DRIFT_SECONDS: Final = 300.0


@dataclass(frozen=True, kw_only=True)
class OperatorConfig:
    """Operator-wide settings (CLI flags)."""

    #: How often every object is reconciled even without events (drift repair).
    drift_seconds: float = DEFAULT_DRIFT_SECONDS
    #: Least time between two passes of one object (bursts of child events coalesce).
    debounce_seconds: float = 0.5
    #: How long to wait for the watch cache to show the operator's own writes.
    expectation_seconds: float = 10.0
    render: RenderOptions = field(default_factory=RenderOptions)
    #: Timeout of calls to engines (``/is_sleeping``, ``/sleep``, ``/wake_up``).
    engine_timeout: float = 10.0
    #: Passes running at once over all objects. Thousands of objects changing together (an
    #: operator restart, a mass apply) would otherwise queue thousands of requests at the
    #: apiserver, time out, and retry in a storm.
    max_concurrent_passes: int = 16
    #: API writes of the workload controller in flight at once, both lanes together, served
    #: readiness first, then actions, then progress reports (ADR 0030).
    #: A quarter of them only readiness writes may take (actions are slow at a busy apiserver).
    max_concurrent_writes: int = 32
    #: How long the status lane lets a progress-only status (no readiness change: scheduling,
    #: the startup timeline) settle, so that a pod's next steps coalesce into one write.
    #: Readiness changes are written at once (ADR 0030).
    status_settle_seconds: float = 1.0
    #: TLS connections of the operator's client to the apiserver.
    api_connections: int = 32
    #: ``nodeSelector``/``tolerations`` of ``model_cache.*`` tool Jobs at a location that no
    #: ModelCache places (``--cache-tool-scheduling``).
    cache_tool_scheduling: dict[str, Any] = field(default_factory=dict)
    #: ``(Secret, key)`` of the hub token of ``model_cache.resolve``/``import``/``repair``.
    hub_token_secret: tuple[str, str] | None = None
    #: ``--credential-endpoints``: where each credential the operator holds may go (ADR 0040).
    credential_endpoints: CredentialEndpoints = field(default_factory=CredentialEndpoints.default)
    #: In-cluster base URL of the gateway (``--gateway-url``): InferenceBenchmark ``via: Gateway``.
    gateway_url: str | None = None
    #: ``--workload-scheduling``, ``--benchmark-via``, ``--benchmark-scheduling``,
    #: ``--benchmark-hf-endpoint``: see ``ops.context.Settings``.
    workload_scheduling: dict[str, Any] = field(default_factory=dict)
    benchmark_via: str = "Service"
    benchmark_scheduling: dict[str, Any] = field(default_factory=dict)
    benchmark_hf_endpoint: str | None = None
    #: The operator's own namespace (``--executor-namespace``): its DaemonJob executor's Lease.
    executor_namespace: str = "sparkrun-system"


class Poke(asyncio.Event):
    """A daemon's wake-up event that remembers when it was set: ``clear()`` (the daemon took
    the pokes so far) keeps the time of the first set it absorbed until :meth:`taken`, so a
    daemon can tell how long the pokes behind its work waited for it."""

    def __init__(self) -> None:
        super().__init__()
        self._set_at: float | None = None
        self._absorbed: float | None = None

    def set(self) -> None:
        if not self.is_set():
            self._set_at = time.monotonic()
        super().set()

    def clear(self) -> None:
        if self.is_set() and self._absorbed is None:
            self._absorbed = self._set_at
        super().clear()

    def taken(self) -> float | None:
        """The ``time.monotonic()`` of the first poke cleared since the last call (``None``:
        none), and forget it; a poke still set is the next call's."""
        absorbed, self._absorbed = self._absorbed, None
        return absorbed


class Triggers:
    """Per-object wake-up events, keyed by e.g. ``("iw", namespace, name)``.

    Tuple keys are also filed under their first one and two parts (``("ib",)``,
    ``("ib", namespace)``), so :meth:`poke_group` wakes a kind, or a kind in one namespace,
    without looking at every other key: a node or pod event pokes every cluster's daemon, and
    a workload event every benchmark of its namespace, at any number of workloads.
    """

    def __init__(self) -> None:
        self._events: dict[Hashable, Poke] = {}
        self._groups: dict[tuple[Hashable, ...], dict[Hashable, Poke]] = {}
        #: Pokes so far (all keys): whether anything happened lately.
        self.pokes = 0

    @staticmethod
    def _prefixes(key: Hashable) -> tuple[tuple[Hashable, ...], ...]:
        if not isinstance(key, tuple) or not key:
            return ()
        return (key[:1], key[:2]) if len(key) > 1 else (key[:1],)

    def register(self, key: Hashable) -> Poke:
        """The event of ``key`` (created set, so the first pass runs at once)."""
        event = self._events.get(key)
        if event is None:
            event = self._events[key] = Poke()
            event.set()
            for prefix in self._prefixes(key):
                self._groups.setdefault(prefix, {})[key] = event
        return event

    def unregister(self, key: Hashable) -> None:
        if self._events.pop(key, None) is None:
            return
        for prefix in self._prefixes(key):
            group = self._groups.get(prefix)
            if group is not None:
                group.pop(key, None)
                if not group:
                    del self._groups[prefix]

    def poke(self, key: Hashable) -> bool:
        """Wake ``key``'s daemon; ``False`` when no daemon runs for it (yet)."""
        self.pokes += 1
        event = self._events.get(key)
        if event is None:
            return False
        event.set()
        return True

    def poke_group(self, *prefix: Hashable) -> int:
        """Wake every daemon whose (tuple) key starts with ``prefix``, one or two parts (e.g.
        ``"ic"``, or ``"ib", namespace``); the number woken."""
        if not 1 <= len(prefix) <= 2:
            raise ValueError(f"a group is the first one or two parts of a key, not {prefix!r}")
        group = self._groups.get(prefix)
        if not group:
            return 0
        for event in group.values():
            event.set()
        self.pokes += len(group)
        return len(group)

    def keys(self) -> Iterator[Hashable]:
        return iter(list(self._events))


class Metrics:
    """Prometheus metrics of the operator (one registry per operator, so tests can run several)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.reconcile_seconds = Histogram(
            "sparkrun_operator_reconcile_seconds",
            "Duration of one reconcile pass (observe, plan, act, status write).",
            ["kind"],
            registry=self.registry,
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )
        self.reconcile_errors = Counter(
            "sparkrun_operator_reconcile_errors_total",
            "Reconcile passes that failed, by error type.",
            ["kind", "error"],
            registry=self.registry,
        )
        self.status_passes = Counter(
            "sparkrun_operator_status_passes_total",
            "Status-only passes (the readiness fast lane), by whether they wrote the status.",
            ["kind", "wrote"],
            registry=self.registry,
        )
        self.status_lane_seconds = Histogram(
            "sparkrun_operator_status_lane_seconds",
            "The status lane's writes by priority: time queued for a slot, the write itself, and "
            "from the child event that poked the lane to its status written.",
            ["kind", "stage", "urgent"],
            registry=self.registry,
            buckets=(0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60),
        )
        self.loop_lag_seconds = Histogram(
            "sparkrun_operator_loop_lag_seconds",
            "How late the operator's event loop ran a timer (CPU saturation of the process).",
            registry=self.registry,
            buckets=(0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10),
        )
        self.gc_pause_seconds = Histogram(
            "sparkrun_operator_gc_pause_seconds",
            "Pauses of Python's cyclic garbage collector in the operator's process, by generation "
            "(the event loop runs nothing meanwhile).",
            ["generation"],
            registry=self.registry,
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2),
        )
        self.api_writes = Counter(
            "sparkrun_operator_api_writes_total",
            "Write requests the operator's own client sent to the apiserver.",
            ["verb"],
            registry=self.registry,
        )
        self.objects = Gauge(
            "sparkrun_operator_objects",
            "Objects by kind and the status of their Ready condition.",
            ["kind", "ready"],
            registry=self.registry,
        )
        self._ready: dict[tuple[str, Hashable], str] = {}
        self._ready_counts: dict[tuple[str, str], int] = {}

    def observe_ready(self, kind: str, key: Hashable, ready: str | None) -> None:
        """Record ``key``'s Ready status (``None``: the object is gone) and move the gauge
        (constant time: a count per kind and status, not a scan of every object)."""
        slot = (kind, key)
        before = self._ready.pop(slot, None)
        if ready is not None:
            self._ready[slot] = ready
        if before == ready:
            return
        for value, step in ((before, -1), (ready, 1)):
            if value is None:
                continue
            count = self._ready_counts.get((kind, value), 0) + step
            self._ready_counts[(kind, value)] = count
            self.objects.labels(kind=kind, ready=value).set(count)
        for value in ("True", "False", "Unknown"):  # every status shows, 0 until seen
            if (kind, value) not in self._ready_counts:
                self._ready_counts[(kind, value)] = 0
                self.objects.labels(kind=kind, ready=value).set(0)

    def count_write(self, verb: str, _path: str) -> None:
        self.api_writes.labels(verb=verb).inc()


@dataclass(kw_only=True)
class Context:
    """Everything handlers need, passed as kopf's ``memo``."""

    config: OperatorConfig
    kube: Kube
    http: httpx.AsyncClient
    metrics: Metrics
    triggers: Triggers = field(default_factory=Triggers)
    #: Bounds the passes running at once (``OperatorConfig.max_concurrent_passes``).
    gate: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(16))
    #: The write budget both lanes share (``max_concurrent_writes``), by priority.
    write_gate: PriorityGate = field(default_factory=lambda: PriorityGate(32, reserved=8))
    #: Workload key -> the generation and the ``reconcile-requested`` annotation its last pass
    #: planned for (own status writes skip a pass; a new generation or request does not).
    reconciled: dict[tuple[str, str], tuple[int, str | None]] = field(default_factory=dict)
    #: Workload key -> names it depends on (``recipe``, ``cache``, ``cluster``), for fan-out.
    dependencies: dict[tuple[str, str], tuple[str | None, str | None, str | None]] = field(
        default_factory=dict
    )

    #: Workload key -> the model names it claimed at its last event, so that a change (or a
    #: deletion) re-plans every workload that shares a name with it (``Routable``).
    claims: dict[tuple[str, str], Claim] = field(default_factory=dict)

    def jitter(self, seconds: float) -> float:
        """``seconds`` +-10%, so that many objects' timers do not fire in lockstep."""
        return seconds * random.uniform(0.9, 1.1)

"""The operator's Prometheus metrics (one registry per operator, so tests can run several)."""

from __future__ import annotations

from collections.abc import Hashable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


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

"""The operator's Prometheus metrics (one registry per operator, so tests can run several)."""

from __future__ import annotations

import logging
from collections.abc import Hashable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

log = logging.getLogger("sparkrun.operator.metrics")


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
        self.load_per_replica = Gauge(
            "sparkrun_workload_load_per_replica",
            "Load per replica of a workload in autoscaling mode External, from its engines' /metrics "
            "(signal waiting: vllm:num_requests_waiting summed and divided by the replicas scraped; "
            "kv_cache_usage: mean vllm:kv_cache_usage_perc, 0-1), for an HPA or KEDA.",
            ["namespace", "workload", "signal"],
            registry=self.registry,
        )
        self.load_exports_refused = Gauge(
            "sparkrun_operator_load_exports_refused",
            "Workloads in autoscaling mode External whose load is not exported: over "
            "--load-metric-workloads.",
            registry=self.registry,
        )
        self._loads: dict[tuple[str, str], set[str]] = {}
        self._refused: set[tuple[str, str]] = set()
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

    def export_load(
        self, key: tuple[str, str], *, waiting: float, kv_cache_usage: float | None, cap: int
    ) -> bool:
        """Set ``key``'s ``sparkrun_workload_load_per_replica`` series (no ``kv_cache_usage``
        series when the engines do not report it); ``False`` when ``cap`` workloads are exported
        already and ``key`` is not one of them (it is then counted as refused)."""
        namespace, name = key
        signals = self._loads.get(key)
        if signals is None:
            if len(self._loads) >= cap:
                if key not in self._refused:
                    self._refused.add(key)
                    self.load_exports_refused.set(len(self._refused))
                    log.warning(
                        "workload %s/%s: load not exported: %d workloads are (--load-metric-workloads)",
                        namespace,
                        name,
                        cap,
                    )
                return False
            signals = self._loads[key] = set()
            if key in self._refused:
                self._refused.discard(key)
                self.load_exports_refused.set(len(self._refused))
        values = {"waiting": waiting, "kv_cache_usage": kv_cache_usage}
        for signal, value in values.items():
            if value is None:
                if signal in signals:
                    signals.discard(signal)
                    self.load_per_replica.remove(namespace, name, signal)
                continue
            signals.add(signal)
            self.load_per_replica.labels(namespace=namespace, workload=name, signal=signal).set(value)
        return True

    def forget_load(self, key: tuple[str, str]) -> None:
        """Remove ``key``'s ``sparkrun_workload_load_per_replica`` series (it left External mode,
        answers no more, or is gone)."""
        if key in self._refused:
            self._refused.discard(key)
            self.load_exports_refused.set(len(self._refused))
        for signal in self._loads.pop(key, set()):
            self.load_per_replica.remove(key[0], key[1], signal)

    def count_write(self, verb: str, _path: str) -> None:
        self.api_writes.labels(verb=verb).inc()

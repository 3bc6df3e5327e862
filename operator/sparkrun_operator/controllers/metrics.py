"""The operator's Prometheus metrics (one registry per operator, so tests can run several).

Per-workload series (``sparkrun_workload_*``, labels ``namespace`` and ``workload``) have one
bound, ``cap`` (``--load-metric-workloads``), held apart for the state series and the load series
(External mode): at most ``cap`` workloads hold a slot of each, first come, so workloads that
only have state (a tenant's Stopped ones cost nothing to create) never take the load series an
HPA reads. A workload holds a slot while it has such series and gives it up when it has none
left (gone, or no longer exported); the others are counted in
``sparkrun_operator_workload_series_refused`` and get a slot on their next pass once one is
free. Every change is constant time (no scan of the workloads).
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from sparkrun_operator.api.workload import InferenceWorkloadStatus

log = logging.getLogger("sparkrun.operator.metrics")

WorkloadKey = tuple[str, str]


@dataclass(frozen=True)
class WorkloadFigures:
    """What the per-workload state series show of one workload's status."""

    ready: bool
    desired: int
    replicas: int
    ready_replicas: int


def workload_figures(spec: Mapping[str, Any], status: InferenceWorkloadStatus) -> WorkloadFigures:
    """The figures of ``status``; ``desired``: ``spec.replicas`` in state Running, else 0 (a
    Sleeping or Stopped workload serves nothing on purpose)."""
    replicas = spec.get("replicas")
    running = spec.get("state", "Running") == "Running"
    desired = replicas if running and isinstance(replicas, int) and replicas >= 0 else 0
    ready = any(x.type == "Ready" and x.status == "True" for x in status.conditions)
    return WorkloadFigures(
        ready=ready, desired=desired, replicas=status.replicas, ready_replicas=status.ready_replicas
    )


class _Tally:
    """Objects per kind and value of one label, counted as each object changes (constant time:
    a count per kind and value, not a scan of every object); ``seeded`` values show 0 until seen."""

    def __init__(self, gauge: Gauge, seeded: tuple[str, ...] = ()) -> None:
        self.gauge = gauge
        self.seeded = seeded
        self.values: dict[tuple[str, Hashable], str] = {}
        self.counts: dict[tuple[str, str], int] = {}

    def set(self, kind: str, key: Hashable, value: str | None) -> None:
        slot = (kind, key)
        before = self.values.pop(slot, None)
        if value is not None:
            self.values[slot] = value
        if before == value:
            return
        for each, step in ((before, -1), (value, 1)):
            if each is None:
                continue
            count = self.counts.get((kind, each), 0) + step
            self.counts[(kind, each)] = count
            self.gauge.labels(kind, each).set(count)
        for each in self.seeded:
            if (kind, each) not in self.counts:
                self.counts[(kind, each)] = 0
                self.gauge.labels(kind, each).set(0)


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
        self._workload_gauges()
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
            "--load-metric-workloads (they are counted in sparkrun_operator_workload_series_refused too).",
            registry=self.registry,
        )
        self._ready = _Tally(self.objects, ("True", "False", "Unknown"))
        self._phases = _Tally(self.objects_by_phase)
        #: The workloads holding a slot, per kind of series ("load", "state"), and what each
        #: shows: its load signals, its figures.
        self._slots: dict[str, set[WorkloadKey]] = {"load": set(), "state": set()}
        self._loads: dict[WorkloadKey, set[str]] = {}
        self._figures: dict[WorkloadKey, WorkloadFigures] = {}
        #: Workloads refused a slot, by what they asked for ("load", "state").
        self._refused: dict[WorkloadKey, set[str]] = {}
        self._load_refused = 0

    def _workload_gauges(self) -> None:
        """The gauges of phases and of each workload's state (``sparkrun_workload_*``)."""
        self.objects_by_phase = Gauge(
            "sparkrun_operator_objects_by_phase",
            "Objects by kind and status.phase (InferenceWorkload, ModelCache).",
            ["kind", "phase"],
            registry=self.registry,
        )
        labels = ["namespace", "workload"]
        self.workload_ready = Gauge(
            "sparkrun_workload_ready",
            "1 while the workload's Ready condition is True, else 0.",
            labels,
            registry=self.registry,
        )
        self.workload_desired = Gauge(
            "sparkrun_workload_replicas_desired",
            "Replicas the workload should serve with: spec.replicas in state Running, 0 when "
            "Sleeping or Stopped.",
            labels,
            registry=self.registry,
        )
        self.workload_replicas = Gauge(
            "sparkrun_workload_replicas",
            "Replicas that exist (status.replicas).",
            labels,
            registry=self.registry,
        )
        self.workload_ready_replicas = Gauge(
            "sparkrun_workload_replicas_ready",
            "Replicas whose leader is Ready (status.readyReplicas).",
            labels,
            registry=self.registry,
        )
        self.workload_series_refused = Gauge(
            "sparkrun_operator_workload_series_refused",
            "Workloads refused sparkrun_workload_* series (state or load): over --load-metric-workloads.",
            registry=self.registry,
        )

    def observe_ready(self, kind: str, key: Hashable, ready: str | None) -> None:
        """Record ``key``'s Ready status (``None``: the object is gone) in ``sparkrun_operator_objects``."""
        self._ready.set(kind, key, ready)

    def observe_phase(self, kind: str, key: Hashable, phase: str | None) -> None:
        """Record ``key``'s phase (``None``: none yet, or the object is gone) in
        ``sparkrun_operator_objects_by_phase``."""
        self._phases.set(kind, key, phase)

    def observe_workload(self, key: WorkloadKey, figures: WorkloadFigures | None, *, cap: int) -> None:
        """Set ``key``'s state series (``None``: the workload is gone: removed), if it holds a
        slot or one is free (at most ``cap`` workloads)."""
        if figures is None:
            self._unrefuse(key, "state")
            if self._figures.pop(key, None) is not None:
                for gauge in self._state_gauges():
                    gauge.remove(*key)
                self._slots["state"].discard(key)
            return
        if self._figures.get(key) == figures or not self._admit(key, "state", cap):
            return
        self._figures[key] = figures
        namespace, name = key
        self.workload_ready.labels(namespace, name).set(1 if figures.ready else 0)
        self.workload_desired.labels(namespace, name).set(figures.desired)
        self.workload_replicas.labels(namespace, name).set(figures.replicas)
        self.workload_ready_replicas.labels(namespace, name).set(figures.ready_replicas)

    def _state_gauges(self) -> tuple[Gauge, ...]:
        return (
            self.workload_ready,
            self.workload_desired,
            self.workload_replicas,
            self.workload_ready_replicas,
        )

    def export_load(
        self, key: WorkloadKey, *, waiting: float, kv_cache_usage: float | None, cap: int
    ) -> bool:
        """Set ``key``'s ``sparkrun_workload_load_per_replica`` series (no ``kv_cache_usage``
        series when the engines do not report it); ``False`` when it holds no slot and none is
        free (``cap`` workloads hold one: it is then counted as refused)."""
        if not self._admit(key, "load", cap):
            return False
        namespace, name = key
        signals = self._loads.setdefault(key, set())
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

    def forget_load(self, key: WorkloadKey) -> None:
        """Remove ``key``'s ``sparkrun_workload_load_per_replica`` series (it left External mode,
        answers no more, or is gone)."""
        self._unrefuse(key, "load")
        if key in self._loads:
            for signal in self._loads.pop(key):
                self.load_per_replica.remove(key[0], key[1], signal)
            self._slots["load"].discard(key)

    def _admit(self, key: WorkloadKey, what: str, cap: int) -> bool:
        """Whether ``key`` holds a ``what`` slot, taking a free one if it can; a refusal is counted."""
        slots = self._slots[what]
        if key in slots:
            return True
        if len(slots) >= cap:
            wants = self._refused.setdefault(key, set())
            if what not in wants:
                if not wants:
                    log.warning(
                        "workload %s/%s: no sparkrun_workload_* %s series: %d workloads have them "
                        "(--load-metric-workloads)",
                        key[0],
                        key[1],
                        what,
                        cap,
                    )
                wants.add(what)
                self._load_refused += what == "load"
                self._count_refused()
            return False
        slots.add(key)
        self._unrefuse(key, what)
        return True

    def _unrefuse(self, key: WorkloadKey, what: str) -> None:
        wants = self._refused.get(key)
        if wants is None or what not in wants:
            return
        wants.discard(what)
        self._load_refused -= what == "load"
        if not wants:
            del self._refused[key]
        self._count_refused()

    def _count_refused(self) -> None:
        self.workload_series_refused.set(len(self._refused))
        self.load_exports_refused.set(self._load_refused)

    def count_write(self, verb: str, _path: str) -> None:
        self.api_writes.labels(verb=verb).inc()

"""The per-workload series (``sparkrun_workload_*``): set, changed and removed with a
workload's status, and one bound, ``cap``, held apart for them and the External mode's load
series, so 10,000 workloads never make more than ``cap`` workloads' series of each (the rest
counted)."""

from __future__ import annotations

from prometheus_client import generate_latest

from sparkrun_operator.api.workload import InferenceWorkloadStatus
from sparkrun_operator.controllers.metrics import Metrics, WorkloadFigures, workload_figures

STATE = (
    "sparkrun_workload_ready",
    "sparkrun_workload_replicas_desired",
    "sparkrun_workload_replicas",
    "sparkrun_workload_replicas_ready",
)


def workloads_with_series(metrics: Metrics) -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for family in metrics.registry.collect():
        if family.name.startswith("sparkrun_workload_"):
            found.update((s.labels["namespace"], s.labels["workload"]) for s in family.samples)
    return found


def value(metrics: Metrics, name: str, key: tuple[str, str]) -> float | None:
    return metrics.registry.get_sample_value(name, {"namespace": key[0], "workload": key[1]})


def refused(metrics: Metrics) -> tuple[float | None, float | None]:
    get = metrics.registry.get_sample_value
    return get("sparkrun_operator_workload_series_refused"), get("sparkrun_operator_load_exports_refused")


def test_figures_of_a_status() -> None:
    status = InferenceWorkloadStatus.model_validate(
        {
            "replicas": 2,
            "readyReplicas": 1,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "False",
                    "reason": "ReplicasNotReady",
                    "message": "1 of 2",
                    "lastTransitionTime": "2026-12-06T10:00:00Z",
                }
            ],
        }
    )
    assert workload_figures({"replicas": 2}, status) == WorkloadFigures(False, 2, 2, 1)
    assert workload_figures({"replicas": 2, "state": "Stopped"}, status).desired == 0
    assert workload_figures({"replicas": 2, "state": "Sleeping"}, status).desired == 0
    assert workload_figures({"replicas": "2"}, status).desired == 0  # not a count: none wanted
    ready = status.model_copy(
        update={"conditions": [status.conditions[0].model_copy(update={"status": "True"})]}
    )
    assert workload_figures({"replicas": 1}, ready).ready


def test_series_appear_change_and_disappear() -> None:
    metrics = Metrics()
    key = ("team-a", "qwen")
    metrics.observe_workload(key, WorkloadFigures(False, 2, 1, 0), cap=10)
    assert [value(metrics, name, key) for name in STATE] == [0, 2, 1, 0]
    metrics.observe_workload(key, WorkloadFigures(True, 2, 2, 2), cap=10)
    assert [value(metrics, name, key) for name in STATE] == [1, 2, 2, 2]
    assert metrics.export_load(key, waiting=1.5, kv_cache_usage=0.2, cap=10)
    metrics.observe_workload(key, None, cap=10)  # deleted: the state series go
    assert [value(metrics, name, key) for name in STATE] == [None] * 4
    assert workloads_with_series(metrics) == {key}  # the load series until the autoscaler forgets it
    metrics.forget_load(key)
    assert workloads_with_series(metrics) == set()
    lines = generate_latest(metrics.registry).decode().splitlines()
    assert not [line for line in lines if line.startswith("sparkrun_workload_")]


def test_ten_thousand_workloads_stay_under_the_cap() -> None:
    metrics = Metrics()
    cap = 100
    for i in range(10_000):
        metrics.observe_workload(("ns", f"w{i}"), WorkloadFigures(True, 1, 1, 1), cap=cap)
    assert len(workloads_with_series(metrics)) == cap
    assert refused(metrics) == (10_000 - cap, 0)
    # the load series have their own slots under the same bound
    assert metrics.export_load(("ns", "w5000"), waiting=1.0, kv_cache_usage=None, cap=cap)
    for i in range(1, cap):
        assert metrics.export_load(("ns", f"w{i}"), waiting=1.0, kv_cache_usage=None, cap=cap)
    assert not metrics.export_load(("ns", "w0"), waiting=1.0, kv_cache_usage=None, cap=cap)
    assert refused(metrics) == (10_000 - cap + 1, 1)  # w0 has its state series, not its load
    series = sum(
        len(family.samples)
        for family in metrics.registry.collect()
        if family.name.startswith("sparkrun_workload_")
    )
    assert series == cap * len(STATE) + cap
    metrics.forget_load(("ns", "w0"))
    metrics.forget_load(("ns", "w5000"))
    assert refused(metrics) == (10_000 - cap, 0)
    # one goes: a refused one takes its slot on its next pass, and is no longer counted
    metrics.observe_workload(("ns", "w0"), None, cap=cap)
    metrics.observe_workload(("ns", "w5000"), WorkloadFigures(False, 1, 0, 0), cap=cap)
    assert ("ns", "w5000") in workloads_with_series(metrics)
    assert ("ns", "w0") not in workloads_with_series(metrics)
    assert refused(metrics) == (10_000 - cap - 1, 0)
    # deleting a refused workload stops counting it
    metrics.observe_workload(("ns", "w9999"), None, cap=cap)
    assert refused(metrics) == (10_000 - cap - 2, 0)
    assert len(workloads_with_series(metrics)) == cap


def test_objects_by_phase_count_each_object_once() -> None:
    metrics = Metrics()

    def count(phase: str) -> float | None:
        return metrics.registry.get_sample_value(
            "sparkrun_operator_objects_by_phase", {"kind": "ModelCache", "phase": phase}
        )

    metrics.observe_phase("ModelCache", "a/x", "Downloading")
    metrics.observe_phase("ModelCache", "a/y", "Downloading")
    metrics.observe_phase("ModelCache", "a/x", "Failed")
    assert (count("Downloading"), count("Failed")) == (1, 1)
    metrics.observe_phase("ModelCache", "a/x", None)
    metrics.observe_phase("ModelCache", "a/y", "Ready")
    assert (count("Downloading"), count("Failed"), count("Ready")) == (0, 0, 1)


def test_state_series_never_take_an_external_workloads_load_slot() -> None:
    """A tenant's cheap workloads (Stopped: no pod, no GPU) that fill the state series' bound
    leave the load series of another tenant's External-mode workload alone: its HPA reads them."""
    metrics = Metrics()
    cap = 10
    for i in range(cap):
        metrics.observe_workload(("cheap", f"w{i}"), WorkloadFigures(False, 0, 0, 0), cap=cap)
    scaled = ("team-b", "qwen")
    assert metrics.export_load(scaled, waiting=2.0, kv_cache_usage=0.5, cap=cap)
    load = {"namespace": scaled[0], "workload": scaled[1], "signal": "waiting"}
    assert metrics.registry.get_sample_value("sparkrun_workload_load_per_replica", load) == 2.0
    # its own state series are past the bound (counted), and it keeps its load series
    metrics.observe_workload(scaled, WorkloadFigures(True, 1, 1, 1), cap=cap)
    assert value(metrics, "sparkrun_workload_ready", scaled) is None
    assert refused(metrics) == (1, 0)
    # each kind is bounded on its own: load slots fill up and refuse as before
    for i in range(cap):
        metrics.export_load(("other", f"x{i}"), waiting=1.0, kv_cache_usage=None, cap=cap)
    assert refused(metrics) == (2, 1)
    # deleted: the load slot frees, and the state refusal is no longer counted
    metrics.observe_workload(scaled, None, cap=cap)
    metrics.forget_load(scaled)
    assert refused(metrics) == (1, 1)
    assert metrics.export_load(("other", "x0"), waiting=1.0, kv_cache_usage=None, cap=cap)
    assert refused(metrics) == (1, 1)
    assert metrics.export_load(("other", "x9"), waiting=1.0, kv_cache_usage=None, cap=cap)
    assert refused(metrics) == (0, 0)

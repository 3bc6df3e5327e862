"""The autoscaler's bounded memory and its External-mode gauge: ``sparkrun_workload_load_per_replica``
only for workloads in External mode, gone when they leave it, at most ``--load-metric-workloads``
of them (the rest counted in ``sparkrun_operator_load_exports_refused``); the sample window
bounded in time and in count."""

from __future__ import annotations

import datetime as dt
import itertools
from typing import Any

from prometheus_client import generate_latest

from sparkrun_operator.api.workload import InferenceWorkloadSpec
from sparkrun_operator.controllers import autoscale
from sparkrun_operator.controllers.metrics import Metrics
from sparkrun_operator.plan.autoscale import ReplicaLoad, Sample
from sparkrun_operator.plan.enginemetrics import EngineLoad

T0 = dt.datetime(2026, 12, 6, 10, 0, 0, tzinfo=dt.UTC)


def exposition(metrics: Metrics) -> str:
    return generate_latest(metrics.registry).decode()


def series(metrics: Metrics) -> dict[tuple[str, str, str], float]:
    found = {}
    for family in metrics.registry.collect():
        if family.name == "sparkrun_workload_load_per_replica":
            for s in family.samples:
                labels = s.labels
                found[(labels["namespace"], labels["workload"], labels["signal"])] = s.value
    return found


def refused(metrics: Metrics) -> float:
    value = metrics.registry.get_sample_value("sparkrun_operator_load_exports_refused")
    assert value is not None
    return value


def test_export_cap_and_removal() -> None:
    metrics = Metrics()
    assert metrics.export_load(("a", "w1"), waiting=2.5, kv_cache_usage=0.4, cap=2)
    assert metrics.export_load(("a", "w2"), waiting=1.0, kv_cache_usage=None, cap=2)
    assert not metrics.export_load(("b", "w3"), waiting=9.0, kv_cache_usage=0.9, cap=2)
    assert series(metrics) == {
        ("a", "w1", "waiting"): 2.5,
        ("a", "w1", "kv_cache_usage"): 0.4,
        ("a", "w2", "waiting"): 1.0,
    }
    assert refused(metrics) == 1
    # an exported workload keeps its place: updated, a signal it stops reporting removed
    assert metrics.export_load(("a", "w1"), waiting=0.0, kv_cache_usage=None, cap=2)
    assert series(metrics)[("a", "w1", "waiting")] == 0.0
    assert ("a", "w1", "kv_cache_usage") not in series(metrics)
    # one leaves: the refused one gets its place
    metrics.forget_load(("a", "w2"))
    assert metrics.export_load(("b", "w3"), waiting=9.0, kv_cache_usage=0.9, cap=2)
    assert refused(metrics) == 0
    assert set(series(metrics)) == {
        ("a", "w1", "waiting"),
        ("b", "w3", "waiting"),
        ("b", "w3", "kv_cache_usage"),
    }
    metrics.forget_load(("a", "w1"))
    metrics.forget_load(("b", "w3"))
    assert series(metrics) == {}
    assert "sparkrun_workload_load_per_replica{" not in exposition(metrics)


class _Ctx:
    """The parts of the memo :func:`autoscale.export` uses."""

    def __init__(self, cap: int) -> None:
        self.metrics = Metrics()
        self.config: Any = type("Config", (), {"load_metric_workloads": cap})()


def spec(mode: str | None) -> InferenceWorkloadSpec:
    fields: dict[str, Any] = {"model": {"name": "m"}, "replicas": 2}
    if mode is not None:
        fields["autoscaling"] = {"mode": mode, "maxReplicas": 4, "target": {"waitingPerReplica": 2}}
    return InferenceWorkloadSpec.model_validate(fields)


def two_replicas(at: dt.datetime, *loads: EngineLoad | None) -> Sample:
    return Sample(
        at=at, state="Running", replicas=2, loads=tuple(ReplicaLoad(f"r{i}", x) for i, x in enumerate(loads))
    )


def test_only_external_mode_is_exported() -> None:
    ctx = _Ctx(cap=10)
    key = ("ns", "w")
    both = two_replicas(T0, EngineLoad(3, 1, 0.2, 5), EngineLoad(1, 1, 0.6, 5))
    autoscale.export(ctx, key, spec("External"), both)  # type: ignore[arg-type]
    assert series(ctx.metrics) == {("ns", "w", "waiting"): 2.0, ("ns", "w", "kv_cache_usage"): 0.4}
    autoscale.export(ctx, key, spec("Operator"), both)  # type: ignore[arg-type]
    assert series(ctx.metrics) == {}
    autoscale.export(ctx, key, spec("External"), two_replicas(T0, None, None))  # type: ignore[arg-type]
    assert series(ctx.metrics) == {}  # no replica answered: no figure rather than a stale one
    autoscale.export(ctx, key, spec(None), both)  # type: ignore[arg-type]
    assert series(ctx.metrics) == {}


def test_the_window_is_bounded() -> None:
    workload = InferenceWorkloadSpec.model_validate(
        {
            "model": {"name": "m"},
            "autoscaling": {
                "maxReplicas": 4,
                "target": {"waitingPerReplica": 2},
                "scrapeIntervalSeconds": 1,
                "scaleUpWindowSeconds": 5,
                "scaleDownWindowSeconds": 10,
            },
        }
    )
    state = autoscale.Autoscaler(namespace="ns", name="w", kube=None)  # type: ignore[arg-type]
    idle = EngineLoad(0, 0, 0.0, 1)
    for second in range(100):
        state.remember(two_replicas(T0 + dt.timedelta(seconds=second), idle, idle), workload)
    kept = [s.at for s in state.samples]
    # the longest window and two intervals, plus the newest sample at or before that (coverage)
    assert kept[0] == T0 + dt.timedelta(seconds=99 - 12)
    assert kept[-1] == T0 + dt.timedelta(seconds=99)
    assert len(kept) == 13
    long_window = workload.model_copy(
        update={"autoscaling": workload.autoscaling.model_copy(update={"scale_down_window_seconds": 86_400})}  # type: ignore[union-attr]
    )
    state = autoscale.Autoscaler(namespace="ns", name="w", kube=None)  # type: ignore[arg-type]
    for second in range(5000):
        state.remember(two_replicas(T0 + dt.timedelta(seconds=second), idle, idle), long_window)
    assert len(state.samples) <= autoscale.MAX_SAMPLES
    assert state.samples[-1].at == T0 + dt.timedelta(seconds=4999)
    assert state.samples[0].at == T0  # the window's start stays covered
    newest = [s.at for s in state.samples][-500:]
    assert all((b - a).total_seconds() == 1 for a, b in itertools.pairwise(newest))
    assert state.idle_since == T0  # the idle clock runs on, whatever the window keeps


def test_the_idle_clock_reaches_the_planner_once_it_ran_a_while() -> None:
    """A workload busy every few seconds costs no full pass per scrape: the idle clock is
    published after 60 s idle (or half the idle policy's shortest step), with its true start."""
    workload = InferenceWorkloadSpec.model_validate(
        {"model": {"name": "m"}, "idle": {"zeroAfterSeconds": 40}}
    )
    assert autoscale.publish_idle_after(workload) == 20
    assert autoscale.publish_idle_after(spec("Operator")) == 60
    state = autoscale.Autoscaler(namespace="ns", name="w", kube=None)  # type: ignore[arg-type]
    idle = EngineLoad(0, 0, 0.0, 1)
    busy = EngineLoad(0, 1, 0.0, 1)
    views = []
    for second, load in enumerate([busy, idle, idle, *[idle] * 30, busy]):
        at = T0 + dt.timedelta(seconds=second)
        state.remember(Sample(at=at, state="Running", replicas=1, loads=(ReplicaLoad("r0", load),)), workload)
        views.append(state.view(workload, at).idle_since)
    assert views[:20] == [None] * 20
    assert views[20:33] == [T0] * 13  # since the last busy scrape, once idle 20 s
    assert views[33] is None
    assert state.view(workload, T0).scraped

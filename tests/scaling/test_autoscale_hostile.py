"""The autoscaler against a lying engine and a workload that changes under it (second review of
issue 27): figures no engine could report never crash a decision or reach the status as a number
JSON cannot carry, and a decision is only ever written with the resourceVersion of the spec it
was made from (a wake the gateway writes during a scrape is not undone)."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
from collections.abc import Mapping
from typing import Any, cast

import httpx
import kopf
import pytest

from sparkrun_operator.api.workload import InferenceWorkloadSpec
from sparkrun_operator.controllers import autoscale
from sparkrun_operator.controllers.autoscale import Autoscaler
from sparkrun_operator.controllers.config import OperatorConfig
from sparkrun_operator.controllers.memo import Memo
from sparkrun_operator.controllers.metrics import Metrics
from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.k8s.resources import Resource
from sparkrun_operator.plan.autoscale import ReplicaLoad, Sample, decide
from sparkrun_operator.plan.enginemetrics import EngineLoad, parse
from sparkrun_operator.plan.workload import ObservedJobSet, ObservedPod

NOW = dt.datetime(2026, 12, 6, 10, 0, 0, tzinfo=dt.UTC)
#: The largest finite float an engine can write: two of them sum to infinity.
HUGE = b"1.7976931348623157e308"


def lying(waiting: bytes = HUGE, running: bytes = b"0") -> EngineLoad:
    load = parse(b"vllm:num_requests_waiting " + waiting + b"\nvllm:num_requests_running " + running + b"\n")
    assert load is not None
    return load


def workload(replicas: int, **autoscaling: Any) -> InferenceWorkloadSpec:
    return InferenceWorkloadSpec.model_validate(
        {
            "model": {"name": "Qwen/Qwen3-0.6B"},
            "replicas": replicas,
            "autoscaling": {
                "minReplicas": 1,
                "maxReplicas": 8,
                "target": {"waitingPerReplica": 2},
                "scaleUpWindowSeconds": 0,
                "cooldownSeconds": 0,
                **autoscaling,
            },
        }
    )


def samples(load: EngineLoad, replicas: int) -> list[Sample]:
    return [
        Sample(
            at=NOW,
            state="Running",
            replicas=replicas,
            loads=tuple(ReplicaLoad(f"r-{i}", load) for i in range(replicas)),
        )
    ]


@pytest.mark.parametrize(
    ("what", "spec", "replicas"),
    [
        ("two replicas at the largest float sum to infinity", workload(2), 2),
        ("one replica over a tiny per-replica target", workload(1, target={"waitingPerReplica": 1e-300}), 1),
    ],
)
def test_a_lying_queue_scales_to_the_bound_not_to_a_crash(
    what: str, spec: InferenceWorkloadSpec, replicas: int
) -> None:
    decision = decide(
        spec=spec, samples=samples(lying(), replicas), idle_since=None, last_decision=None, now=NOW
    )
    assert decision is not None, what
    assert (decision.action, decision.to_replicas) == ("ScaleUp", 8), what


def test_the_figures_of_a_lying_engine_stay_numbers_json_carries() -> None:
    """A clamp decision records the latest figures: summed over replicas they must stay finite,
    or the planner's status patch (``Infinity``) is refused at every pass."""
    spec = workload(12)  # over maxReplicas 8: clamped, with the latest sample's figures
    decision = decide(spec=spec, samples=samples(lying(), 12), idle_since=None, last_decision=None, now=NOW)
    assert decision is not None
    assert decision.action == "ScaleDown"
    wire = decision.record(NOW).model_dump(mode="json", by_alias=True)
    json.dumps(wire, allow_nan=False)


class RecordingKube:
    """Records the autoscaler's patches (the precondition it sends is what is checked)."""

    def __init__(self) -> None:
        self.patches: list[Mapping[str, Any]] = []

    async def merge_patch(
        self, resource: Resource, name: str, patch: Mapping[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        self.patches.append(patch)
        return {}


async def test_a_wake_written_during_the_scrape_is_not_undone(monkeypatch: pytest.MonkeyPatch) -> None:
    """kopf's daemon ``body`` is live: the gateway's wake (``state: Running``) can land while the
    tick awaits the scrape. The decision made from the spec read before the scrape (asleep and
    idle long enough: ``ScaleToZero``) must carry that spec's resourceVersion, so the apiserver
    refuses it, not the newer one, which would take the just-woken workload to zero."""
    body: dict[str, Any] = {
        "metadata": {"name": "w", "namespace": "ns", "resourceVersion": "1"},
        "spec": {
            "model": {"name": "Qwen/Qwen3-0.6B"},
            "replicas": 1,
            "state": "Sleeping",
            "engine": {"enableSleepMode": True},
            "idle": {"sleepAfterSeconds": 10, "zeroAfterSeconds": 10, "scrapeIntervalSeconds": 1},
        },
    }
    idle = EngineLoad(waiting=0, running=0, kv_cache_usage=None, requests_total=3)

    async def scrape_while_woken(ctx: Memo, pods: list[ObservedPod]) -> tuple[ReplicaLoad, ...]:
        body["spec"] = {**body["spec"], "state": "Running"}  # the watch updates the live body
        body["metadata"] = {**body["metadata"], "resourceVersion": "2"}
        return (ReplicaLoad("w-0", idle),)

    monkeypatch.setattr(autoscale, "scrape", scrape_while_woken)
    monkeypatch.setattr(kopf, "event", lambda *args, **kwargs: None)  # posting needs a running operator
    kube = RecordingKube()
    ctx = Memo(config=OperatorConfig(), kube=cast(Kube, kube), http=httpx.AsyncClient(), metrics=Metrics())
    now = dt.datetime.now(dt.UTC)
    state = Autoscaler(
        namespace="ns", name="w", kube=cast(Kube, kube), idle_since=now - dt.timedelta(hours=1)
    )
    state.samples.append(
        Sample(
            at=now - dt.timedelta(seconds=1), state="Sleeping", replicas=1, loads=(ReplicaLoad("w-0", idle),)
        )
    )
    leader = ObservedPod(name="w-0-0", jobset="w-0", role="leader", ready=True, ip="10.0.0.1")
    try:
        await autoscale.tick(
            ctx,
            state,
            body=cast(Any, body),
            indices={
                "iw_pods": {("ns", "w"): [leader]},
                "iw_jobsets": {("ns", "w"): [ObservedJobSet(name="w-0", uid="u", replica=0, revision="r")]},
            },
            logger=logging.getLogger("test"),
        )
    finally:
        await ctx.http.aclose()
    assert kube.patches, "the stale spec's decision (ScaleToZero) was not even tried"
    assert [p["metadata"]["resourceVersion"] for p in kube.patches] == ["1"], kube.patches


class _OneTick:
    """A ``kopf.DaemonStopped`` stand-in that lets the daemon's loop run exactly one tick."""

    def __init__(self) -> None:
        self.checks = 0

    def __bool__(self) -> bool:
        self.checks += 1
        return self.checks > 2  # the loop's check, the check after the wait; then stop

    async def wait(self) -> None:
        await asyncio.sleep(3600)


async def test_a_stale_idle_clock_in_the_status_is_not_taken_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """``status.scaling.idleSince`` three days old (left by an earlier daemon: the operator was
    down or changed leader while the workload served, or ``spec.idle`` was removed and set
    again): the daemon's first idle scrape must not take a busy workload to zero on it. The
    clock starts again at the first scrape."""
    stale = (dt.datetime.now(dt.UTC) - dt.timedelta(days=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
    body: dict[str, Any] = {
        "metadata": {"name": "w", "namespace": "ns", "resourceVersion": "1"},
        "spec": {
            "model": {"name": "Qwen/Qwen3-0.6B"},
            "replicas": 1,
            "idle": {"zeroAfterSeconds": 600, "scrapeIntervalSeconds": 1},
        },
        "status": {"scaling": {"idleSince": stale}},
    }
    idle = EngineLoad(waiting=0, running=0, kv_cache_usage=None, requests_total=3)

    async def scrape_idle(ctx: Memo, pods: list[ObservedPod]) -> tuple[ReplicaLoad, ...]:
        return (ReplicaLoad("w-0", idle),)

    monkeypatch.setattr(autoscale, "scrape", scrape_idle)
    monkeypatch.setattr(autoscale.random, "uniform", lambda low, high: 0.0)
    monkeypatch.setattr(kopf, "event", lambda *args, **kwargs: None)
    kube = RecordingKube()
    ctx = Memo(config=OperatorConfig(), kube=cast(Kube, kube), http=httpx.AsyncClient(), metrics=Metrics())
    ctx.kube.as_manager = lambda manager: kube  # type: ignore[method-assign]
    leader = ObservedPod(name="w-0-0", jobset="w-0", role="leader", ready=True, ip="10.0.0.1")
    try:
        await autoscale.run(
            ctx,
            namespace="ns",
            name="w",
            body=cast(Any, body),
            indices={
                "iw_pods": {("ns", "w"): [leader]},
                "iw_jobsets": {("ns", "w"): [ObservedJobSet(name="w-0", uid="u", replica=0, revision="r")]},
            },
            stopped=cast(Any, _OneTick()),
            logger=logging.getLogger("test"),
        )
    finally:
        await ctx.http.aclose()
    assert kube.patches == [], "a three-day-old idle clock took a workload to zero on its first scrape"

"""The workload planner (``plan/workload/``): table-driven cases plus a rollout simulation.

Tested: create/scale/rollout (maxSurge > 0 and 0) and their invariants (never more JobSets
than replicas + maxSurge, old replicas removed only behind a Ready new one or first with
maxSurge 0, convergence), Stopped/Sleeping/Running transitions, cacheRef gating, recipe
resolution and pins, invalid specs, scheduling diagnostics (InsufficientGPU, NoFittingNodes,
ClusterNotFound), failed groups, Kueue-queued JobSets, and that a second pass over an
unchanged world writes nothing new (idempotent status).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from typing import Any

import pytest

from sparkrun_operator.api import conditions as c
from sparkrun_operator.api.meta import find_condition
from sparkrun_operator.api.recipe import RecipeSpec
from sparkrun_operator.api.workload import FailureRecord, InferenceWorkloadSpec, InferenceWorkloadStatus
from sparkrun_operator.plan.workload import (
    FAILED_BACKOFF,
    NodeCapacity,
    Observation,
    ObservedCache,
    ObservedCluster,
    ObservedJobSet,
    ObservedPod,
    ObservedRecipe,
    Plan,
    plan,
)
from sparkrun_operator.render import keys

NOW = dt.datetime(2026, 9, 1, 12, 0, tzinfo=dt.UTC)
NAME = "qwen"
BASE: dict[str, Any] = {"model": {"name": "Qwen/Qwen3-0.6B"}}


def _spec(**extra: Any) -> InferenceWorkloadSpec:
    doc = dict(BASE)
    doc.update(extra)
    return InferenceWorkloadSpec.model_validate(doc)


def _obs(spec: InferenceWorkloadSpec | None = None, **kwargs: Any) -> Observation:
    values: dict[str, Any] = {
        "name": NAME,
        "namespace": "ns",
        "uid": "uid-w",
        "generation": 3,
        "spec": spec or _spec(),
        "status": InferenceWorkloadStatus(),
        "now": NOW,
        "created": NOW - dt.timedelta(minutes=1),
    }
    values.update(kwargs)
    return Observation(**values)


def _rev(spec: InferenceWorkloadSpec, **kwargs: Any) -> str:
    revision = plan(_obs(spec, **kwargs)).revision
    assert revision is not None
    return revision


def _js(replica: int, revision: str, *, ready: bool = True, **kwargs: Any) -> ObservedJobSet:
    name = f"{NAME}-{replica}-{revision[:5]}"
    return ObservedJobSet(
        name=name, uid=f"uid-{name}", replica=replica, revision=revision, leader_ready=ready, **kwargs
    )


def _leader(js: ObservedJobSet, *, ip: str = "10.0.0.1", **kwargs: Any) -> ObservedPod:
    values: dict[str, Any] = {
        "name": f"{js.name}-leader-0-0-abcde",
        "jobset": js.name,
        "role": "leader",
        "replica": js.replica,
        "revision": js.revision,
        "phase": "Running",
        "ready": js.leader_ready,
        "ip": ip,
        "node": "gpu-0",
    }
    values.update(kwargs)
    return ObservedPod(**values)


def _created(p: Plan) -> list[str]:
    return [d["metadata"]["name"] for d in p.apply if d["kind"] == "JobSet"]


def _deleted(p: Plan) -> list[str]:
    return [d.name for d in p.delete]


def _cond(p: Plan, type_: str) -> tuple[str, str]:
    found = find_condition(p.status.conditions, type_)
    assert found is not None, f"no {type_} condition"
    return found.status, found.reason


# -- creation and steady state ------------------------------------------------------------


def test_fresh_workload_creates_service_and_jobsets() -> None:
    spec = _spec(replicas=2)
    p = plan(_obs(spec))
    rev = _rev(spec)
    assert _created(p) == [f"qwen-0-{rev[:5]}", f"qwen-1-{rev[:5]}"]
    assert [d["kind"] for d in p.apply].count("Service") == 1
    assert _cond(p, c.READY) == ("False", c.REASON_REPLICAS_NOT_READY)
    assert _cond(p, c.PROGRESSING) == ("True", c.REASON_CREATING)
    assert p.status.phase == "Pending"
    assert p.status.revision == rev
    assert p.status.selector == "sparkrun.dev/role=leader,sparkrun.dev/workload=qwen"
    assert p.status.workload_id is not None
    assert p.status.workload_id.startswith(f"sparkrun_{p.status.intent_id}_")
    assert [e.stage for e in p.status.startup] == ["accepted"]


def _steady(spec: InferenceWorkloadSpec, n: int) -> tuple[list[ObservedJobSet], list[ObservedPod]]:
    rev = _rev(spec)
    jobsets = [_js(i, rev) for i in range(n)]
    pods = [_leader(js, ip=f"10.0.0.{i + 1}") for i, js in enumerate(jobsets)]
    return jobsets, pods


SERVICE = {
    "spec": {
        "selector": {keys.LABEL_WORKLOAD: NAME, keys.LABEL_ROLE: "leader"},
        "ports": [{"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"}],
        "publishNotReadyAddresses": False,
    }
}


def test_ready_workload_is_idle_and_its_status_stable() -> None:
    spec = _spec(replicas=2)
    jobsets, pods = _steady(spec, 2)
    first = plan(_obs(spec, jobsets=tuple(jobsets), pods=tuple(pods), service=SERVICE))
    assert first.idle
    assert first.apply == []
    assert _cond(first, c.READY) == ("True", c.REASON_ALL_REPLICAS_READY)
    assert _cond(first, c.PROGRESSING) == ("False", c.REASON_STABLE)
    assert _cond(first, c.SCHEDULED) == ("True", c.REASON_ALL_PODS_SCHEDULED)
    assert first.status.phase == "Running"
    assert (first.status.replicas, first.status.ready_replicas) == (2, 2)
    assert [(e.replica, e.url, e.ready) for e in first.status.endpoints] == [
        (0, "http://10.0.0.1:8000", True),
        (1, "http://10.0.0.2:8000", True),
    ]
    assert {e.stage for e in first.status.startup} == {"accepted", "scheduled", "running", "ready"}
    # a later pass over the same world, with the status just written, changes nothing
    later = plan(
        _obs(
            spec,
            jobsets=tuple(jobsets),
            pods=tuple(pods),
            service=SERVICE,
            status=first.status,
            now=NOW + dt.timedelta(minutes=5),
        )
    )
    assert later.idle
    assert later.status == first.status


# -- scaling ------------------------------------------------------------------------------


def test_scale_up_fills_missing_slots() -> None:
    spec = _spec(replicas=3)
    jobsets, pods = _steady(spec, 1)
    p = plan(_obs(spec, jobsets=tuple(jobsets), pods=tuple(pods), service=SERVICE))
    rev = _rev(spec)
    assert _created(p) == [f"qwen-1-{rev[:5]}", f"qwen-2-{rev[:5]}"]
    assert _cond(p, c.PROGRESSING) == ("True", c.REASON_SCALING)


def test_scale_down_removes_highest_first_with_uids() -> None:
    spec = _spec(replicas=1)
    jobsets, pods = _steady(_spec(replicas=3), 3)
    p = plan(_obs(spec, jobsets=tuple(jobsets), pods=tuple(pods), service=SERVICE))
    assert _deleted(p) == [jobsets[2].name, jobsets[1].name]
    assert [d.uid for d in p.delete] == [jobsets[2].uid, jobsets[1].uid]
    assert _created(p) == []


# -- rollout ------------------------------------------------------------------------------


NEW = {"model": {"name": "Qwen/Qwen3-0.6B", "revision": "v2"}}


def test_surge_creates_new_before_deleting_old() -> None:
    old_spec = _spec(replicas=2)
    new_spec = _spec(replicas=2, **NEW)
    jobsets, pods = _steady(old_spec, 2)
    p = plan(_obs(new_spec, jobsets=tuple(jobsets), pods=tuple(pods), service=SERVICE))
    new = _rev(new_spec)
    assert _created(p) == [f"qwen-0-{new[:5]}"]  # budget: replicas + maxSurge(1) - 2 existing
    assert _deleted(p) == []
    assert _cond(p, c.PROGRESSING) == ("True", c.REASON_ROLLING_OUT)
    assert _cond(p, c.READY) == ("True", c.REASON_ALL_REPLICAS_READY)
    assert p.status.phase == "Updating"


def test_old_replica_goes_once_the_new_leader_is_ready() -> None:
    old_spec = _spec(replicas=2)
    new_spec = _spec(replicas=2, **NEW)
    jobsets, _ = _steady(old_spec, 2)
    new0 = _js(0, _rev(new_spec), ready=False)
    p = plan(_obs(new_spec, jobsets=(*jobsets, new0), service=SERVICE))
    assert _deleted(p) == []
    assert _created(p) == []
    new0 = replace(new0, leader_ready=True)
    p = plan(_obs(new_spec, jobsets=(*jobsets, new0), service=SERVICE))
    assert _deleted(p) == [jobsets[0].name]
    assert _created(p) == []  # the old group still holds its GPUs while it terminates
    p = plan(_obs(new_spec, jobsets=(replace(jobsets[0], deleting=True), jobsets[1], new0), service=SERVICE))
    assert _created(p) == []
    p = plan(_obs(new_spec, jobsets=(jobsets[1], new0), service=SERVICE))
    assert _created(p) == [f"qwen-1-{_rev(new_spec)[:5]}"]


def test_max_surge_zero_deletes_first_and_waits_for_the_gpus() -> None:
    old_spec = _spec(replicas=2)
    new_spec = _spec(replicas=2, rollout={"maxSurge": 0}, **NEW)
    jobsets, pods = _steady(old_spec, 2)
    p = plan(_obs(new_spec, jobsets=tuple(jobsets), pods=tuple(pods), service=SERVICE))
    assert _deleted(p) == [jobsets[0].name]  # one slot down at a time (maxUnavailable 0 -> 1)
    assert _created(p) == []
    terminating = replace(jobsets[0], deleting=True)
    p = plan(_obs(new_spec, jobsets=(terminating, jobsets[1]), service=SERVICE))
    assert _created(p) == []
    assert _deleted(p) == []
    p = plan(_obs(new_spec, jobsets=(jobsets[1],), service=SERVICE))
    assert _created(p) == [f"qwen-0-{_rev(new_spec)[:5]}"]
    assert _deleted(p) == []


class World:
    """A toy cluster: created JobSets become Ready on the next pass; deletes take one pass."""

    def __init__(self, jobsets: list[ObservedJobSet]) -> None:
        self.jobsets = {js.name: js for js in jobsets}

    def step(self, p: Plan) -> None:
        for name in list(self.jobsets):
            js = self.jobsets[name]
            if js.deleting:
                del self.jobsets[name]
            elif not js.leader_ready:
                self.jobsets[name] = replace(js, leader_ready=True)
        for d in p.delete:
            assert self.jobsets[d.name].uid == d.uid
            self.jobsets[d.name] = replace(self.jobsets[d.name], deleting=True)
        for doc in p.apply:
            if doc["kind"] != "JobSet":
                continue
            meta = doc["metadata"]
            labels = meta["labels"]
            assert meta["name"] not in self.jobsets
            self.jobsets[meta["name"]] = ObservedJobSet(
                name=meta["name"],
                uid=f"uid-{meta['name']}",
                replica=int(labels[keys.LABEL_REPLICA]),
                revision=labels[keys.LABEL_REVISION],
            )


@pytest.mark.parametrize(
    ("replicas", "rollout"),
    [
        (3, {"maxSurge": 1}),
        (3, {"maxSurge": 2}),
        (3, {"maxSurge": 0}),
        (4, {"maxSurge": 0, "maxUnavailable": 2}),
        (1, {"maxSurge": 0}),
        (2, {"maxSurge": 5}),
    ],
)
def test_rollout_simulation_keeps_invariants_and_converges(replicas: int, rollout: dict[str, int]) -> None:
    old_spec = _spec(replicas=replicas)
    new_spec = _spec(replicas=replicas, rollout=rollout, **NEW)
    jobsets, _ = _steady(old_spec, replicas)
    world = World(jobsets)
    surge = rollout["maxSurge"]
    floor = replicas - max(rollout.get("maxUnavailable", 0), 1 if surge == 0 else 0)
    new = _rev(new_spec)
    for _ in range(30):
        p = plan(_obs(new_spec, jobsets=tuple(world.jobsets.values()), service=SERVICE))
        world.step(p)
        assert len(world.jobsets) <= replicas + surge
        serving = {js.replica for js in world.jobsets.values() if js.leader_ready and not js.deleting}
        assert len(serving) >= floor
        if (
            all(js.revision == new and js.leader_ready for js in world.jobsets.values())
            and len(world.jobsets) == replicas
        ):
            break
    else:
        pytest.fail(f"rollout did not converge: {sorted(world.jobsets)}")
    final = plan(_obs(new_spec, jobsets=tuple(world.jobsets.values()), service=SERVICE))
    assert final.idle
    assert sorted(js.replica for js in world.jobsets.values()) == list(range(replicas))


# -- state --------------------------------------------------------------------------------


def test_stopped_suspends_and_running_resumes() -> None:
    spec = _spec(replicas=2)
    jobsets, pods = _steady(spec, 2)
    stopped = _spec(replicas=2, state="Stopped")
    p = plan(_obs(stopped, jobsets=tuple(jobsets), pods=tuple(pods), service=SERVICE))
    assert [(s.name, s.suspend) for s in p.suspend] == [(js.name, True) for js in jobsets]
    assert _cond(p, c.READY) == ("False", c.REASON_STOPPED)
    assert p.status.phase == "Stopped"
    suspended = [replace(js, suspended=True, leader_ready=False) for js in jobsets]
    p = plan(_obs(spec, jobsets=tuple(suspended), service=SERVICE))
    assert [(s.name, s.suspend) for s in p.suspend] == [(js.name, False) for js in jobsets]


def test_fresh_stopped_workload_creates_suspended_jobsets() -> None:
    p = plan(_obs(_spec(state="Stopped")))
    jobset = next(d for d in p.apply if d["kind"] == "JobSet")
    assert jobset["spec"]["suspend"] is True


SLEEPY = {"engine": {"enableSleepMode": True}}


def test_sleeping_asks_awake_leaders_to_sleep() -> None:
    spec = _spec(state="Sleeping", **SLEEPY)
    jobsets, pods = _steady(spec, 1)
    p = plan(
        _obs(spec, jobsets=tuple(jobsets), pods=tuple(pods), service=SERVICE, asleep={jobsets[0].name: False})
    )
    assert [(e.action, e.url) for e in p.engine] == [("sleep", "http://10.0.0.1:8000")]
    assert p.requeue_after is not None
    assert _cond(p, c.SLEEPING) == ("False", c.REASON_FALLING_ASLEEP)
    p = plan(
        _obs(spec, jobsets=tuple(jobsets), pods=tuple(pods), service=SERVICE, asleep={jobsets[0].name: True})
    )
    assert p.engine == []
    assert _cond(p, c.SLEEPING) == ("True", c.REASON_ASLEEP)
    assert _cond(p, c.READY) == ("False", c.REASON_ASLEEP)
    assert p.status.phase == "Sleeping"
    assert p.suspend == []


def test_running_wakes_sleeping_leaders() -> None:
    spec = _spec(**SLEEPY)
    jobsets, pods = _steady(spec, 1)
    p = plan(
        _obs(spec, jobsets=tuple(jobsets), pods=tuple(pods), service=SERVICE, asleep={jobsets[0].name: True})
    )
    assert [e.action for e in p.engine] == ["wake_up"]
    assert _cond(p, c.SLEEPING) == ("False", c.REASON_WAKING_UP)


# -- gating: cache, recipe, cluster, validity -------------------------------------------


CACHED = {"model": {"name": "Qwen/Qwen3-0.6B", "cacheRef": {"name": "qwen-cache"}}}


@pytest.mark.parametrize(
    ("cache", "reason"),
    [
        (None, c.REASON_CACHE_NOT_FOUND),
        (ObservedCache(name="qwen-cache", exists=False), c.REASON_CACHE_NOT_FOUND),
        (ObservedCache(name="qwen-cache", phase="Downloading", message="40%"), c.REASON_CACHE_NOT_READY),
    ],
)
def test_cache_not_ready_creates_no_jobset(cache: ObservedCache | None, reason: str) -> None:
    p = plan(_obs(_spec(**CACHED), cache=cache))
    assert _created(p) == []
    assert _cond(p, c.CACHE_READY) == ("False", reason)
    assert _cond(p, c.READY) == ("False", c.REASON_WAITING_FOR_CACHE)
    assert p.status.phase == "Pending"


def test_ready_cache_is_mounted() -> None:
    cache = ObservedCache(
        name="qwen-cache", ready=True, claim_name="models", path="/hub", resolved_revision="a" * 40
    )
    p = plan(_obs(_spec(**CACHED), cache=cache))
    jobset = next(d for d in p.apply if d["kind"] == "JobSet")
    pod = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["volumes"][1]["persistentVolumeClaim"] == {"claimName": "models", "readOnly": True}
    assert _cond(p, c.CACHE_READY) == ("True", c.REASON_CACHE_READY)
    assert "cacheReady" in {e.stage for e in p.status.startup}


def test_placement_follows_a_single_node_cache() -> None:
    cache = ObservedCache(
        name="qwen-cache",
        ready=True,
        claim_name="models",
        resolved_revision="a" * 40,
        node_name="node-3",
        access_modes=("ReadWriteOnce",),
    )
    p = plan(_obs(_spec(**CACHED), cache=cache))
    jobset = next(d for d in p.apply if d["kind"] == "JobSet")
    pod = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-3"]}]}]
    assert _cond(p, c.CACHE_READY) == ("True", c.REASON_CACHE_READY)


def test_a_multi_node_workload_cannot_share_a_read_write_once_cache() -> None:
    cache = ObservedCache(name="qwen-cache", ready=True, claim_name="models", access_modes=("ReadWriteOnce",))
    p = plan(_obs(_spec(**CACHED, topology={"nodes": 2, "gpusPerNode": 1}), cache=cache))
    assert _created(p) == []
    assert _cond(p, c.CACHE_READY) == ("False", c.REASON_CACHE_NOT_SHAREABLE)
    assert _cond(p, c.READY) == ("False", c.REASON_CACHE_NOT_SHAREABLE)


RECIPE = RecipeSpec.model_validate({"model": "Qwen/Qwen3-8B", "defaults": {"tensor_parallel": 2}})


def test_missing_recipe_blocks() -> None:
    spec = InferenceWorkloadSpec.model_validate({"recipe": {"name": "r"}})
    p = plan(_obs(spec, recipe=ObservedRecipe(name="r", exists=False)))
    assert _created(p) == []
    assert _cond(p, c.RECIPE_RESOLVED) == ("False", c.REASON_RECIPE_NOT_FOUND)
    assert _cond(p, c.READY) == ("False", c.REASON_RECIPE_NOT_FOUND)


def test_recipe_resolves_and_pin_mismatch_holds_running_replicas() -> None:
    spec = InferenceWorkloadSpec.model_validate({"recipe": {"name": "r"}})
    recipe = ObservedRecipe(name="r", spec=RECIPE)
    p = plan(_obs(spec, recipe=recipe))
    assert _cond(p, c.RECIPE_RESOLVED) == ("True", c.REASON_RECIPE_RESOLVED)
    assert p.effective is not None
    assert p.effective.topology.gpus_per_node == 2
    assert p.status.recipe_revision is not None
    pinned = InferenceWorkloadSpec.model_validate({"recipe": {"name": "r", "revision": "0" * 12}})
    running = _js(0, "oldrevision")
    p = plan(_obs(pinned, recipe=recipe, jobsets=(running,), pods=(_leader(running),), service=SERVICE))
    assert _cond(p, c.RECIPE_RESOLVED) == ("False", c.REASON_RECIPE_REVISION_MISMATCH)
    assert p.idle  # nothing rolled, nothing deleted
    assert _cond(p, c.READY) == ("True", c.REASON_ALL_REPLICAS_READY)


def test_invalid_spec_is_reported_not_rendered() -> None:
    p = plan(_obs(_spec(engine={"args": ["--port", "9000"]})))
    assert _created(p) == []
    status, reason = _cond(p, c.READY)
    assert (status, reason) == ("False", c.REASON_INVALID_SPEC)
    ready = find_condition(p.status.conditions, c.READY)
    assert ready is not None
    assert "may not set --port" in ready.message
    assert p.status.phase == "Failed"


def test_missing_cluster_blocks_and_says_so() -> None:
    p = plan(_obs(_spec(cluster="h100"), cluster=ObservedCluster(name="h100", exists=False)))
    assert _created(p) == []
    assert _cond(p, c.SCHEDULED) == ("False", c.REASON_CLUSTER_NOT_FOUND)


def test_cluster_placement_and_queue() -> None:
    cluster = ObservedCluster(name="h100", node_names=("a", "b"), queue_name="q")
    p = plan(_obs(_spec(cluster="h100"), cluster=cluster))
    jobset = next(d for d in p.apply if d["kind"] == "JobSet")
    assert jobset["metadata"]["labels"][keys.LABEL_KUEUE_QUEUE] == "q"
    assert jobset["spec"]["suspend"] is True  # Kueue admits it


def test_queued_jobsets_are_never_unsuspended_and_deleted_on_stop() -> None:
    cluster = ObservedCluster(name="h100", queue_name="q")
    spec = _spec(cluster="h100")
    rev = _rev(spec, cluster=cluster)
    js = _js(0, rev, suspended=True, ready=False)
    p = plan(_obs(spec, cluster=cluster, jobsets=(js,), service=SERVICE))
    assert p.suspend == []
    p = plan(_obs(_spec(cluster="h100", state="Stopped"), cluster=cluster, jobsets=(js,), service=SERVICE))
    assert _deleted(p) == [js.name]


# -- scheduling diagnostics ---------------------------------------------------------------


GPU8 = {"topology": {"nodes": 2, "gpusPerNode": 8, "tensorParallel": 8, "pipelineParallel": 2}}


def test_insufficient_gpu_names_the_ask_and_what_is_free() -> None:
    spec = _spec(**GPU8)
    js = _js(0, _rev(spec), ready=False)
    msg = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available"
    pods = (
        _leader(js, node=None, phase="Pending", ready=False, ip=None, unschedulable=msg),
        ObservedPod(name="w", jobset=js.name, role="worker", replica=0, node=None, unschedulable=msg),
    )
    capacity = (NodeCapacity(name="a", allocatable=8, free=4), NodeCapacity(name="b", allocatable=8, free=8))
    p = plan(_obs(spec, jobsets=(js,), pods=pods, service=SERVICE, capacity=capacity))
    assert _cond(p, c.SCHEDULED) == ("False", c.REASON_INSUFFICIENT_GPU)
    scheduled = find_condition(p.status.conditions, c.SCHEDULED)
    assert scheduled is not None
    assert "2 x 8 nvidia.com/gpu" in scheduled.message
    assert "12 nvidia.com/gpu free" in scheduled.message
    assert "1 node with at least 8 free" in scheduled.message
    ready = find_condition(p.status.conditions, c.READY)
    assert ready is not None
    assert "Insufficient" in ready.message


def test_no_node_large_enough() -> None:
    spec = _spec(**GPU8)
    capacity = (NodeCapacity(name="a", allocatable=4, free=4),)
    p = plan(_obs(spec, capacity=capacity, cluster=ObservedCluster(name="small")))
    assert _cond(p, c.SCHEDULED) == ("False", c.REASON_NO_FITTING_NODES)
    scheduled = find_condition(p.status.conditions, c.SCHEDULED)
    assert scheduled is not None
    assert "cluster 'small'" in scheduled.message
    assert "largest: 4" in scheduled.message


# -- failures -----------------------------------------------------------------------------


def test_failed_group_is_kept_briefly_then_recreated() -> None:
    spec = _spec()
    rev = _rev(spec)
    failed_at = NOW - dt.timedelta(seconds=2)
    js = _js(
        0, rev, ready=False, terminal="Failed", terminal_time=failed_at, terminal_message="boom", restarts=5
    )
    p = plan(_obs(spec, jobsets=(js,), service=SERVICE))
    assert _deleted(p) == []
    assert p.requeue_after == pytest.approx((FAILED_BACKOFF - dt.timedelta(seconds=2)).total_seconds())
    assert _cond(p, c.DEGRADED) == ("True", c.REASON_GROUP_FAILED)
    assert p.status.last_failure is not None
    assert p.status.last_failure.reason == "JobSetFailed"
    p = plan(_obs(spec, jobsets=(js,), service=SERVICE, now=failed_at + FAILED_BACKOFF))
    assert _deleted(p) == [js.name]


def test_restarts_and_last_failure_from_pods() -> None:
    spec = _spec()
    js = _js(0, _rev(spec), ready=False, restarts=2)
    failure = FailureRecord(reason="Error", message="exit 1", time=NOW, exit_code=1, object="Pod/x")
    p = plan(_obs(spec, jobsets=(js,), pods=(_leader(js, failure=failure, ready=False),), service=SERVICE))
    assert p.status.restarts == 2
    assert p.status.last_failure == failure
    assert _cond(p, c.DEGRADED) == ("True", c.REASON_GROUP_RESTARTING)
    assert p.status.phase == "Degraded"


def test_a_jobset_without_pods_for_a_minute_is_reported() -> None:
    spec = _spec()
    js = _js(0, _rev(spec), ready=False, created=NOW - dt.timedelta(seconds=90))
    p = plan(_obs(spec, jobsets=(js,), service=SERVICE))
    scheduled = find_condition(p.status.conditions, c.SCHEDULED)
    assert scheduled is not None
    assert scheduled.reason == c.REASON_PODS_PENDING
    assert f"kubectl describe jobset {js.name}" in scheduled.message
    with_jobs = replace(js, jobs=1)  # Jobs exist (a restart or resume in progress): not stuck
    p = plan(_obs(spec, jobsets=(with_jobs,), service=SERVICE))
    scheduled = find_condition(p.status.conditions, c.SCHEDULED)
    assert scheduled is not None
    assert scheduled.message == "waiting for pods"
    fresh = replace(js, created=NOW - dt.timedelta(seconds=5))
    p = plan(_obs(spec, jobsets=(fresh,), service=SERVICE))
    scheduled = find_condition(p.status.conditions, c.SCHEDULED)
    assert scheduled is not None
    assert scheduled.message == "waiting for pods"

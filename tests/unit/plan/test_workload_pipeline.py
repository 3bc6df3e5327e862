"""The planner's pipeline entry points (``plan/workload/``) beside ``plan``: ``status_only``
(the status lane's planning step), ``finalize`` (what the apiserver refused -> the status), and
the pure index helpers of ``plan/observe.py`` the controller's observation is built from."""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

from sparkrun_operator.api import conditions as c
from sparkrun_operator.api.meta import find_condition
from sparkrun_operator.api.workload import InferenceWorkloadSpec, InferenceWorkloadStatus
from sparkrun_operator.plan import cluster as cluster_plan
from sparkrun_operator.plan import names, observe
from sparkrun_operator.plan.cluster import ObservedGpuPod, ObservedNode
from sparkrun_operator.plan.workload import (
    Observation,
    ObservedCluster,
    ObservedJobSet,
    ObservedPod,
    finalize,
    plan,
    status_only,
)
from sparkrun_operator.render import keys

NOW = dt.datetime(2026, 9, 1, 12, 0, tzinfo=dt.UTC)
SERVICE = {
    "spec": {
        "selector": {keys.LABEL_WORKLOAD: "qwen", keys.LABEL_ROLE: "leader"},
        "ports": [{"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"}],
        "publishNotReadyAddresses": False,
    }
}


def _obs(**kwargs: Any) -> Observation:
    values: dict[str, Any] = {
        "name": "qwen",
        "namespace": "ns",
        "uid": "uid-w",
        "generation": 2,
        "spec": InferenceWorkloadSpec.model_validate({"model": {"name": "Qwen/Qwen3-0.6B"}}),
        "status": InferenceWorkloadStatus(),
        "now": NOW,
        "created": NOW - dt.timedelta(minutes=1),
    }
    values.update(kwargs)
    return Observation(**values)


def _running(*, ready: bool) -> tuple[tuple[ObservedJobSet, ...], tuple[ObservedPod, ...]]:
    revision = plan(_obs()).revision
    assert revision is not None
    js = ObservedJobSet(
        name=f"qwen-0-{revision[:5]}", uid="u", replica=0, revision=revision, leader_ready=ready
    )
    pod = ObservedPod(
        name=f"{js.name}-leader-0-0-x",
        jobset=js.name,
        role="leader",
        replica=0,
        revision=revision,
        phase="Running",
        ready=ready,
        ip="10.0.0.7",
        node="gpu-0",
    )
    return (js,), (pod,)


def test_status_only_is_the_full_plans_status_when_nothing_is_to_do() -> None:
    for ready in (False, True):
        jobsets, pods = _running(ready=ready)
        obs = _obs(jobsets=jobsets, pods=pods, service=SERVICE)
        full = plan(obs)
        assert full.idle
        status = status_only(obs)
        assert status == full.status
        assert status is not None
        assert status.ready_replicas == int(ready)
        assert status.endpoints[0].ready is ready
        ready_cond = find_condition(status.conditions, c.READY)
        assert ready_cond is not None
        assert ready_cond.status == ("True" if ready else "False")


def test_status_only_leaves_a_plan_with_actions_to_the_full_pass() -> None:
    assert status_only(_obs()) is None  # the Service and the JobSet are still to be created
    jobsets, pods = _running(ready=True)
    assert status_only(_obs(jobsets=jobsets, pods=pods)) is None  # the Service is missing


def test_finalize_reports_refused_actions_on_ready() -> None:
    jobsets, pods = _running(ready=True)
    status = plan(_obs(jobsets=jobsets, pods=pods, service=SERVICE)).status
    assert finalize(status, refused=[], generation=2, now=NOW) is status
    final = finalize(status, refused=["JobSet a: denied", "Service qwen: invalid"], generation=2, now=NOW)
    ready = find_condition(final.conditions, c.READY)
    assert ready is not None
    assert (ready.status, ready.reason) == ("False", c.REASON_INVALID_SPEC)
    assert ready.message == "the apiserver refused a child object: JobSet a: denied; Service qwen: invalid"
    assert final.phase == "Failed"
    assert status.phase == "Running"  # the planned status is left as it was


def _cluster(name: str, *, default: bool = False, created: str = "2026-09-01T10:00:00Z") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "creationTimestamp": created},
        "spec": {"default": default, "nodes": {"names": ["gpu-0"]}},
    }


def test_workload_cluster_named_default_or_none() -> None:
    clusters = {"a": [_cluster("a")], "b": [_cluster("b", default=True)]}
    named, raw = observe.workload_cluster("a", clusters)
    assert named is not None
    assert (named.name, named.exists, raw) == ("a", True, clusters["a"][0])
    missing, raw = observe.workload_cluster("zz", clusters)
    assert missing == ObservedCluster(name="zz", exists=False)
    assert raw is None
    default, raw = observe.workload_cluster(None, clusters)
    assert default is not None
    assert default.name == "b"
    assert observe.workload_cluster(None, {"a": [_cluster("a")]}) == (None, None)
    assert observe.workload_cluster(None, None) == (None, None)


def test_capacity_of_cluster_members_or_gpu_nodes() -> None:
    nodes = [
        ObservedNode(name="gpu-0", ready=True, allocatable={"nvidia.com/gpu": 8}),
        ObservedNode(name="gpu-1", ready=True, allocatable={"nvidia.com/gpu": 4}),
        ObservedNode(name="cpu-0", ready=True, allocatable={}),
    ]
    gpu_pods = {"gpu-0": [ObservedGpuPod(node="gpu-0", requests={"nvidia.com/gpu": 3})]}
    everywhere = observe.capacity(
        cluster=None, cluster_raw=None, nodes=nodes, gpu_pods=gpu_pods, gpu_resource="nvidia.com/gpu"
    )
    assert [(n.name, n.allocatable, n.free) for n in everywhere] == [("gpu-0", 8, 5), ("gpu-1", 4, 4)]
    raw = _cluster("a")
    cluster, _ = observe.workload_cluster("a", {"a": [raw]})
    members = observe.capacity(
        cluster=cluster, cluster_raw=raw, nodes=nodes, gpu_pods=None, gpu_resource="nvidia.com/gpu"
    )
    assert [n.name for n in members] == ["gpu-0"]
    uncounted = observe.capacity(
        cluster=None,
        cluster_raw=None,
        nodes=nodes,
        gpu_pods=gpu_pods,
        gpu_resource="nvidia.com/gpu",
        count_free=False,
    )
    assert [(n.name, n.allocatable, n.free) for n in uncounted] == [("gpu-0", 8, None), ("gpu-1", 4, None)]


def test_capacity_agrees_with_the_clusters_node_status() -> None:
    """``capacity`` does the cluster status's GPU accounting without its models: same figures."""
    rng = random.Random(7)
    gpu = "nvidia.com/gpu"
    for _ in range(200):
        nodes = [
            ObservedNode(
                name=f"n{i}",
                ready=rng.random() > 0.2,
                unschedulable=rng.random() < 0.2,
                allocatable={gpu: rng.choice([0, 1, 4, 8])},
            )
            for i in range(rng.randint(1, 6))
        ]
        pods: dict[str, list[ObservedGpuPod]] = {}
        for _ in range(rng.randint(0, 12)):
            node = rng.choice(nodes).name
            phase = rng.choice(["Running", "Pending", "Succeeded", "Failed"])
            # an index entry of another node's pod too (a stale key): neither counts it
            bound = node if rng.random() > 0.1 else "elsewhere"
            pods.setdefault(node, []).append(
                ObservedGpuPod(node=bound, phase=phase, requests={gpu: rng.randint(0, 8)})
            )
        got = observe.capacity(cluster=None, cluster_raw=None, nodes=nodes, gpu_pods=pods, gpu_resource=gpu)
        for capacity in got:
            node = next(n for n in nodes if n.name == capacity.name)
            want = cluster_plan.node_status(node, gpu_resource=gpu, pods=pods.get(node.name, []))
            assert (capacity.ready, capacity.schedulable, capacity.allocatable, capacity.free) == (
                want.ready,
                want.schedulable,
                want.gpus.allocatable,
                want.gpus.free,
            )


def test_needs_capacity_and_recipe_of() -> None:
    placed = ObservedPod(name="p", jobset="j", role="leader", node="gpu-0")
    assert observe.needs_capacity([])
    assert not observe.needs_capacity([placed])
    assert observe.needs_capacity([placed, ObservedPod(name="q", jobset="j", role="worker")])
    pending = ObservedPod(name="q", jobset="j", role="worker")
    refused = ObservedPod(name="r", jobset="j", role="worker", unschedulable="0/4 nodes: Insufficient gpu")
    assert not observe.needs_free([placed, pending])  # free GPUs explain only a refused pod
    assert observe.needs_free([placed, refused])
    assert observe.recipe_of(None, name="r").exists is False
    assert observe.recipe_of({"model": "Qwen/Qwen3-0.6B"}, name="r").spec is not None
    broken = observe.recipe_of({"model": 7, "defaults": "no"}, name="r")
    assert (broken.exists, broken.spec) == (True, None)


def test_routable_names_the_older_workload_that_keeps_a_contested_name() -> None:
    """Issue 15: the loser of a name says so (Routable=False, NameConflict, naming the winner);
    the rule is the gateway's (plan/names.py). Issue 24: the planner's own claim is the names it
    resolves in this pass, not the (stale) entry the names index holds for it."""
    spec = InferenceWorkloadSpec.model_validate(
        {"model": {"name": "Qwen/Qwen3-0.6B", "servedName": "qwen", "aliases": ["small"]}}
    )
    stale = names.Claim(namespace="ns", name="qwen", served="old-name", created=NOW - dt.timedelta(minutes=1))
    older = names.Claim(namespace="other", name="first", served="small", created=NOW - dt.timedelta(days=1))
    index = {"old-name": [stale], "small": [older]}
    status = plan(_obs(spec=spec, holders=lambda model: index.get(model, []))).status
    assert status.model is not None
    assert (status.model.served_name, status.model.aliases) == ("qwen", ["small"])
    routable = next(cond for cond in status.conditions if cond.type == c.ROUTABLE)
    assert (routable.status, routable.reason) == ("False", c.REASON_NAME_CONFLICT)
    assert "alias 'small' is served by other/first" in routable.message
    assert "routes this workload as 'qwen' only" in routable.message
    fine = plan(_obs(spec=spec, holders=lambda model: [stale] if model == "old-name" else [])).status
    ok = next(cond for cond in fine.conditions if cond.type == c.ROUTABLE)
    assert (ok.status, ok.reason, ok.message) == (
        "True",
        c.REASON_NAMES_ACCEPTED,
        "the gateway routes 'qwen', 'small'",
    )
    # without the names index nothing is said about routing
    assert all(cond.type != c.ROUTABLE for cond in plan(_obs(spec=spec)).status.conditions)


def test_conflicts_agree_with_the_gateways_owners() -> None:
    """The planner's per-name scan of the names index (``conflicts``) reports exactly the names
    that the gateway's rule (``owners`` over every claim) gives to another workload, for random
    claims sharing names, timestamps missing or equal."""
    rng = random.Random(11)
    base = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    pool = ["a", "b", "c", "d"]
    for _ in range(300):
        claims = []
        for i in range(rng.randint(1, 8)):
            picked = rng.sample(pool, rng.randint(1, 3))
            created = None if rng.random() < 0.2 else base + dt.timedelta(seconds=rng.randint(0, 3))
            claims.append(
                names.Claim(
                    namespace=rng.choice(["x", "y"]),
                    name=f"w{i}",
                    served=picked[0],
                    aliases=tuple(picked[1:]),
                    created=created,
                )
            )
        index: dict[str, list[names.Claim]] = {}
        for claim in claims:
            for model in claim.names:
                index.setdefault(model, []).append(claim)
        won = names.owners(claims)
        for claim in claims:
            want = [(m, won[m].key) for m in claim.names if won[m].key != claim.key]
            got = names.conflicts(claim, lambda model, index=index: index.get(model, ()))
            assert [(c.model, c.winner.key) for c in got] == want, (claim, claims)
            assert all(c.alias == (c.model != claim.served) for c in got)

"""Drain and replace, the pure decisions (``plan/drain.py``): which group moves next, one at a
time, after the settle time, until Ready again; the blocked cases; the request token; bounds;
and what the workloads and the gateway read from the status."""

from __future__ import annotations

import asyncio
import datetime as dt
from types import SimpleNamespace
from typing import Any

import pytest

from sparkrun_operator.api.drain import MAX_GROUPS, ClusterDrainStatus, DrainSpec
from sparkrun_operator.controllers.drain import drain_scope, observe_groups
from sparkrun_operator.k8s.errors import KubeInvalid
from sparkrun_operator.ops import ifmatch, kube, rollout
from sparkrun_operator.ops.errors import Conflict, PreconditionFailed
from sparkrun_operator.ops.executors import drain as drain_op
from sparkrun_operator.ops.executors.drain import requested_drain
from sparkrun_operator.plan import drain
from sparkrun_operator.plan.cluster import ObservedNode
from sparkrun_operator.plan.drain import ObservedGroup, after_eviction, plan_drain
from sparkrun_operator.plan.workload.model import ObservedJobSet, ObservedPod

T0 = dt.datetime(2026, 12, 6, 12, 0, tzinfo=dt.UTC)
NODES = [ObservedNode(name=f"n{i}", ready=True) for i in range(4)]


def cordoned(*names: str) -> list[ObservedNode]:
    return [ObservedNode(name=n.name, ready=True, unschedulable=n.name in names) for n in NODES]


def pod(
    js: str, role: str, node: str | None, *, ready: bool = True, deleting: bool = False, i: int = 0
) -> ObservedPod:
    return ObservedPod(
        name=f"{js}-{role}-{i}",
        jobset=js,
        role=role,
        replica=int(js[-1]),
        phase="Running" if node else "Pending",
        ready=ready and node is not None,
        node=node,
        deleting=deleting,
        unschedulable=None if node else "0/4 nodes are available: 4 Insufficient nvidia.com/gpu",
    )


def group(
    replica: int,
    leader: str | None,
    worker: str | None,
    *,
    other_ready: int = 1,
    workload: str = "relay",
    **kw: bool,
) -> ObservedGroup:
    js = f"{workload}-r{replica}"
    return ObservedGroup(
        namespace="ns",
        workload=workload,
        replica=replica,
        jobset=js,
        pods=(pod(js, "leader", leader, **kw), pod(js, "worker", worker, **kw)),
        other_ready=other_ready,
    )


def spec(**kw: object) -> DrainSpec:
    return DrainSpec.model_validate({"request": "tok-1", "settleSeconds": 10, **kw})


def step(
    previous: ClusterDrainStatus | None,
    groups: list[ObservedGroup],
    at: float,
    *,
    nodes: list[ObservedNode] | None = None,
    **kw: object,
) -> drain.DrainPlan:
    return plan_drain(
        spec=spec(**kw),
        previous=previous,
        members=nodes if nodes is not None else cordoned("n1"),
        groups=groups,
        now=T0 + dt.timedelta(seconds=at),
    )


def test_no_drain_configured_or_requested() -> None:
    assert plan_drain(spec=None, previous=None, members=cordoned("n1"), groups=[], now=T0).status is None
    idle = plan_drain(
        spec=DrainSpec(), previous=None, members=cordoned("n1"), groups=[group(0, "n0", "n1")], now=T0
    )
    assert idle.status is not None
    assert idle.status.state == "Idle"
    assert idle.evict is None


def test_a_group_leaves_routing_then_is_evicted_after_settling_then_is_ready_elsewhere() -> None:
    moving = [group(0, "n0", "n1"), group(1, "n2", "n3")]
    first = step(None, moving, 0)
    assert first.status is not None
    assert first.status.state == "Draining"
    (entry,) = first.status.groups
    assert (entry.replica, entry.state, entry.unrouted, entry.from_nodes) == (
        0,
        "Moving",
        ["relay-r0-leader-0"],
        ["n0", "n1"],
    )
    assert first.evict is None  # still settling: requests in flight finish
    almost = step(first.status, moving, 9)
    assert almost.evict is None
    assert almost.requeue_after == 1.0  # looked at again when the settle time ends
    settled = step(first.status, moving, 10)
    assert settled.evict is not None
    assert settled.evict.pod == "relay-r0-worker-0"
    assert settled.status is not None
    evicted = after_eviction(
        settled.status, settled.evict, "evicted", detail="", now=T0 + dt.timedelta(seconds=10)
    )
    assert evicted.groups[0].evicted_at is not None
    # the group restarts: old pods stopping, then new ones pending, then ready off n1
    stopping = [group(0, "n0", "n1", deleting=True), group(1, "n2", "n3")]
    again = step(evicted, stopping, 12)
    assert again.evict is None
    assert again.status is not None
    assert again.status.groups[0].state == "Moving"
    back = [group(0, "n0", "n2"), group(1, "n2", "n3")]
    done = step(again.status, back, 40)
    assert done.status is not None
    assert done.status.state == "Done"
    (final,) = done.status.groups
    assert (final.state, final.to_nodes, final.unrouted) == ("Ready", ["n0", "n2"], [])
    assert done.status.finished is not None
    assert done.requeue_after is None


def test_one_group_at_a_time_across_the_cluster() -> None:
    # two workloads each with a group on the cordoned node n1
    groups = [group(0, "n0", "n1"), group(0, "n1", "n2", workload="other")]
    first = step(None, groups, 0)
    assert first.status is not None
    states = {(g.workload, g.state) for g in first.status.groups}
    assert states == {("other", "Moving"), ("relay", "Pending")} or states == {
        ("relay", "Moving"),
        ("other", "Pending"),
    }
    moving = next(g for g in first.status.groups if g.state == "Moving")
    later = step(first.status, groups, 60)
    assert later.evict is not None
    assert later.evict.key[1] == moving.workload
    assert later.status is not None
    evicted = after_eviction(
        later.status, later.evict, "evicted", detail="", now=T0 + dt.timedelta(seconds=60)
    )
    # the moved group is not back yet: the other one keeps waiting however long it takes
    still = step(evicted, groups, 600)
    assert still.status is not None
    assert [g.state for g in still.status.groups].count("Moving") == 1
    assert still.evict is None


def test_the_last_ready_replica_is_not_moved_unless_allowed() -> None:
    only = [group(0, "n0", "n1", other_ready=0)]
    blocked = step(None, only, 0)
    assert blocked.status is not None
    assert blocked.status.state == "Blocked"
    assert "only ready replica" in blocked.status.groups[0].message
    assert blocked.evict is None
    # another replica turns ready: it moves
    assert step(blocked.status, [group(0, "n0", "n1", other_ready=1)], 5).status.groups[0].state == "Moving"  # type: ignore[union-attr]
    allowed = step(None, only, 0, allowLastReplica=True)
    assert allowed.status is not None
    assert allowed.status.groups[0].state == "Moving"


def test_a_refused_eviction_puts_the_group_back_and_is_retried() -> None:
    groups = [group(0, "n0", "n1")]
    first = step(None, groups, 0, settleSeconds=0)
    assert first.evict is not None
    assert first.status is not None
    refused = after_eviction(
        first.status,
        first.evict,
        "refused",
        detail="Cannot evict pod as it would violate the pod's disruption budget.",
        now=T0,
    )
    (entry,) = refused.groups
    assert (entry.state, entry.unrouted, refused.state) == ("Blocked", [], "Blocked")
    assert "disruption budget" in entry.message
    assert step(refused, groups, 10, settleSeconds=0).evict is None  # not before RETRY_REFUSED
    retried = step(refused, groups, 31, settleSeconds=0)
    assert retried.status is not None
    assert retried.status.groups[0].state == "Moving"


def test_a_group_that_cannot_be_placed_blocks_the_drain() -> None:
    groups = [group(0, "n0", "n1"), group(1, "n2", "n1")]
    first = step(None, groups, 0, settleSeconds=0)
    assert first.evict is not None
    assert first.status is not None
    evicted = after_eviction(first.status, first.evict, "evicted", detail="", now=T0)
    pending = [group(0, None, None), group(1, "n2", "n1")]
    stuck = step(evicted, pending, 5, settleSeconds=0)
    assert stuck.status is not None
    assert stuck.status.state == "Blocked"
    g0 = stuck.status.groups[0]
    assert g0.state == "Blocked"
    assert "cannot be placed" in g0.message
    assert "Insufficient" in g0.message
    assert stuck.status.groups[1].state == "Pending"
    assert stuck.evict is None
    # capacity comes back: it is Ready, and the next group moves
    healed = step(stuck.status, [group(0, "n0", "n2"), group(1, "n2", "n1")], 60, settleSeconds=0)
    assert healed.status is not None
    assert [g.state for g in healed.status.groups] == ["Ready", "Moving"]
    assert healed.evict is not None
    assert healed.evict.key[2] == 1


def test_a_moved_group_not_ready_in_time_is_blocked() -> None:
    groups = [group(0, "n0", "n1")]
    first = step(None, groups, 0, settleSeconds=0, groupTimeoutSeconds=60)
    assert first.evict is not None
    assert first.status is not None
    evicted = after_eviction(first.status, first.evict, "evicted", detail="", now=T0)
    slow = [group(0, "n0", "n2", ready=False)]
    assert step(evicted, slow, 30, settleSeconds=0, groupTimeoutSeconds=60).status.state == "Draining"  # type: ignore[union-attr]
    late = step(evicted, slow, 61, settleSeconds=0, groupTimeoutSeconds=60)
    assert late.status is not None
    assert late.status.state == "Blocked"
    assert "not Ready 60 s after the eviction" in late.status.groups[0].message


def test_which_nodes_are_drained() -> None:
    tainted = ObservedNode(name="t", ready=True, taints=frozenset({drain.UNSCHEDULABLE_TAINT}))
    dedicated = ObservedNode(name="d", ready=True, taints=frozenset({"sparkrun.dev/testbed-runtime"}))
    not_ready = ObservedNode(name="x", ready=False)
    assert drain.drained_nodes([tainted, dedicated, not_ready, *cordoned("n3")]) == ["n3", "t"]


def test_the_request_token_is_handled_once() -> None:
    groups = [group(0, "n0", "n1")]
    nothing = step(None, [group(0, "n0", "n2")], 0)
    assert nothing.status is not None
    assert (nothing.status.state, nothing.status.request) == ("Done", "tok-1")
    # Done for tok-1: a group that lands on a cordoned node later waits for a new request
    assert step(nothing.status, groups, 5).status == nothing.status
    fresh = step(nothing.status, groups, 5, request="tok-2")
    assert fresh.status is not None
    assert fresh.status.request == "tok-2"
    assert fresh.status.state == "Draining"


def test_automatic_mode_drains_without_a_request() -> None:
    moving = plan_drain(
        spec=DrainSpec(mode="Automatic"),
        previous=None,
        members=cordoned("n1"),
        groups=[group(0, "n0", "n1")],
        now=T0,
    )
    assert moving.status is not None
    assert moving.status.groups[0].state == "Moving"
    idle = plan_drain(
        spec=DrainSpec(mode="Automatic"), previous=None, members=NODES, groups=[group(0, "n0", "n1")], now=T0
    )
    assert idle.status is not None
    assert idle.status.state == "Idle"


def test_bounded_group_list() -> None:
    many = [group(i % 10, "n0", "n1", workload=f"w{i:03d}") for i in range(MAX_GROUPS + 6)]
    planned = step(None, many, 0)
    assert planned.status is not None
    assert len(planned.status.groups) == MAX_GROUPS
    assert planned.status.remaining == 6


def test_workloads_and_the_gateway_read_the_moving_group() -> None:
    first = step(None, [group(0, "n0", "n1"), group(1, "n2", "n3")], 0)
    assert first.status is not None
    views = drain.workload_views("pool", first.status.to_wire())
    view = views[("ns", "relay")]
    assert view.cluster == "pool"
    assert [g.replica for g in view.groups] == [0]
    assert drain.unrouted_of({"status": {"drain": view.to_wire()}}) == {"relay-r0-leader-0"}
    assert ("ns", "else") not in views
    assert drain.workload_views("pool", {"state": 7}) == {}
    assert drain.workload_views("pool", None) == {}
    raw = {
        "status": {
            "drain": {
                "groups": [{"state": "Moving", "unrouted": ["p1", 3]}, {"state": "Ready", "unrouted": ["p2"]}]
            }
        }
    }
    assert drain.unrouted_of(raw) == {"p1"}
    assert drain.unrouted_of({"status": {"drain": {"groups": "junk"}}}) == frozenset()


def test_a_lost_eviction_record_a_gone_group_and_an_uncordoned_node() -> None:
    groups = [group(0, "n0", "n1"), group(1, "n2", "n3")]
    first = step(None, groups, 0)
    assert first.status is not None
    # an operator restarted after its eviction, before writing it: the pod is already stopping
    stopping = [group(0, "n0", "n1", deleting=True), group(1, "n2", "n3")]
    resumed = step(first.status, stopping, 20)
    assert resumed.evict is None
    assert resumed.status is not None
    (entry,) = resumed.status.groups
    assert entry.state == "Moving"
    assert entry.evicted_at is not None
    # the node is uncordoned while the group settles: nothing to move, back into routing
    calm = step(first.status, groups, 5, nodes=cordoned())
    assert calm.status is not None
    assert [(g.state, g.unrouted) for g in calm.status.groups] == [("Ready", [])]
    # the workload is deleted mid-move: its entry ends, the drain is not held by it
    gone = step(first.status, [group(1, "n2", "n3")], 5)
    assert gone.status is not None
    assert gone.status.state == "Done"
    assert "gone" in gone.status.groups[0].message


def test_groups_from_the_indexes() -> None:
    key = ("ns", "relay")
    jobsets = {
        key: [
            ObservedJobSet(name="relay-r0", uid="u0", replica=0, revision="a"),
            ObservedJobSet(name="relay-r1", uid="u1", replica=1, revision="a"),
        ]
    }
    pods = {key: [*group(0, "n0", "n1").pods, pod("relay-r1", "leader", "n2", ready=False)]}
    found = {g.key: g for g in observe_groups(jobsets, pods)}
    assert set(found) == {("ns", "relay", 0), ("ns", "relay", 1)}
    assert found[("ns", "relay", 0)].other_ready == 0  # replica 1's leader is not ready
    assert found[("ns", "relay", 1)].other_ready == 1
    assert found[("ns", "relay", 1)].pods[0].name == "relay-r1-leader-0"
    assert observe_groups(None, None) == []


def test_an_evicted_group_that_vanishes_for_a_moment_is_waited_for() -> None:
    first = step(
        None, [group(0, "n0", "n1"), group(1, "n2", "n3")], 0, settleSeconds=0, groupTimeoutSeconds=60
    )
    assert first.evict is not None
    assert first.status is not None
    evicted = after_eviction(first.status, first.evict, "evicted", detail="", now=T0)
    # its JobSet is made again by the workload's controller: for a moment there is no group 0
    absent = step(evicted, [group(1, "n2", "n3")], 5, settleSeconds=0, groupTimeoutSeconds=60)
    assert absent.status is not None
    assert (absent.status.state, absent.status.groups[0].state) == ("Draining", "Moving")
    back = step(absent.status, [group(0, "n0", "n2"), group(1, "n2", "n3")], 20, settleSeconds=0)
    assert back.status is not None
    assert back.status.groups[0].state == "Ready"
    # never seen again (the workload was deleted meanwhile): gone once the timeout passed
    late = step(absent.status, [group(1, "n2", "n3")], 61, settleSeconds=0, groupTimeoutSeconds=60)
    assert late.status is not None
    assert late.status.state == "Done"
    assert "gone" in late.status.groups[0].message


def test_events_for_each_move() -> None:
    groups = [group(0, "n0", "n1"), group(1, "n2", "n3")]
    first = step(None, groups, 0, settleSeconds=0)
    assert first.status is not None
    assert first.evict is not None
    assert [e[:2] for e in drain.transitions(None, first.status)] == [("Normal", "DrainMoving")]
    evicted = after_eviction(first.status, first.evict, "evicted", detail="", now=T0)
    assert [e[1] for e in drain.transitions(first.status, evicted)] == ["DrainEvicted"]
    done = step(evicted, [group(0, "n0", "n2"), group(1, "n2", "n3")], 30, settleSeconds=0)
    assert [e[1] for e in drain.transitions(evicted, done.status)] == ["DrainMoved"]
    refused = after_eviction(first.status, first.evict, "refused", detail="PDB", now=T0)
    assert [e[:2] for e in drain.transitions(first.status, refused)] == [("Warning", "DrainBlocked")]
    assert drain.transitions(done.status, done.status) == []


def test_an_idle_automatic_drain_writes_nothing_new() -> None:
    # review: every pass of an Automatic drain with no member cordoned planned a new
    # status.drain.started, and the cluster's own status write starts the next pass: a write loop
    auto = DrainSpec(mode="Automatic")
    first = plan_drain(spec=auto, previous=None, members=NODES, groups=[group(0, "n0", "n1")], now=T0)
    assert first.status is not None
    later = T0 + dt.timedelta(seconds=5)
    again = plan_drain(
        spec=auto, previous=first.status, members=NODES, groups=[group(0, "n0", "n1")], now=later
    )
    assert again.status == first.status
    assert again.requeue_after is None


def test_the_last_ready_replica_is_checked_again_before_the_eviction() -> None:
    # review: the other replica went unready while this one settled out of routing: evicting now
    # would stop serving the model; the group goes back into routing instead
    first = step(None, [group(0, "n0", "n1", other_ready=1)], 0)
    assert first.status is not None
    assert first.status.groups[0].state == "Moving"
    alone = step(first.status, [group(0, "n0", "n1", other_ready=0)], 10)
    assert alone.evict is None
    assert alone.status is not None
    (entry,) = alone.status.groups
    assert (entry.state, entry.unrouted, entry.evicted_at) == ("Blocked", [], None)
    assert "only ready replica" in entry.message
    # allowed: it is evicted all the same
    allowed = step(first.status, [group(0, "n0", "n1", other_ready=0)], 10, allowLastReplica=True)
    assert allowed.evict is not None


def test_a_cluster_drains_only_its_own_workloads() -> None:
    # review: every group on a drained member was moved, whichever cluster its workload is on (two
    # clusters sharing a node moved the same group at once) or whether a workload exists at all
    # (pods a tenant made with the labels of a group held the drain of everyone)
    dependencies = {
        ("ns", "relay"): (None, None, "pool"),
        ("ns", "other"): (None, None, "elsewhere"),
        ("ns", "nocluster"): (None, None, None),
    }
    previous = ClusterDrainStatus(
        request="tok-1",
        state="Draining",
        groups=[
            drain.GroupDrain(namespace="ns", workload="moved", replica=0, jobset="moved-r0", state="Moving"),
            drain.GroupDrain(namespace="ns", workload="other", replica=0, jobset="other-r0", state="Ready"),
        ],
    )
    mine = drain_scope("pool", dependencies, previous)
    assert mine == {("ns", "relay"), ("ns", "moved")}
    pods = {
        ("ns", w): list(group(0, "n0", "n1", workload=w).pods) for w in ("relay", "other", "ghost", "moved")
    }
    found = {g.key for g in observe_groups(None, pods, workloads=mine)}
    assert found == {("ns", "relay", 0), ("ns", "moved", 0)}
    assert {g.key[1] for g in observe_groups(None, pods)} == {"relay", "other", "ghost", "moved"}


def test_a_workload_reads_the_drain_of_its_own_cluster_first() -> None:
    # review: a workload moved from cluster "a-old" to "pool" kept being listed (Ready) in a-old's
    # finished drain, which shadowed pool's drain: the gateway never learnt which pod to skip
    moving = step(None, [group(0, "n0", "n1"), group(1, "n2", "n3")], 0)
    assert moving.status is not None
    finished = ClusterDrainStatus(
        request="x",
        state="Done",
        groups=[
            drain.GroupDrain(namespace="ns", workload="relay", replica=0, jobset="relay-r0", state="Ready")
        ],
    )
    views = [
        drain.workload_views("a-old", finished.to_wire())[("ns", "relay")],
        drain.workload_views("pool", moving.status.to_wire())[("ns", "relay")],
    ]
    view = drain.own_first(views, "pool")
    assert view is not None
    assert view.cluster == "pool"
    assert drain.unrouted_of({"status": {"drain": view.to_wire()}}) == {"relay-r0-leader-0"}
    assert drain.own_first(views, "gone") == views[0]  # else the first by cluster name
    assert drain.own_first([], "pool") is None


def test_the_operations_last_replica_allowance_is_for_its_request_only() -> None:
    # review: clusters.drain with allow_last_replica wrote spec.drain.allowLastReplica: true, which
    # stayed: every later drain (an Automatic one too) then stopped single-replica models unasked
    written = requested_drain({"metadata": {"generation": 3}, "spec": {}}, "tok-9", allow_last=True)
    assert written == {"request": "tok-9", "allowLastReplicaFor": "tok-9"}
    existing = {"metadata": {"generation": 3}, "spec": {"drain": {"mode": "Automatic", "request": "old"}}}
    assert requested_drain(existing, "tok-9", allow_last=True) == {
        "mode": "Automatic",
        "request": "tok-9",
        "allowLastReplicaFor": "tok-9",
    }
    assert requested_drain(existing, "tok-9", allow_last=False) == {"mode": "Automatic", "request": "tok-9"}
    only = [group(0, "n0", "n1", other_ready=0)]
    assert (
        step(None, only, 0, request="tok-9", allowLastReplicaFor="tok-9").status.groups[0].state == "Moving"
    )  # type: ignore[union-attr]
    assert (
        step(None, only, 0, request="tok-10", allowLastReplicaFor="tok-9").status.groups[0].state == "Blocked"
    )  # type: ignore[union-attr]


def test_a_new_request_moves_the_others_past_a_group_stuck_after_its_eviction() -> None:
    # review: one tenant's group that never comes back (pinned to the drained node, a crash on
    # start) holds every other group of the cluster; a new request token is the way past it
    groups = [group(0, "n0", "n1"), group(0, "n1", "n2", workload="other")]
    first = step(None, groups, 0, settleSeconds=0)
    assert first.evict is not None
    assert first.status is not None
    evicted = after_eviction(first.status, first.evict, "evicted", detail="", now=T0)
    stuck_key = first.evict.key
    later = [
        group(0, None, None, workload=stuck_key[1]),
        *(g for g in groups if g.key != stuck_key),
    ]
    held = step(evicted, later, 60, settleSeconds=0)
    assert held.status is not None
    assert held.status.state == "Blocked"
    assert held.evict is None
    again = step(held.status, later, 61, settleSeconds=0, request="tok-2")
    assert again.evict is not None
    assert again.evict.key != stuck_key


class _Rest:
    """The cluster as the apiserver holds it: a JSON patch whose ``test`` fails is a 422, and so is
    a value the schema or a CEL rule refuses (``refuse``)."""

    def __init__(self, version: str, generation: int = 2, refuse: bool = False) -> None:
        self.version = version
        self.generation = generation
        self.refuse = refuse
        self.patches: list[list[dict[str, Any]]] = []

    async def request(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        ops = kw["body"]
        self.patches.append(ops)
        for op in ops:
            if op["path"] == "/metadata/resourceVersion" and op["value"] != self.version:
                raise KubeInvalid("the test operation failed", status=422)
            if op["path"] == "/metadata/generation" and op["value"] != self.generation:
                raise KubeInvalid("the test operation failed", status=422)
        if self.refuse:
            raise KubeInvalid("spec.drain.request: Invalid value: must be at most 64 characters", status=422)
        return {}

    async def get(self, resource: Any, name: str, namespace: str | None = None) -> dict[str, Any]:
        return {"metadata": {"name": name, "resourceVersion": self.version, "generation": self.generation}}


def _write_request(rest: _Rest, cluster: dict[str, Any], if_match: str | None) -> None:
    sets = {"/drain": requested_drain(cluster, "tok-9", allow_last=False)}
    asyncio.run(rollout.write_spec(rest, kube.CLUSTERS, cluster, sets=sets, if_match=if_match))  # type: ignore[arg-type]


def test_the_drain_request_write_is_conditional_under_if_match() -> None:
    # review: registered for If-Match (checked at submission), and the job's write carries it too
    assert "plugins.sparkrun-k8s.clusters.drain" in ifmatch.TABLE
    cluster = {"metadata": {"name": "pool", "generation": 2, "resourceVersion": "41"}, "spec": {}}
    rest = _Rest("42")
    with pytest.raises(PreconditionFailed) as refused:
        _write_request(rest, cluster, "41")
    assert refused.value.attrs["etag"] == '"42"'
    assert rest.patches[0][0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "41"}
    _write_request(rest, cluster, "42")
    _write_request(rest, cluster, None)
    assert [p[0]["path"] for p in rest.patches[1:]] == ["/metadata/resourceVersion", "/metadata/generation"]
    assert rest.patches[-1][-1] == {"op": "add", "path": "/spec/drain", "value": {"request": "tok-9"}}


def test_a_refused_drain_request_is_reported_as_such_not_as_a_change() -> None:
    # review: every 422 of the write was answered "changed since it was read; try again", a
    # schema or CEL refusal too (trying again never helps): only a moved generation is a change
    cluster = {"metadata": {"name": "pool", "generation": 2, "resourceVersion": "41"}, "spec": {}}
    with pytest.raises(KubeInvalid, match="at most 64"):
        _write_request(_Rest("41", refuse=True), cluster, None)
    with pytest.raises(Conflict) as changed:
        _write_request(_Rest("43", generation=3), cluster, None)
    assert changed.value.attrs["reason"] == "changed"


def test_the_moving_group_is_never_left_out_of_a_full_status() -> None:
    # review: with more than MAX_GROUPS unfinished groups the status kept the first by name, so
    # a moving group named late (here after 70 blocked single-replica workloads) was dropped:
    # admitted afresh every pass, its settle time started over and it never moved
    blocked = [group(0, "n0", "n1", other_ready=0, workload=f"a{i:03d}") for i in range(MAX_GROUPS + 6)]
    groups = [*blocked, group(0, "n0", "n1", workload="zzz")]
    first = step(None, groups, 0)
    assert first.status is not None
    assert first.status.remaining == 7
    moving = [g for g in first.status.groups if g.state == "Moving"]
    assert [g.workload for g in moving] == ["zzz"]
    settled = step(first.status, groups, 10)
    assert settled.evict is not None
    assert settled.evict.key == ("ns", "zzz", 0)


def test_following_a_request_ends_once_a_later_request_replaced_it() -> None:
    # review: the job polled every second until its timeout (up to a day) when someone wrote a
    # newer token meanwhile: its own drain is never answered
    class Clusters:
        async def get(self, resource: Any, name: str, namespace: str | None = None) -> dict[str, Any]:
            return {"metadata": {"name": name}, "spec": {"drain": {"request": "tok-later"}}, "status": {}}

    ctx: Any = SimpleNamespace(rest=Clusters(), feedback=None)
    result = asyncio.run(asyncio.wait_for(drain_op._follow(ctx, "pool", "tok-9", 600.0), 10))
    assert result.request == "tok-9"
    assert "tok-later" in result.message
    assert not result.timed_out

"""The InferenceCluster planner (``plan/cluster.py``).

Tested: membership by names and by selector (all four operators), GPU accounting (allocated
from bound non-terminated pods, free never negative), per-node workloads, the GPU product
summary, Ready against minReadyNodes, Degraded for missing/not-ready nodes and duplicate
defaults, and the single-default rule; spec.gpuResource applied on request (status.applied at
first sight, a change recorded as status.drift with UpToDate=False until spec.approve names its
hash, accounting with the value in use).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from sparkrun_operator.api import conditions as c
from sparkrun_operator.api.cluster import InferenceClusterSpec, InferenceClusterStatus
from sparkrun_operator.api.meta import LabelSelector, find_condition
from sparkrun_operator.plan.cluster import (
    ClusterRef,
    ObservedGpuPod,
    ObservedNode,
    default_cluster,
    matches,
    plan_status,
    settings_hash,
)

NOW = dt.datetime(2026, 9, 1, tzinfo=dt.UTC)
GPU = "nvidia.com/gpu"


def _node(name: str, gpus: int = 8, *, ready: bool = True, **labels: str) -> ObservedNode:
    return ObservedNode(
        name=name,
        labels={"nvidia.com/gpu.product": "H100", **labels},
        ready=ready,
        capacity={GPU: gpus},
        allocatable={GPU: gpus},
    )


def _status(
    spec: dict[str, Any],
    nodes: list[ObservedNode],
    pods: list[ObservedGpuPod] | None = None,
    clusters: list[ClusterRef] | None = None,
) -> InferenceClusterStatus:
    return plan_status(
        name="pool",
        spec=InferenceClusterSpec.model_validate(spec),
        generation=2,
        previous=InferenceClusterStatus(),
        nodes=nodes,
        pods=pods or [],
        clusters=clusters or [],
        now=NOW,
    )


def test_accounting_by_names() -> None:
    nodes = [_node("a"), _node("b"), _node("c")]
    pods = [
        ObservedGpuPod(node="a", requests={GPU: 4}, workload="ns/qwen"),
        ObservedGpuPod(node="a", requests={GPU: 2}, phase="Succeeded", workload="ns/done"),
        ObservedGpuPod(node="b", requests={GPU: 8}, workload="ns/llama"),
        ObservedGpuPod(node="c", requests={GPU: 1}),
    ]
    status = _status({"nodes": {"names": ["a", "b"]}, "minReadyNodes": 2}, nodes, pods)
    assert [n.name for n in status.nodes] == ["a", "b"]
    a, b = status.nodes
    assert (a.gpus.allocatable, a.gpus.allocated, a.gpus.free, a.workloads) == (8, 4, 4, ["ns/qwen"])
    assert (b.gpus.allocated, b.gpus.free) == (8, 0)
    assert (status.totals.nodes, status.totals.ready_nodes, status.totals.gpus.free) == (2, 2, 4)
    assert status.gpu_product == "H100"
    ready = find_condition(status.conditions, c.READY)
    assert ready is not None
    assert (ready.status, ready.reason) == ("True", c.REASON_ENOUGH_READY_NODES)
    assert "4 of 16 nvidia.com/gpu free" in ready.message


def test_not_enough_ready_nodes_and_missing_names() -> None:
    status = _status(
        {"nodes": {"names": ["a", "b", "ghost"]}, "minReadyNodes": 2}, [_node("a"), _node("b", ready=False)]
    )
    ready = find_condition(status.conditions, c.READY)
    degraded = find_condition(status.conditions, c.DEGRADED)
    assert ready is not None
    assert degraded is not None
    assert (ready.status, ready.reason) == ("False", c.REASON_NOT_ENOUGH_READY_NODES)
    assert (degraded.status, degraded.reason) == ("True", c.REASON_NODES_MISSING)
    assert "ghost" in degraded.message
    assert "b" in degraded.message
    assert status.nodes[1].schedulable is False


def test_cordoned_node_is_not_schedulable() -> None:
    node = ObservedNode(name="a", ready=True, unschedulable=True, allocatable={GPU: 8})
    status = _status({"nodes": {"names": ["a"]}}, [node])
    assert (status.nodes[0].ready, status.nodes[0].schedulable) == (True, False)


def test_mixed_products() -> None:
    nodes = [_node("a"), ObservedNode(name="b", labels={"nvidia.com/gpu.product": "A100"}, ready=True)]
    assert _status({"nodes": {"names": ["a", "b"]}}, nodes).gpu_product == "mixed"


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ({"matchLabels": {"pool": "x"}}, ["a", "b"]),
        ({"matchExpressions": [{"key": "pool", "operator": "In", "values": ["y"]}]}, ["c"]),
        ({"matchExpressions": [{"key": "pool", "operator": "NotIn", "values": ["x"]}]}, ["c", "d"]),
        ({"matchExpressions": [{"key": "pool", "operator": "Exists"}]}, ["a", "b", "c"]),
        ({"matchExpressions": [{"key": "pool", "operator": "DoesNotExist"}]}, ["d"]),
        (
            {
                "matchLabels": {"pool": "x"},
                "matchExpressions": [{"key": "zone", "operator": "In", "values": ["1"]}],
            },
            ["b"],
        ),
    ],
)
def test_selector_membership(selector: dict[str, Any], expected: list[str]) -> None:
    nodes = [_node("a", pool="x"), _node("b", pool="x", zone="1"), _node("c", pool="y"), _node("d")]
    assert [n.name for n in _status({"nodes": {"selector": selector}}, nodes).nodes] == expected
    assert matches(LabelSelector.model_validate(selector), {"pool": "x", "zone": "1"}) == ("b" in expected)


def test_duplicate_default_is_degraded_and_oldest_wins() -> None:
    older = ClusterRef(name="zz", default=True, created=NOW - dt.timedelta(days=1))
    status = _status({"nodes": {"names": ["a"]}, "default": True}, [_node("a")], clusters=[older])
    degraded = find_condition(status.conditions, c.DEGRADED)
    assert degraded is not None
    assert (degraded.status, degraded.reason) == ("True", c.REASON_DUPLICATE_DEFAULT)
    assert default_cluster([older, ClusterRef(name="aa", default=True, created=NOW)]) == "zz"
    assert default_cluster([ClusterRef(name="b", default=True), ClusterRef(name="a", default=True)]) == "a"
    assert default_cluster([ClusterRef(name="a", default=False)]) is None


# -- spec.gpuResource applied on request (ADR 0046) ----------------------------------------------


def _next(
    spec: dict[str, Any],
    previous: InferenceClusterStatus,
    *,
    now: dt.datetime = NOW,
    pods: list[Any] | None = None,
) -> InferenceClusterStatus:
    return plan_status(
        name="pool",
        spec=InferenceClusterSpec.model_validate({"nodes": {"names": ["a"]}, **spec}),
        generation=3,
        previous=previous,
        nodes=[
            ObservedNode(
                name="a",
                ready=True,
                capacity={GPU: 8, "amd.com/gpu": 2},
                allocatable={GPU: 8, "amd.com/gpu": 2},
            )
        ],
        pods=pods or [],
        clusters=[],
        now=now,
    )


def _up_to_date(status: InferenceClusterStatus) -> tuple[str, str]:
    cond = find_condition(status.conditions, c.UP_TO_DATE)
    assert cond is not None
    return cond.status, cond.reason


def test_first_sight_applies_the_spec() -> None:
    status = _next({"gpuResource": "amd.com/gpu"}, InferenceClusterStatus())
    assert status.applied is not None
    assert status.applied.gpu_resource == "amd.com/gpu"
    assert status.applied.revision == settings_hash({"gpuResource": "amd.com/gpu"})
    assert status.drift is None
    assert _up_to_date(status) == ("True", c.REASON_REVISION_CURRENT)
    assert status.totals.gpus.allocatable == 2  # accounted with the value in use


def test_a_changed_gpu_resource_is_drift_until_approved() -> None:
    first = _next({}, InferenceClusterStatus())
    assert first.applied is not None
    changed = _next({"gpuResource": "amd.com/gpu"}, first)
    # the value in use stays, the change is recorded
    assert changed.applied == first.applied
    assert changed.totals.gpus.allocatable == 8
    drift = changed.drift
    assert drift is not None
    assert drift.revision == settings_hash({"gpuResource": "amd.com/gpu"}) != first.applied.revision
    assert drift.since == NOW
    assert [(i.field, i.applied, i.desired) for i in drift.items] == [("gpuResource", GPU, "amd.com/gpu")]
    assert _up_to_date(changed) == ("False", c.REASON_DRIFT_PENDING)
    cond = find_condition(changed.conditions, c.UP_TO_DATE)
    assert cond is not None
    assert drift.revision in cond.message
    assert "amd.com/gpu" in cond.message
    # later passes keep `since`; another hash applies nothing
    later = _next(
        {"gpuResource": "amd.com/gpu", "approve": "0" * 10}, changed, now=NOW + dt.timedelta(hours=1)
    )
    assert later.drift == drift
    assert later.applied == first.applied
    # approving the drift's hash applies it
    approved = _next({"gpuResource": "amd.com/gpu", "approve": drift.revision}, later)
    assert approved.drift is None
    assert approved.applied is not None
    assert (approved.applied.gpu_resource, approved.applied.revision) == ("amd.com/gpu", drift.revision)
    assert approved.totals.gpus.allocatable == 2
    assert _up_to_date(approved) == ("True", c.REASON_REVISION_CURRENT)


def test_going_back_to_the_applied_value_clears_the_drift() -> None:
    first = _next({}, InferenceClusterStatus())
    changed = _next({"gpuResource": "amd.com/gpu"}, first)
    assert changed.drift is not None
    back = _next({}, changed)
    assert back.drift is None
    assert back.applied == first.applied
    assert _up_to_date(back) == ("True", c.REASON_REVISION_CURRENT)


def test_a_second_change_is_a_new_hash_and_an_old_approval_applies_nothing() -> None:
    first = _next({}, InferenceClusterStatus())
    amd = _next({"gpuResource": "amd.com/gpu"}, first)
    assert amd.drift is not None
    other = _next({"gpuResource": "example.com/gpu", "approve": amd.drift.revision}, amd)
    assert other.drift is not None
    assert other.drift.revision != amd.drift.revision
    assert other.drift.since == amd.drift.since  # drifted since then, without a break
    assert other.applied == first.applied


def test_a_hostile_value_is_bounded_in_the_message() -> None:
    first = _next({}, InferenceClusterStatus())
    value = "x" * 240 + "/\u202egpu"
    changed = _next({"gpuResource": value}, first)
    cond = find_condition(changed.conditions, c.UP_TO_DATE)
    assert cond is not None
    assert "\u202e" not in cond.message
    assert len(cond.message) < 600


def test_an_approve_written_with_the_change_applies_only_after_the_drift_is_shown() -> None:
    first = _next({}, InferenceClusterStatus())
    wanted = settings_hash({"gpuResource": "amd.com/gpu"})
    ahead = _next({"gpuResource": "amd.com/gpu", "approve": wanted}, first)
    # no status showed that hash: the value in use stays, the drift is recorded
    assert ahead.applied == first.applied
    assert ahead.drift is not None
    assert ahead.drift.revision == wanted
    # the next pass saw it shown: the approve is honoured
    then = _next({"gpuResource": "amd.com/gpu", "approve": wanted}, ahead)
    assert then.drift is None
    assert then.applied is not None
    assert then.applied.gpu_resource == "amd.com/gpu"

"""The InferenceCluster planner (``plan/cluster.py``).

Tested: membership by names and by selector (all four operators), GPU accounting (allocated
from bound non-terminated pods, free never negative), per-node workloads, the GPU product
summary, Ready against minReadyNodes, Degraded for missing/not-ready nodes and duplicate
defaults, and the single-default rule.
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

"""The real kube-scheduler places pods on KWOK's fake GPU nodes by ``nvidia.com/gpu``."""

from __future__ import annotations

from typing import Any

import pytest

from sparkrun_testbed.kubeapi import KubeApi
from sparkrun_testbed.plane import Testbed
from sparkrun_testbed.topology import GPU_PRODUCT_LABEL, GPU_RESOURCE, Topology

pytestmark = pytest.mark.testbed


def gpu_pod(name: str, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/none:0",
                    "resources": {"limits": {GPU_RESOURCE: str(gpus)}},
                }
            ]
        },
    }


def test_a_pod_wanting_more_gpus_than_any_node_stays_pending(
    testbed: Testbed, kube: KubeApi, namespace: str
) -> None:
    too_many = Topology.from_dict(testbed.state.topology).max_gpus_per_node() + 1
    kube.create(gpu_pod("greedy", too_many), namespace=namespace)

    def failed_scheduling() -> dict[str, Any] | None:
        events = kube.list_items("v1", "Event", namespace=namespace)
        return next(
            (
                e
                for e in events
                if e["reason"] == "FailedScheduling" and e["involvedObject"]["name"] == "greedy"
            ),
            None,
        )

    event = kube.wait(failed_scheduling, timeout=30, what="a FailedScheduling event")
    assert f"Insufficient {GPU_RESOURCE}" in event["message"]
    pod = kube.get("v1", "Pod", "greedy", namespace=namespace)
    assert pod is not None
    assert pod["status"]["phase"] == "Pending"
    assert "nodeName" not in pod["spec"]


def test_pods_that_fit_are_bound_to_gpu_nodes_and_run(
    testbed: Testbed, kube: KubeApi, namespace: str
) -> None:
    topology = Topology.from_dict(testbed.state.topology)
    for i in range(2):
        kube.create(gpu_pod(f"fits-{i}", 4), namespace=namespace)

    def running(name: str) -> dict[str, Any] | None:
        pod = kube.get("v1", "Pod", name, namespace=namespace)
        return pod if pod and pod["status"].get("phase") == "Running" else None

    for i in range(2):
        pod = kube.wait(lambda i=i: running(f"fits-{i}"), timeout=30, what=f"pod fits-{i} Running")
        node_name = pod["spec"]["nodeName"]
        assert node_name in topology.node_names()
        node = kube.get("v1", "Node", node_name)
        assert node is not None
        assert node["metadata"]["labels"][GPU_PRODUCT_LABEL] == topology.pools[0].gpu_product
        assert int(node["status"]["allocatable"][GPU_RESOURCE]) >= 4
        assert pod["status"]["podIP"], "KWOK gives running pods an address"

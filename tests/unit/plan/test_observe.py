"""Raw objects -> observed state (``plan/observe.py``): what the planners see of JobSets, pods,
nodes, GPU pods, ModelCaches and InferenceClusters, including objects that are not ours."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sparkrun_operator.plan import observe
from sparkrun_operator.plan.workload import ObservedPod

T0 = "2026-09-01T12:00:00Z"
T1 = "2026-09-01T12:00:05Z"
LABELS = {
    "sparkrun.dev/workload": "qwen",
    "sparkrun.dev/replica": "2",
    "sparkrun.dev/revision": "abcdef0123",
    "sparkrun.dev/role": "leader",
    "jobset.sigs.k8s.io/jobset-name": "qwen-2-abcde",
}


def _pod(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "qwen-2-abcde-leader-0-0-xyz", "namespace": "ns", "labels": LABELS},
        "spec": {
            "nodeName": "gpu-0",
            "containers": [{"name": "vllm", "resources": {"limits": {"nvidia.com/gpu": "2"}}}],
        },
        "status": status,
    }


def test_jobset_terminal_and_labels() -> None:
    js = observe.jobset_from(
        {
            "metadata": {"name": "qwen-2-abcde", "uid": "u1", "labels": LABELS, "deletionTimestamp": T1},
            "spec": {"suspend": True},
            "status": {
                "restarts": 3,
                "replicatedJobsStatus": [
                    {"name": "leader", "active": 1, "ready": 0},
                    {"name": "worker", "failed": 1},
                ],
                "conditions": [
                    {"type": "Failed", "status": "True", "lastTransitionTime": T0, "message": "boom"}
                ],
            },
        }
    )
    assert js is not None
    assert (js.replica, js.revision, js.suspended, js.deleting, js.restarts) == (
        2,
        "abcdef0123",
        True,
        True,
        3,
    )
    assert (js.terminal, js.terminal_message, js.jobs) == ("Failed", "boom", 2)
    assert js.terminal_time == dt.datetime(2026, 9, 1, 12, tzinfo=dt.UTC)
    assert observe.jobset_from({"metadata": {"name": "other", "labels": {}}}) is None


def test_pod_states() -> None:
    pending = observe.pod_from(
        _pod(
            phase="Pending",
            conditions=[
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "Insufficient x",
                }
            ],
        )
    )
    assert pending is not None
    assert pending.unschedulable == "Insufficient x"
    assert not pending.ready
    ready = observe.pod_from(
        _pod(
            phase="Running",
            podIP="10.0.0.9",
            conditions=[
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": T0},
                {"type": "Ready", "status": "True", "lastTransitionTime": T1},
            ],
            containerStatuses=[{"name": "vllm", "state": {"running": {"startedAt": T0}}}],
        )
    )
    assert ready is not None
    assert (ready.ready, ready.ip, ready.node, ready.role, ready.jobset) == (
        True,
        "10.0.0.9",
        "gpu-0",
        "leader",
        "qwen-2-abcde",
    )
    assert ready.ready_time == dt.datetime(2026, 9, 1, 12, 0, 5, tzinfo=dt.UTC)
    assert observe.pod_from({"metadata": {"name": "x", "labels": {}}}) is None


def test_pod_failure_is_the_latest_non_zero_exit() -> None:
    pod = observe.pod_from(
        _pod(
            phase="Failed",
            containerStatuses=[
                {
                    "name": "vllm",
                    "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled", "finishedAt": T1}},
                    "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": T0}},
                }
            ],
        )
    )
    assert pod is not None
    assert pod.failure is not None
    assert (pod.failure.reason, pod.failure.exit_code) == ("OOMKilled", 137)
    assert pod.failure.object == "Pod/qwen-2-abcde-leader-0-0-xyz"


def test_readiness_ignores_deleting_leaders() -> None:
    js = observe.jobset_from({"metadata": {"name": "qwen-2-abcde", "uid": "u", "labels": LABELS}})
    assert js is not None
    going = ObservedPod(name="a", jobset=js.name, role="leader", ready=True, deleting=True)
    assert not observe.with_readiness(js, [going]).leader_ready
    fresh = ObservedPod(name="b", jobset=js.name, role="leader", ready=True)
    assert observe.with_readiness(js, [going, fresh]).leader_ready


def test_nodes_and_gpu_pods() -> None:
    node = observe.node_from(
        {
            "metadata": {"name": "gpu-0", "labels": {"nvidia.com/gpu.product": "H100"}},
            "spec": {"unschedulable": True},
            "status": {
                "capacity": {"nvidia.com/gpu": "8", "cpu": "64"},
                "allocatable": {"nvidia.com/gpu": "8"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
    )
    assert node is not None
    assert (node.ready, node.unschedulable, node.capacity, node.allocatable) == (
        True,
        True,
        {"nvidia.com/gpu": 8},
        {"nvidia.com/gpu": 8},
    )
    gpu = observe.gpu_pod_from(_pod(phase="Running"))
    assert gpu is not None
    assert (gpu.node, gpu.requests, gpu.workload) == ("gpu-0", {"nvidia.com/gpu": 2}, "ns/qwen")
    init_heavy = _pod(phase="Running")
    init_heavy["spec"]["initContainers"] = [{"name": "i", "resources": {"requests": {"nvidia.com/gpu": "4"}}}]
    parsed = observe.gpu_pod_from(init_heavy)
    assert parsed is not None
    assert parsed.requests == {"nvidia.com/gpu": 4}
    unbound = _pod()
    del unbound["spec"]["nodeName"]
    assert observe.gpu_pod_from(unbound) is None


def test_cache_and_cluster() -> None:
    assert not observe.cache_from(None, name="c").exists
    cache = observe.cache_from(
        {
            "spec": {"storage": {"create": {"size": "1Gi"}, "path": "/hub"}},
            "status": {"phase": "Ready", "resolvedRevision": "a" * 40},
        },
        name="c",
    )
    assert (cache.ready, cache.claim_name, cache.path, cache.resolved_revision) == (
        True,
        "c",
        "/hub",
        "a" * 40,
    )
    parsed = observe.cluster_from(
        {
            "metadata": {"name": "pool", "creationTimestamp": T0},
            "spec": {"nodes": {"names": ["a"]}, "default": True, "queueName": "q"},
        }
    )
    assert parsed is not None
    cluster, ref = parsed
    assert (cluster.node_names, cluster.queue_name, ref.default) == (("a",), "q", True)
    assert observe.cluster_from({"metadata": {"name": "bad"}, "spec": {"nodes": "everything"}}) is None

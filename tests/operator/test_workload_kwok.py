"""The workload controller against the testbed with KWOK pods (scheduled by the real scheduler,
Running and Ready without processes): create -> Ready, scale, rollouts, Stopped/Running,
unschedulable and invalid specs, deletion, and an operator killed mid-rollout.

Each test runs the real ``sparkrun-k8s operator run`` process serving the test's namespace.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sparkrun_testbed.kubeapi import KubeApi
from tests.operator.conftest import (
    API,
    OperatorProcess,
    condition,
    get_workload,
    jobsets,
    wait_condition,
    workload,
)

Factory = Callable[..., OperatorProcess]


def test_apply_to_ready(kube: KubeApi, namespace: str, operator_factory: Factory) -> None:
    operator_factory(namespace)
    kube.apply(workload("qwen", namespace))
    obj = wait_condition(kube, namespace, "qwen", "Ready", timeout=90)
    status = obj["status"]
    assert status["phase"] == "Running"
    assert (status["replicas"], status["readyReplicas"]) == (1, 1)
    assert status["selector"] == "sparkrun.dev/role=leader,sparkrun.dev/workload=qwen"
    assert status["workloadId"].startswith("sparkrun_")
    assert [e["stage"] for e in status["startup"]] == ["accepted", "scheduled", "running", "ready"]
    assert status["endpoints"][0]["ready"] is True
    items = jobsets(kube, namespace, "qwen")
    assert [js["metadata"]["name"] for js in items] == [f"qwen-0-{status['revision'][:5]}"]
    owner = items[0]["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"]) == ("InferenceWorkload", obj["metadata"]["uid"])
    service = kube.get("v1", "Service", "qwen", namespace=namespace)
    assert service is not None
    assert service["spec"]["selector"] == {"sparkrun.dev/workload": "qwen", "sparkrun.dev/role": "leader"}
    assert condition(obj, "Scheduled")["status"] == "True"  # type: ignore[index]


def _names(kube: KubeApi, namespace: str, name: str) -> list[str]:
    return [js["metadata"]["name"] for js in jobsets(kube, namespace, name)]


def _set_spec(kube: KubeApi, namespace: str, name: str, **spec: Any) -> None:
    kube.request(
        "PATCH",
        kube.resource_path(API, "InferenceWorkload", namespace=namespace, name=name),
        json={"spec": spec},
        headers={"Content-Type": "application/merge-patch+json"},
    )


def test_scale_up_and_down(kube: KubeApi, namespace: str, operator_factory: Factory) -> None:
    operator_factory(namespace)
    kube.apply(workload("qwen", namespace))
    obj = wait_condition(kube, namespace, "qwen", "Ready", timeout=90)
    rev = obj["status"]["revision"][:5]
    # through the scale subresource, as `kubectl scale` and an HPA do
    scale = kube.resource_path(API, "InferenceWorkload", namespace=namespace, name="qwen") + "/scale"
    kube.request(
        "PATCH",
        scale,
        json={"spec": {"replicas": 3}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    wait_condition(
        kube, namespace, "qwen", "Ready", timeout=90, extra=lambda o: o["status"]["readyReplicas"] == 3
    )
    assert _names(kube, namespace, "qwen") == [f"qwen-{i}-{rev}" for i in range(3)]
    current = kube.request("GET", scale).json()
    assert current["status"]["replicas"] == 3
    assert current["status"]["selector"] == "sparkrun.dev/role=leader,sparkrun.dev/workload=qwen"
    _set_spec(kube, namespace, "qwen", replicas=1)
    kube.wait(
        lambda: _names(kube, namespace, "qwen") == [f"qwen-0-{rev}"], timeout=60, what="scale down to 1"
    )
    obj = wait_condition(kube, namespace, "qwen", "Ready", extra=lambda o: o["status"]["replicas"] == 1)
    assert obj["status"]["readyReplicas"] == 1


def _revisions(kube: KubeApi, namespace: str, name: str) -> list[tuple[str, str]]:
    return [
        (js["metadata"]["labels"]["sparkrun.dev/replica"], js["metadata"]["labels"]["sparkrun.dev/revision"])
        for js in jobsets(kube, namespace, name)
    ]


def _roll(kube: KubeApi, namespace: str, *, replicas: int, rollout: dict[str, int]) -> None:
    """Create ``replicas`` Ready replicas, change the revision, watch the JobSet count until done."""
    kube.apply(workload("qwen", namespace, replicas=replicas, rollout=rollout))
    old = wait_condition(
        kube,
        namespace,
        "qwen",
        "Ready",
        timeout=120,
        extra=lambda o: o["status"]["readyReplicas"] == replicas,
    )["status"]["revision"]
    _set_spec(kube, namespace, "qwen", engine={"args": ["--enforce-eager"]})
    limit = replicas + rollout.get("maxSurge", 1)
    most = 0
    saw_mixed = False

    def done() -> bool:
        nonlocal most, saw_mixed
        items = _revisions(kube, namespace, "qwen")
        most = max(most, len(items))
        revs = {rev for _, rev in items}
        saw_mixed = saw_mixed or len(revs) > 1
        return len(items) == replicas and old not in revs

    kube.wait(done, timeout=180, what="rollout to finish", interval=0.1)
    obj = wait_condition(
        kube,
        namespace,
        "qwen",
        "Ready",
        timeout=60,
        extra=lambda o: o["status"]["readyReplicas"] == replicas and o["status"]["phase"] == "Running",
    )
    new = obj["status"]["revision"]
    assert new != old
    assert sorted(_revisions(kube, namespace, "qwen")) == [(str(i), new) for i in range(replicas)]
    assert most <= limit, f"{most} JobSets existed at once; replicas + maxSurge = {limit}"
    assert saw_mixed or rollout.get("maxSurge", 1) == 0


def test_rollout_with_surge(kube: KubeApi, namespace: str, operator_factory: Factory) -> None:
    operator_factory(namespace)
    _roll(kube, namespace, replicas=2, rollout={"maxSurge": 1})


def test_rollout_without_surge_deletes_first(
    kube: KubeApi, namespace: str, operator_factory: Factory
) -> None:
    operator_factory(namespace)
    _roll(kube, namespace, replicas=2, rollout={"maxSurge": 0})


def test_stopped_then_running(kube: KubeApi, namespace: str, operator_factory: Factory) -> None:
    operator_factory(namespace)
    kube.apply(workload("qwen", namespace))
    wait_condition(kube, namespace, "qwen", "Ready", timeout=90)
    _set_spec(kube, namespace, "qwen", state="Stopped")
    obj = wait_condition(kube, namespace, "qwen", "Ready", "False", reason="Stopped", timeout=60)
    assert obj["status"]["phase"] == "Stopped"
    assert [js["spec"]["suspend"] for js in jobsets(kube, namespace, "qwen")] == [True]
    kube.wait(
        lambda: (
            not kube.list_items("v1", "Pod", namespace=namespace, label_selector="sparkrun.dev/workload=qwen")
        ),
        timeout=60,
        what="pods of the stopped workload to be gone",
    )
    _set_spec(kube, namespace, "qwen", state="Running")
    obj = wait_condition(kube, namespace, "qwen", "Ready", timeout=90)
    assert [js["spec"]["suspend"] for js in jobsets(kube, namespace, "qwen")] == [False]
    assert obj["status"]["phase"] == "Running"


def test_unschedulable_and_invalid_specs_are_reported(
    kube: KubeApi, namespace: str, operator_factory: Factory
) -> None:
    operator_factory(namespace)
    # no node has 16 GPUs
    kube.apply(workload("huge", namespace, topology={"nodes": 1, "gpusPerNode": 16, "tensorParallel": 16}))
    obj = wait_condition(kube, namespace, "huge", "Scheduled", "False", reason="NoFittingNodes", timeout=60)
    message = condition(obj, "Scheduled")["message"]  # type: ignore[index]
    assert "1 x 16 nvidia.com/gpu" in message
    assert "largest: 8" in message
    ready = condition(obj, "Ready")
    assert ready is not None
    assert ready["status"] == "False"
    # three 8-GPU replicas cannot all fit on the testbed's two 8-GPU nodes
    kube.apply(
        workload("wide", namespace, replicas=3, topology={"nodes": 1, "gpusPerNode": 8, "tensorParallel": 8})
    )
    obj = wait_condition(kube, namespace, "wide", "Scheduled", "False", reason="InsufficientGPU", timeout=90)
    message = condition(obj, "Scheduled")["message"]  # type: ignore[index]
    assert "1 x 8 nvidia.com/gpu" in message
    assert "Insufficient nvidia.com/gpu" in message
    # an argument the operator owns
    kube.apply(workload("bad", namespace, engine={"args": ["--port", "9000"]}))
    obj = wait_condition(kube, namespace, "bad", "Ready", "False", reason="InvalidSpec", timeout=60)
    assert "spec.engine.args may not set --port" in condition(obj, "Ready")["message"]  # type: ignore[index]
    assert obj["status"]["phase"] == "Failed"
    assert jobsets(kube, namespace, "bad") == []


def test_delete_leaves_nothing(kube: KubeApi, namespace: str, operator_factory: Factory) -> None:
    operator_factory(namespace)
    kube.apply(workload("qwen", namespace, replicas=2))
    wait_condition(
        kube, namespace, "qwen", "Ready", timeout=90, extra=lambda o: o["status"]["readyReplicas"] == 2
    )
    kube.delete(API, "InferenceWorkload", "qwen", namespace=namespace)
    selector = "sparkrun.dev/workload=qwen"

    def gone() -> bool:
        return (
            get_workload(kube, namespace, "qwen") is None
            and not jobsets(kube, namespace, "qwen")
            and not kube.list_items("v1", "Pod", namespace=namespace, label_selector=selector)
            and kube.get("v1", "Service", "qwen", namespace=namespace) is None
            and not kube.list_items("batch/v1", "Job", namespace=namespace)
        )

    kube.wait(gone, timeout=90, what="the workload and all its children to be gone")


def test_operator_killed_mid_rollout_converges(
    kube: KubeApi, namespace: str, operator_factory: Factory
) -> None:
    first = operator_factory(namespace)
    kube.apply(workload("qwen", namespace, replicas=3, rollout={"maxSurge": 1}))
    old = wait_condition(
        kube, namespace, "qwen", "Ready", timeout=120, extra=lambda o: o["status"]["readyReplicas"] == 3
    )["status"]["revision"]
    _set_spec(kube, namespace, "qwen", engine={"args": ["--enforce-eager"]})
    kube.wait(
        lambda: len({rev for _, rev in _revisions(kube, namespace, "qwen")}) > 1,
        timeout=60,
        what="the rollout to start",
        interval=0.05,
    )
    first.kill()
    mid = _revisions(kube, namespace, "qwen")
    assert len(mid) <= 4
    operator_factory(namespace)
    obj = wait_condition(
        kube,
        namespace,
        "qwen",
        "Ready",
        timeout=180,
        extra=lambda o: (
            o["status"]["revision"] != old
            and sorted(_revisions(kube, namespace, "qwen"))
            == [(str(i), o["status"]["revision"]) for i in range(3)]
        ),
    )
    new = obj["status"]["revision"]
    items = jobsets(kube, namespace, "qwen")
    assert len(items) == 3, [js["metadata"]["name"] for js in items]
    assert {js["metadata"]["labels"]["sparkrun.dev/revision"] for js in items} == {new}
    # every Job and pod belongs to a current JobSet: nothing orphaned
    current = {js["metadata"]["name"] for js in items}
    jobs = kube.list_items("batch/v1", "Job", namespace=namespace)
    kube.wait(
        lambda: (
            {
                j["metadata"]["labels"].get("jobset.sigs.k8s.io/jobset-name")
                for j in kube.list_items("batch/v1", "Job", namespace=namespace)
            }
            <= current
        ),
        timeout=60,
        what="old Jobs to be gone",
    )
    assert jobs is not None

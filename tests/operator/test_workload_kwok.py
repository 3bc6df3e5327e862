"""The workload controller against the testbed with KWOK pods (scheduled by the real scheduler,
Running and Ready without processes): create -> Ready, scale, rollouts, Stopped/Running,
unschedulable and invalid specs, deletion, and an operator killed mid-rollout.

Each test runs the real ``sparkrun-k8s operator run`` process serving the test's namespace.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sparkrun_operator.testbed.kubeapi import KubeApi
from tests.operator.conftest import (
    API,
    OperatorProcess,
    condition,
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
    _set_spec(kube, namespace, "qwen", replicas=3)
    wait_condition(
        kube, namespace, "qwen", "Ready", timeout=90, extra=lambda o: o["status"]["readyReplicas"] == 3
    )
    assert _names(kube, namespace, "qwen") == [f"qwen-{i}-{rev}" for i in range(3)]
    _set_spec(kube, namespace, "qwen", replicas=1)
    kube.wait(
        lambda: _names(kube, namespace, "qwen") == [f"qwen-0-{rev}"], timeout=60, what="scale down to 1"
    )
    obj = wait_condition(kube, namespace, "qwen", "Ready", extra=lambda o: o["status"]["replicas"] == 1)
    assert obj["status"]["readyReplicas"] == 1

"""An InferenceCluster's ``spec.gpuResource`` applied on request (ADR 0046), against the testbed's
real kube-apiserver and the real operator process: a change is accepted by the apiserver (the
immutability rule is gone), recorded as ``status.drift`` with ``UpToDate=False DriftPending``,
and the workload on the cluster keeps its JobSets; ``spec.approve`` with the drift's hash
applies it (``status.applied``, drift cleared) and the workload is placed with the new value.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sparkrun_testbed.kubeapi import KubeApi
from tests.operator.conftest import API, OperatorProcess, condition, jobsets, wait_condition, workload

Factory = Callable[..., OperatorProcess]
NEW_RESOURCE = "example.com/gpu"


@pytest.fixture
def cluster_name(kube: KubeApi, namespace: str) -> Iterator[str]:
    name = f"drift-{namespace}"[:63].rstrip("-")
    yield name
    kube.delete(API, "InferenceCluster", name)


def _cluster(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "InferenceCluster",
        "metadata": {"name": name},
        "spec": {"nodes": {"names": ["gpu-0", "gpu-1"]}, **spec},
    }


def _limits(js: dict[str, Any]) -> dict[str, Any]:
    pod = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    engine = pod["containers"][0]
    limits: dict[str, Any] = engine["resources"]["limits"]
    return limits


def _wait_cluster(
    kube: KubeApi, name: str, probe: Callable[[dict[str, Any]], bool], what: str
) -> dict[str, Any]:
    def current() -> dict[str, Any] | None:
        obj = kube.get(API, "InferenceCluster", name)
        if obj is None:
            return None
        status = obj.get("status") or {}
        if status.get("observedGeneration") != obj["metadata"].get("generation"):
            return None
        return obj if probe(obj) else None

    return kube.wait(current, timeout=60, what=what)


def test_gpu_resource_change_is_drift_until_approved(
    kube: KubeApi, namespace: str, cluster_name: str, operator_factory: Factory
) -> None:
    operator_factory(namespace)
    kube.apply(_cluster(cluster_name))
    obj = _wait_cluster(
        kube, cluster_name, lambda o: bool((o.get("status") or {}).get("applied")), "status.applied set"
    )
    applied = obj["status"]["applied"]
    assert applied["gpuResource"] == "nvidia.com/gpu"
    up = condition(obj, "UpToDate")
    assert up is not None
    assert (up["status"], up["reason"]) == ("True", "RevisionCurrent")

    manifest = workload(
        "placed",
        namespace,
        cluster=cluster_name,
        topology={"nodes": 1, "gpusPerNode": 2, "tensorParallel": 2},
    )
    kube.apply(manifest)
    wait_condition(kube, namespace, "placed", "Ready", timeout=90)
    before = jobsets(kube, namespace, "placed")
    assert before
    assert _limits(before[0]).get("nvidia.com/gpu") in (2, "2")

    # the change is accepted by the apiserver and recorded, not applied
    kube.apply(_cluster(cluster_name, gpuResource=NEW_RESOURCE))
    obj = _wait_cluster(
        kube, cluster_name, lambda o: bool((o.get("status") or {}).get("drift")), "status.drift recorded"
    )
    drift = obj["status"]["drift"]
    assert drift["items"] == [{"field": "gpuResource", "applied": "nvidia.com/gpu", "desired": NEW_RESOURCE}]
    assert obj["status"]["applied"] == applied
    up = condition(obj, "UpToDate")
    assert up is not None
    assert (up["status"], up["reason"]) == ("False", "DriftPending")
    assert drift["revision"] in up["message"]

    # the workload, reconciled after the drift was recorded (a spec change that moves no pod),
    # keeps its JobSets as they were
    kube.apply({**manifest, "spec": {**manifest["spec"], "failures": {"resetAfterReadySeconds": 601}}})
    wait_condition(kube, namespace, "placed", "Ready", timeout=60)
    after = jobsets(kube, namespace, "placed")
    assert [(js["metadata"]["uid"], _limits(js)) for js in after] == [
        (js["metadata"]["uid"], _limits(js)) for js in before
    ]

    # an approval of another hash applies nothing; the drift's own hash applies it
    kube.apply(_cluster(cluster_name, gpuResource=NEW_RESOURCE, approve="0000000000"))
    obj = _wait_cluster(kube, cluster_name, lambda o: True, "the cluster observed")
    assert obj["status"]["drift"]["revision"] == drift["revision"]
    assert obj["status"]["applied"] == applied
    kube.apply(_cluster(cluster_name, gpuResource=NEW_RESOURCE, approve=drift["revision"]))
    obj = _wait_cluster(
        kube, cluster_name, lambda o: not (o.get("status") or {}).get("drift"), "the drift applied"
    )
    assert obj["status"]["applied"] == {"gpuResource": NEW_RESOURCE, "revision": drift["revision"]}
    up = condition(obj, "UpToDate")
    assert up is not None
    assert (up["status"], up["reason"]) == ("True", "RevisionCurrent")

    # the workload is now placed with the applied value: its pods ask for the new resource
    def moved() -> list[dict[str, Any]] | None:
        found = [js for js in jobsets(kube, namespace, "placed") if NEW_RESOURCE in _limits(js)]
        return found or None

    moved_sets = kube.wait(moved, timeout=60, what=f"a JobSet asking for {NEW_RESOURCE}")
    assert "nvidia.com/gpu" not in _limits(moved_sets[0])

"""Kueue v0.17.0 runs on the testbed: quota, queueing and its visibility API, for real.

A ClusterQueue with 4 GPUs of quota (one ResourceFlavor) and a LocalQueue; JobSets that carry
``kueue.x-k8s.io/queue-name`` and ask for 3 GPUs each. Kueue's webhook suspends each on create;
the first is admitted (unsuspended, its pods run on KWOK's nodes); the next two stay pending (the
second with a higher WorkloadPriorityClass), and their positions come from the visibility API
(``visibility.kueue.x-k8s.io``, aggregated) through kube-apiserver; once the first is deleted,
the second is admitted and the third moves up.
"""

from __future__ import annotations

import functools
import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from sparkrun_testbed import kueue as kueue_tool
from sparkrun_testbed.kubeapi import KubeApi
from sparkrun_testbed.kueue_run import Kueue
from sparkrun_testbed.topology import GPU_RESOURCE
from tests.testbed.test_jobset import JOBSET, jobset

pytestmark = pytest.mark.testbed

KUEUE = "kueue.x-k8s.io/v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
GPU_QUOTA = 4  # each JobSet below asks for 3 (a leader and two workers, one GPU each)


@pytest.fixture
def queues(kueue: Kueue, kube: KubeApi, namespace: str) -> Iterator[tuple[str, str]]:
    """A ResourceFlavor, a ClusterQueue with GPU_QUOTA GPUs and a LocalQueue ``lq`` in ``namespace``."""
    tag = secrets.token_hex(3)
    flavor, cluster_queue = f"gpu-{tag}", f"cq-{tag}"
    kube.create({"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": flavor}, "spec": {}})
    kube.create(
        {
            "apiVersion": KUEUE,
            "kind": "ClusterQueue",
            "metadata": {"name": cluster_queue},
            "spec": {
                "namespaceSelector": {},
                "queueingStrategy": "StrictFIFO",
                "resourceGroups": [
                    {
                        "coveredResources": [GPU_RESOURCE],
                        "flavors": [
                            {"name": flavor, "resources": [{"name": GPU_RESOURCE, "nominalQuota": GPU_QUOTA}]}
                        ],
                    }
                ],
            },
        }
    )
    kube.create(
        {
            "apiVersion": KUEUE,
            "kind": "LocalQueue",
            "metadata": {"name": "lq"},
            "spec": {"clusterQueue": cluster_queue},
        },
        namespace=namespace,
    )
    kube.wait(lambda: _condition(kube.get(KUEUE, "ClusterQueue", cluster_queue), "Active"), timeout=60,
              what=f"ClusterQueue {cluster_queue} Active")  # fmt: skip
    yield cluster_queue, "lq"
    for name in _jobsets(kube, namespace):
        kube.delete(JOBSET, "JobSet", name, namespace=namespace)
    kube.delete(KUEUE, "LocalQueue", "lq", namespace=namespace)
    kube.delete(KUEUE, "ClusterQueue", cluster_queue)
    kube.delete(KUEUE, "ResourceFlavor", flavor)


def test_a_workload_over_quota_waits_with_its_position_then_is_admitted(
    kueue: Kueue, kube: KubeApi, namespace: str, queues: tuple[str, str]
) -> None:
    _, local_queue = queues
    # Created within a second of each other, the two waiting ones would tie on creation time;
    # a WorkloadPriorityClass orders them (its value becomes the Workload's priority).
    high = f"high-{secrets.token_hex(3)}"
    kube.create(
        {"apiVersion": KUEUE, "kind": "WorkloadPriorityClass", "metadata": {"name": high}, "value": 100}
    )
    for name in ("first", "second", "third"):
        body = jobset(name)
        body["metadata"]["labels"] = {QUEUE_LABEL: local_queue}
        if name == "second":
            body["metadata"]["labels"][PRIORITY_LABEL] = high
        created = kube.create(body, namespace=namespace)
        # Kueue's webhook suspends a queued JobSet on create; admission unsuspends it.
        assert created["spec"]["suspend"] is True
        if name == "first":
            kube.wait(lambda: _admitted(kube, namespace, "first"), timeout=60, what="first admitted")

    running = kube.wait(lambda: _running_pods(kube, namespace, "first"), timeout=60, what="first's pods")
    assert len(running) == 3
    for name in ("second", "third"):
        workload = kube.wait(
            functools.partial(_workload, kube, namespace, name), timeout=30, what=f"{name}'s Workload"
        )
        assert not _condition(workload, "QuotaReserved")
        stored = kube.get(JOBSET, "JobSet", name, namespace=namespace)
        assert stored is not None
        assert stored["spec"]["suspend"] is True

    pending = kube.wait(lambda: _positions(kueue, kube, namespace, local_queue, 2), timeout=30,
                        what="two pending workloads in the visibility API")  # fmt: skip
    assert pending == {
        _workload_name(kube, namespace, "second"): (0, 0),
        _workload_name(kube, namespace, "third"): (1, 1),
    }
    # The older version of the API answers too (clients of earlier Kueue releases).
    assert len(kube.get_json(kueue.api_path(namespace, local_queue, "v1beta1"))["items"]) == 2

    kube.delete(JOBSET, "JobSet", "first", namespace=namespace)
    kube.wait(lambda: _admitted(kube, namespace, "second"), timeout=90, what="second admitted")
    pending = kube.wait(lambda: _positions(kueue, kube, namespace, local_queue, 1), timeout=30,
                        what="one pending workload")  # fmt: skip
    assert pending == {_workload_name(kube, namespace, "third"): (0, 0)}
    kube.delete(KUEUE, "WorkloadPriorityClass", high)


def test_kueue_is_registered_as_upstream_has_it(kueue: Kueue, kube: KubeApi) -> None:
    discovery = kube.get_json(f"/apis/{kueue_tool.VISIBILITY_GROUP}")
    assert {v["version"] for v in discovery["versions"]} == set(kueue_tool.VISIBILITY_VERSIONS)
    # Conversion by webhook, as upstream: a v1beta1 read of a v1beta2 object works.
    name = f"conv-{secrets.token_hex(3)}"
    kube.create({"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": {}})
    try:
        old = kube.get_json(f"/apis/kueue.x-k8s.io/v1beta1/resourceflavors/{name}")
        assert old["apiVersion"] == "kueue.x-k8s.io/v1beta1"
    finally:
        kube.delete(KUEUE, "ResourceFlavor", name)
    assert any(d.name == "kueue" and d.running() for d in kueue.testbed.state.daemons)
    (status,) = [s for s in kueue.testbed.status() if s.name == "kueue"]
    assert status.healthy is True


# -- helpers ----------------------------------------------------------------------------------------


def _condition(obj: dict[str, Any] | None, kind: str) -> bool:
    conditions = (obj or {}).get("status", {}).get("conditions") or []
    return any(c["type"] == kind and c["status"] == "True" for c in conditions)


def _jobsets(kube: KubeApi, namespace: str) -> list[str]:
    return [j["metadata"]["name"] for j in kube.list_items(JOBSET, "JobSet", namespace=namespace)]


def _workload(kube: KubeApi, namespace: str, jobset_name: str) -> dict[str, Any] | None:
    for workload in kube.list_items(KUEUE, "Workload", namespace=namespace):
        owners = workload["metadata"].get("ownerReferences") or []
        if any(o["kind"] == "JobSet" and o["name"] == jobset_name for o in owners):
            return workload
    return None


def _workload_name(kube: KubeApi, namespace: str, jobset_name: str) -> str:
    workload = _workload(kube, namespace, jobset_name)
    assert workload is not None, f"no Workload for JobSet {jobset_name}"
    return str(workload["metadata"]["name"])


def _admitted(kube: KubeApi, namespace: str, name: str) -> bool:
    stored = kube.get(JOBSET, "JobSet", name, namespace=namespace)
    return _condition(_workload(kube, namespace, name), "Admitted") and not (stored or {})["spec"].get(
        "suspend"
    )


def _running_pods(kube: KubeApi, namespace: str, name: str) -> list[dict[str, Any]] | None:
    pods = kube.list_items(
        "v1", "Pod", namespace=namespace, label_selector=f"jobset.sigs.k8s.io/jobset-name={name}"
    )
    running = [p for p in pods if p.get("status", {}).get("phase") == "Running"]
    return running if len(running) == 3 else None


def _positions(
    kueue: Kueue, kube: KubeApi, namespace: str, local_queue: str, count: int
) -> dict[str, tuple[int, int]] | None:
    items = kube.get_json(kueue.api_path(namespace, local_queue))["items"]
    if len(items) != count:
        return None
    return {i["metadata"]["name"]: (i["positionInClusterQueue"], i["positionInLocalQueue"]) for i in items}

"""The operator with Kueue for real (issue 32): a workload admitted through a LocalQueue and a
ClusterQueue with GPU quota, a second one queued with its position in ``status.queue`` (read
from Kueue's visibility API), admitted when the first stops; an InferenceCluster's queueName
observable as ``status.queue`` and ``QueueReady``.

Kueue v0.17.0 on the session testbed (``tests/kueue/conftest.py``), a ClusterQueue of 4 GPUs
(``queues`` of ``test_kueue_testbed.py``); each workload asks 4 GPUs (one pod, tensor parallel 4),
so the second waits.
"""

from __future__ import annotations

from typing import Any

import pytest

from sparkrun_testbed.kubeapi import KubeApi
from sparkrun_testbed.kueue_run import Kueue
from tests.kueue.test_kueue_testbed import queues  # noqa: F401  (the fixture)
from tests.operator.conftest import API, condition, get_workload, operator_factory, workload  # noqa: F401

pytestmark = pytest.mark.testbed

TOPOLOGY = {"nodes": 1, "gpusPerNode": 4, "tensorParallel": 4}


def _admitted(kube: KubeApi, namespace: str, name: str) -> dict[str, Any]:
    return condition(get_workload(kube, namespace, name), "Admitted") or {}


def _queue(kube: KubeApi, namespace: str, name: str) -> dict[str, Any]:
    return ((get_workload(kube, namespace, name) or {}).get("status") or {}).get("queue") or {}


def test_second_workload_waits_with_its_position_then_is_admitted(
    kueue: Kueue,
    kube: KubeApi,
    namespace: str,
    queues: tuple[str, str],  # noqa: F811
    operator_factory: Any,  # noqa: F811
) -> None:
    cluster_queue, local_queue = queues
    operator_factory(namespace)
    for name in ("first", "second"):
        kube.create(
            workload(name, namespace, topology=TOPOLOGY, scheduling={"queueName": local_queue}),
            namespace=namespace,
        )
        if name == "first":
            kube.wait(
                lambda: _admitted(kube, namespace, "first").get("status") == "True",
                timeout=90,
                what="first admitted",
            )
    # the LocalQueue's read names its ClusterQueue (a moment after the admission)
    first = kube.wait(
        lambda: _queue(kube, namespace, "first").get("clusterQueue") and _queue(kube, namespace, "first"),
        timeout=30,
        what="first's ClusterQueue in its status",
    )
    assert first["admitted"] is True
    assert first["clusterQueue"] == cluster_queue

    waiting = kube.wait(
        lambda: (
            _queue(kube, namespace, "second").get("positionInLocalQueue") == 0
            and get_workload(kube, namespace, "second")
        ),
        timeout=60,
        what="second's position in its status",
    )
    status = waiting["status"]
    assert status["phase"] == "Pending"
    assert status["queue"]["name"] == local_queue
    assert status["queue"]["positionInClusterQueue"] == 0
    admitted = condition(waiting, "Admitted")
    assert admitted is not None
    assert (admitted["status"], admitted["reason"]) == ("False", "QueuedByKueue")
    assert "next in line" in admitted["message"]
    ready = condition(waiting, "Ready")
    assert ready is not None
    assert ready["reason"] == "QueuedByKueue"

    kube.request(
        "PATCH",
        kube.resource_path(API, "InferenceWorkload", namespace=namespace, name="first"),
        json={"spec": {"state": "Stopped"}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    kube.wait(
        lambda: _admitted(kube, namespace, "second").get("status") == "True",
        timeout=120,
        what="second admitted once the first stopped",
    )
    assert _queue(kube, namespace, "second")["admitted"] is True


def test_a_missing_local_queue_is_named(
    kueue: Kueue,
    kube: KubeApi,
    namespace: str,
    operator_factory: Any,  # noqa: F811
) -> None:
    operator_factory(namespace)
    kube.create(
        workload("lost", namespace, topology=TOPOLOGY, scheduling={"queueName": "no-such-queue"}),
        namespace=namespace,
    )
    found = kube.wait(
        lambda: (
            _admitted(kube, namespace, "lost").get("reason") == "QueueNotFound"
            and get_workload(kube, namespace, "lost")
        ),
        timeout=60,
        what="QueueNotFound on the workload",
    )
    admitted = condition(found, "Admitted")
    assert admitted is not None
    assert "no-such-queue" in admitted["message"]
    assert found["status"]["phase"] == "Pending"

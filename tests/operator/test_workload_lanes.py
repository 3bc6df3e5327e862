"""When a workload's passes run, against the testbed with KWOK pods and the real operator process.

- The status lane: a pod change that only changes the workload's status is written by a
  status-only pass even while no full pass can run at all (``--max-concurrent-passes 0``: every
  full pass waits for a slot that never comes, the extreme of full passes queued at scale).
- ``workloads.reconcile``: its ``reconcile-requested`` annotation runs a pass at once, which
  repairs a deleted Service (nothing else would before the drift timer, 60 s in these tests).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

import httpx

from sparkrun_operator.render import keys
from sparkrun_testbed.kubeapi import KubeApi
from tests.operator.conftest import API, OperatorProcess, get_workload, wait_condition, workload

Factory = Callable[..., OperatorProcess]
MERGE = {"Content-Type": "application/merge-patch+json"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _metric(port: int, name: str, **labels: str) -> float:
    """The value of one sample on the operator's /metrics (0 when absent)."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith(f"{name}{{") and all(part in line for part in want.split(",")):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _leader_pod(kube: KubeApi, namespace: str, name: str) -> dict[str, Any]:
    pods = kube.list_items(
        "v1",
        "Pod",
        namespace=namespace,
        label_selector=f"{keys.LABEL_WORKLOAD}={name},{keys.LABEL_ROLE}={keys.ROLE_LEADER}",
    )
    assert len(pods) == 1, pods
    return pods[0]


def _stale_status(kube: KubeApi, namespace: str, name: str) -> None:
    """Write a status that says nothing is Ready (as if readiness had not been seen yet)."""
    path = kube.resource_path(API, "InferenceWorkload", namespace=namespace, name=name) + "/status"
    kube.request("PATCH", path, json={"status": {"readyReplicas": 0, "phase": "Pending"}}, headers=MERGE)


def _touch_pod(kube: KubeApi, namespace: str, pod: str, value: str) -> None:
    """A pod change (a label) that changes nothing the planner acts on: a status-only event."""
    path = kube.resource_path("v1", "Pod", namespace=namespace, name=pod)
    labels = {"test.sparkrun.dev/touch": value}
    kube.request("PATCH", path, json={"metadata": {"labels": labels}}, headers=MERGE)


def _fixed(kube: KubeApi, namespace: str, name: str) -> bool:
    status = (get_workload(kube, namespace, name) or {}).get("status") or {}
    return status.get("readyReplicas") == 1 and status.get("phase") == "Running"


def test_status_lane_writes_while_full_passes_are_blocked(
    kube: KubeApi, namespace: str, operator_factory: Factory
) -> None:
    first = operator_factory(namespace)
    kube.apply(workload("qwen", namespace))
    wait_condition(kube, namespace, "qwen", "Ready", timeout=90)
    first.stop()
    leader = _leader_pod(kube, namespace, "qwen")["metadata"]["name"]

    port = _free_port()
    operator_factory(
        namespace, "--max-concurrent-passes", "0", "--metrics-port", str(port), "--metrics-host", "127.0.0.1"
    )
    # round 1 waits for the operator to start (its watches and the workload's daemon)
    _stale_status(kube, namespace, "qwen")
    touches = iter(range(1000))

    def repaired() -> bool:
        _touch_pod(kube, namespace, leader, str(next(touches)))
        time.sleep(0.5)
        return _fixed(kube, namespace, "qwen")

    kube.wait(repaired, timeout=60, what="the status lane to correct the status", interval=0.0)
    # round 2, with the operator warm: one status-only event, written within seconds
    _stale_status(kube, namespace, "qwen")
    assert not _fixed(kube, namespace, "qwen")
    start = time.monotonic()
    _touch_pod(kube, namespace, leader, "last")
    kube.wait(lambda: _fixed(kube, namespace, "qwen"), timeout=5, what="status corrected", interval=0.05)
    took = time.monotonic() - start
    assert took < 3.0, took
    # no full pass ran at all: the status came from the status lane
    assert _metric(port, "sparkrun_operator_reconcile_seconds_count", kind="InferenceWorkload") == 0
    assert _metric(port, "sparkrun_operator_status_passes_total", kind="InferenceWorkload", wrote="true") >= 2


def test_requested_reconcile_runs_a_pass_at_once(
    kube: KubeApi, namespace: str, operator_factory: Factory
) -> None:
    operator_factory(namespace)  # --drift-seconds 60
    kube.apply(workload("qwen", namespace))
    wait_condition(kube, namespace, "qwen", "Ready", timeout=90)
    time.sleep(1.0)  # the last follow-up passes of the rollout
    assert kube.delete("v1", "Service", "qwen", namespace=namespace)
    kube.wait(
        lambda: kube.get("v1", "Service", "qwen", namespace=namespace) is None,
        timeout=30,
        what="Service gone",
    )
    time.sleep(3.0)
    # nothing else brings the Service back before the drift timer: no event pokes for Services
    assert kube.get("v1", "Service", "qwen", namespace=namespace) is None
    path = kube.resource_path(API, "InferenceWorkload", namespace=namespace, name="qwen")
    annotations = {keys.ANNOTATION_RECONCILE_REQUESTED: str(time.time())}
    kube.request("PATCH", path, json={"metadata": {"annotations": annotations}}, headers=MERGE)
    start = time.monotonic()
    kube.wait(
        lambda: kube.get("v1", "Service", "qwen", namespace=namespace),
        timeout=5,
        what="the Service recreated by the requested pass",
        interval=0.1,
    )
    assert time.monotonic() - start < 5.0

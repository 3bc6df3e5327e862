"""Drain and replace on the testbed (ADR 0049): a process node serving one rank of a 2-node group
is cordoned while traffic runs through the gateway, the drain is asked for through the daemon
operation ``plugins.sparkrun-k8s.clusters.drain``, and the group moves: out of the gateway's
routing, its pod on the cordoned node evicted, the whole group restarted elsewhere with its ranks,
Ready again; the other replica serves throughout.

Real components: the shim and the operator with exactly the chart's RBAC (the eviction is the
chart's ``pods/eviction`` create), the JobSet controller, the scheduler, process nodes running the
engine stand-in, the EndpointSlice controller, and the gateway (``--kubernetes``) as a process.
Measured: every request sent during the drain, and how many failed (expected: none).
"""

from __future__ import annotations

import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from sparkrun_testbed import topology
from sparkrun_testbed.kubeapi import KubeApi
from sparkrun_testbed.plane import Testbed
from sparkrun_testbed.ports import free_ports
from tests.operator.conftest import API, wait_condition, workload
from tests.shim.conftest import Daemon, start_daemon, stop_daemon

pytestmark = pytest.mark.testbed

WORKLOAD, MODEL, SERVED = "relay", "Qwen/Qwen3-0.6B", "courier"
OPERATION = "plugins.sparkrun-k8s.clusters.drain"
PROCESS_NODES = [f"proc-{i}" for i in range(4)]
TOLERATION = {
    "key": topology.PROCESS_TAINT["key"],
    "operator": "Equal",
    "value": topology.PROCESS_TAINT["value"],
    "effect": topology.PROCESS_TAINT["effect"],
}


#: Each answer takes about MAX_TOKENS x TOKEN_SECONDS (the stand-in's pace), so requests are in
#: flight on both groups at any moment: one cut by a leader going away would fail (the stand-in's
#: leader exits when a rank leaves, as vLLM's does, and nothing is retried once it was sent).
MAX_TOKENS, TOKEN_SECONDS, SENDERS = 8, 0.1, 4


@dataclass
class Traffic:
    """Chat completions sent back to back by :data:`SENDERS` threads through the gateway, counted."""

    url: str
    total: int = 0
    failures: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self) -> None:
        body = {"model": SERVED, "messages": [{"role": "user", "content": "hi"}], "max_tokens": MAX_TOKENS}
        with httpx.Client(base_url=self.url, timeout=30) as client:
            while not self.stop.is_set():
                failure = None
                try:
                    answer = client.post("/v1/chat/completions", json=body)
                    if answer.status_code != 200:
                        failure = f"{answer.status_code} {answer.text[:200]}"
                except httpx.HTTPError as error:
                    failure = repr(error)
                with self.lock:
                    self.total += 1
                    if failure is not None:
                        self.failures.append(failure)


@pytest.fixture
def daemon(
    request: pytest.FixtureRequest, testbed: Testbed, crds: list[str], kube: KubeApi, tmp_path: Path
) -> Iterator[Daemon]:
    running = start_daemon(testbed, kube, tmp_path, chart_rbac=True)
    failed_before = request.session.testsfailed
    yield running
    if request.session.testsfailed > failed_before:
        print(running.runner.logs())
    stop_daemon(running)


@pytest.fixture
def cluster(kube: KubeApi, daemon: Daemon) -> Iterator[str]:
    name = f"pool-{secrets.token_hex(3)}"
    kube.create(
        {
            "apiVersion": API,
            "kind": "InferenceCluster",
            "metadata": {"name": name},
            "spec": {
                "nodes": {"names": PROCESS_NODES},
                "tolerations": [TOLERATION],
                "drain": {"settleSeconds": 3, "groupTimeoutSeconds": 240},
            },
        }
    )
    yield name
    kube.delete(API, "InferenceCluster", name)


@pytest.fixture
def gateway(kubeconfig: Path, daemon: Daemon, tmp_path: Path) -> Iterator[str]:
    (port,) = free_ports(1)
    args = [
        sys.executable,
        "-m",
        "sparkrun_operator.gateway",
        "--kubernetes",
        "--kubeconfig",
        str(kubeconfig),
        "--inference-pools",
        "off",
    ]
    args += [
        "--namespace",
        daemon.namespace,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "warning",
    ]
    log = (tmp_path / "gateway.log").open("w")
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(15)
        log.close()


def _pods(kube: KubeApi, namespace: str) -> list[dict[str, Any]]:
    pods = kube.list_items(
        "v1", "Pod", namespace=namespace, label_selector=f"sparkrun.dev/workload={WORKLOAD}"
    )
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def _cordon(kube: KubeApi, node: str, on: bool) -> None:
    kube.request(
        "PATCH",
        f"/api/v1/nodes/{node}",
        json={"spec": {"unschedulable": on or None}},
        headers={"Content-Type": "application/merge-patch+json"},
    )


def _rank(pod: dict[str, Any]) -> tuple[str, int, str]:
    """(role, replica, completion index): the rank a pod runs (worker rank = index + 1)."""
    labels, notes = pod["metadata"]["labels"], pod["metadata"].get("annotations") or {}
    return (
        labels["sparkrun.dev/role"],
        int(labels["sparkrun.dev/replica"]),
        notes.get("batch.kubernetes.io/job-completion-index", ""),
    )


def _serving(url: str) -> bool:
    body = {"model": SERVED, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    try:
        return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=10).status_code == 200
    except httpx.HTTPError:
        return False


def test_drain_moves_one_group_while_the_other_serves(
    kube: KubeApi, daemon: Daemon, cluster: str, gateway: str, netns_network: None
) -> None:
    ns = daemon.namespace
    kube.apply(
        workload(
            WORKLOAD,
            ns,
            model={"name": MODEL, "servedName": SERVED},
            cluster=cluster,
            replicas=2,
            engine={"env": [{"name": "SPARKRUN_ENGINE_TOKEN_SECONDS", "value": str(TOKEN_SECONDS)}]},
            topology={"nodes": 2, "gpusPerNode": 1, "tensorParallel": 2},
            scheduling={"nodeSelector": {topology.PROCESS_RUNTIME_LABEL: "process"}},
        )
    )
    wait_condition(
        kube, ns, WORKLOAD, "Ready", timeout=240, extra=lambda o: o["status"].get("readyReplicas") == 2
    )
    kube.wait(lambda: _serving(gateway), timeout=60, what="the gateway serves the workload")
    before = {_rank(p): p["spec"]["nodeName"] for p in _pods(kube, ns)}
    assert sorted(before) == [("leader", 0, "0"), ("leader", 1, "0"), ("worker", 0, "0"), ("worker", 1, "0")]
    drained = before[("worker", 0, "0")]

    traffic = Traffic(gateway)
    senders = [threading.Thread(target=traffic.run, daemon=True) for _ in range(SENDERS)]
    for sender in senders:
        sender.start()
    _cordon(kube, drained, True)
    try:
        started = time.monotonic()
        job_id = daemon.submit("admin", OPERATION, {"cluster": cluster, "timeout_seconds": 400})
        job = daemon.wait_job(job_id, "admin", timeout=450)
        elapsed = time.monotonic() - started
        time.sleep(2)  # a little traffic on the moved group too
    finally:
        traffic.stop.set()
        for sender in senders:
            sender.join(60)
        _cordon(kube, drained, False)
    print(f"drain of {drained}: {elapsed:.1f} s, {traffic.total} requests, {len(traffic.failures)} failed")

    assert job["state"] == "succeeded", job
    result = job["result"]
    assert result["state"] == "Done", result
    assert drained in result["nodes"]
    moved = {(g["workload"], g["replica"]): g for g in result["groups"]}
    group = moved[(f"{ns}/{WORKLOAD}", 0)]
    assert group["state"] == "Ready"
    assert drained in group["from_nodes"]
    assert drained not in group["to_nodes"]

    # the group restarted off the drained node with the same ranks; nothing runs there any more
    after = {_rank(p): p["spec"]["nodeName"] for p in _pods(kube, ns)}
    assert sorted(after) == sorted(before)
    assert drained not in after.values()

    # progress in the cluster's and the workload's status
    status = kube.get(API, "InferenceCluster", cluster)["status"]["drain"]
    assert (status["state"], status["request"]) == ("Done", result["request"])
    mine = kube.get(API, "InferenceWorkload", WORKLOAD, namespace=ns)["status"]["drain"]
    assert mine["cluster"] == cluster
    assert {(g["replica"], g["state"]) for g in mine["groups"]} >= {(0, "Ready")}
    assert all(g["evictedAt"] and g["readyAt"] and g["unroutedAt"] for g in mine["groups"])

    # each step is an Event on the cluster; this operator serves namespaces (-n), so a
    # cluster-scoped object's Events are in its own namespace, where it may write them (not in
    # "default": kubectl describe finds them in any namespace)
    def reasons() -> set[str] | None:
        found = {
            str(e.get("reason"))
            for e in kube.list_items("v1", "Event", namespace=ns)
            if (e.get("involvedObject") or {}).get("name") == cluster
        }
        return found if {"DrainMoving", "DrainEvicted", "DrainMoved"} <= found else None

    kube.wait(reasons, timeout=30, what=f"drain Events on InferenceCluster {cluster}")

    # served throughout: not one failed request while the group moved
    assert traffic.total >= 20, traffic.total
    assert traffic.failures == [], traffic.failures[:5]


def test_a_refused_eviction_blocks_the_drain_and_keeps_the_group_serving(
    kube: KubeApi, daemon: Daemon, cluster: str, netns_network: None
) -> None:
    ns = daemon.namespace
    kube.apply(
        workload(
            WORKLOAD,
            ns,
            model={"name": MODEL, "servedName": SERVED},
            cluster=cluster,
            replicas=2,
            topology={"nodes": 2, "gpusPerNode": 1, "tensorParallel": 2},
            scheduling={"nodeSelector": {topology.PROCESS_RUNTIME_LABEL: "process"}},
        )
    )
    wait_condition(
        kube, ns, WORKLOAD, "Ready", timeout=240, extra=lambda o: o["status"].get("readyReplicas") == 2
    )
    # the workload's owner allows none of its pods to go: the Eviction API refuses (429)
    kube.create(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "none-down", "namespace": ns},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"sparkrun.dev/workload": WORKLOAD}}},
        }
    )
    before = {_rank(p): (p["metadata"]["uid"], p["spec"]["nodeName"]) for p in _pods(kube, ns)}
    drained = before[("worker", 0, "0")][1]
    _cordon(kube, drained, True)
    try:
        job_id = daemon.submit("admin", OPERATION, {"cluster": cluster, "timeout_seconds": 120})
        job = daemon.wait_job(job_id, "admin", timeout=180)
    finally:
        _cordon(kube, drained, False)
    assert job["state"] == "succeeded", job
    result = job["result"]
    assert result["state"] == "Blocked", result
    print(result)
    blocked = {g["replica"]: g for g in result["groups"] if g["state"] == "Blocked"}
    assert 0 in blocked, result
    assert "refused" in blocked[0]["message"]
    assert "disruption budget" in blocked[0]["message"].lower()
    # nothing was torn down, and the group is back in the routing (no pod listed as unrouted)
    after = {_rank(p): (p["metadata"]["uid"], p["spec"]["nodeName"]) for p in _pods(kube, ns)}
    assert after == before
    mine = kube.get(API, "InferenceWorkload", WORKLOAD, namespace=ns)["status"]
    assert mine["readyReplicas"] == 2
    assert all(g["unrouted"] == [] for g in mine["drain"]["groups"] if g["state"] == "Blocked")

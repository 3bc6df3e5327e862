"""A multi-node serving group as the operator renders it, run for real on process nodes.

A JobSet with a ``leader`` (rank 0, HTTP, probes) and two ``worker`` s (headless ranks whose
init container waits for the leader's port, ranks from ``JOB_COMPLETION_INDEX``), each pod's
``vllm serve`` run by the engine stand-in. Checked: the leader is Ready only once both workers
joined; a Service's EndpointSlice lists the leader's address and a chat completion to it works;
``kubectl logs`` shows the engine; killing a worker restarts the whole group through the JobSet
failure policy; deleting the JobSet leaves no process behind.
"""

from __future__ import annotations

import os
import secrets
import signal
from typing import Any

import httpx
import pytest

from sparkrun_testbed.kubeapi import KubeApi
from tests.process.helpers import (
    ENGINE_IMAGE,
    JOBSET,
    MARK_ENV,
    cmdline_of,
    condition,
    container,
    environ_of,
    marked_pids,
    pod_spec,
    ready,
    wait_for,
)

pytestmark = pytest.mark.testbed

MASTER_PORT = 29501


def group(name: str, mark: str, *, workers: int = 2, worker_delay: float = 0.0) -> dict[str, Any]:
    """A serving group: ``1 + workers`` ranks, the shape docs/resources/inferenceworkload.md describes."""
    nnodes = workers + 1
    leader_host = f"{name}-leader-0-0.{name}"
    flags = ["--nnodes", str(nnodes), "--master-addr", leader_host, "--master-port", str(MASTER_PORT)]
    leader = {
        "name": "vllm",
        "image": ENGINE_IMAGE,
        "command": ["vllm", "serve"],
        "args": ["org/model", "--served-model-name", "tiny", "--port", "8000", *flags, "--node-rank", "0"],
        "env": [{"name": "VLLM_HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        "ports": [{"name": "http", "containerPort": 8000}],
        "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 1},
    }
    wait_leader = {
        "name": "wait-leader",
        "image": "busybox:1.36",
        "command": [
            "sh",
            "-c",
            f"sleep {worker_delay}; until nc -z {leader_host} {MASTER_PORT}; do sleep 0.3; done",
        ],
    }
    worker = {
        "name": "vllm",
        "image": ENGINE_IMAGE,
        "command": ["sh", "-c"],
        "args": [
            f"exec vllm serve org/model {' '.join(flags)} --node-rank $((JOB_COMPLETION_INDEX+1)) --headless"
        ],
        "env": [{"name": "ROLE", "value": "worker"}],
    }

    def job(role: str, count: int, spec: dict[str, Any]) -> dict[str, Any]:
        return {
            "name": role,
            "replicas": 1,
            "template": {
                "spec": {
                    "completions": count,
                    "parallelism": count,
                    "backoffLimit": 0,
                    "template": {"metadata": {"labels": {"app": name, "role": role}}, "spec": spec},
                }
            },
        }

    return {
        "apiVersion": JOBSET,
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            "successPolicy": {"operator": "All", "targetReplicatedJobs": ["leader"]},
            "failurePolicy": {"maxRestarts": 3},
            "replicatedJobs": [
                job("leader", 1, pod_spec([leader], mark=mark)),
                job("worker", workers, pod_spec([worker], init=[wait_leader], mark=mark)),
            ],
        },
    }


def group_pods(kube: KubeApi, namespace: str, name: str) -> dict[str, list[dict[str, Any]]]:
    pods = kube.list_items("v1", "Pod", namespace=namespace, label_selector=f"app={name}")
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    return {
        role: [p for p in live if p["metadata"]["labels"].get("role") == role]
        for role in ("leader", "worker")
    }


def all_ready(
    kube: KubeApi, namespace: str, name: str, workers: int
) -> dict[str, list[dict[str, Any]]] | None:
    pods = group_pods(kube, namespace, name)
    complete = len(pods["leader"]) == 1 and len(pods["worker"]) == workers
    if (
        complete
        and ready(pods["leader"][0])
        and all(container(w, "vllm").get("started") for w in pods["worker"])
    ):
        return pods
    return None


def delete_and_check_nothing_is_left(kube: KubeApi, namespace: str, name: str, mark: str) -> None:
    kube.delete(JOBSET, "JobSet", name, namespace=namespace)
    wait_for(
        lambda: not kube.list_items("v1", "Pod", namespace=namespace, label_selector=f"app={name}"),
        timeout=60,
        what=f"the pods of {name} to be gone",
    )
    wait_for(lambda: not marked_pids(mark), timeout=15, what="every process of the group to be gone")


def test_a_group_comes_up_serves_through_its_service_and_leaves_nothing_behind(
    kube: KubeApi, kubectl: Any, namespace: str, process_nodes: list[str], netns_network: None
) -> None:
    mark = secrets.token_hex(8)
    kube.create(group("grp", mark, worker_delay=5.0), namespace=namespace)
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "grp-serve"},
        "spec": {
            "selector": {"app": "grp", "role": "leader"},
            "ports": [{"name": "http", "port": 8000, "targetPort": "http"}],
        },
    }
    kube.create(service, namespace=namespace)

    # While the workers are still in their init container, the leader runs but is not Ready.
    def leader_running_workers_initializing() -> dict[str, list[dict[str, Any]]] | None:
        pods = group_pods(kube, namespace, "grp")
        leaders, workers = pods["leader"], pods["worker"]
        leader_up = len(leaders) == 1 and "running" in container(leaders[0], "vllm").get("state", {})
        waiting = len(workers) == 2 and all(
            "running" in container(w, "wait-leader", init=True).get("state", {}) for w in workers
        )
        return pods if leader_up and waiting else None

    early = wait_for(leader_running_workers_initializing, timeout=60, what="leader up, workers initializing")
    assert not ready(early["leader"][0])

    pods = wait_for(lambda: all_ready(kube, namespace, "grp", 2), timeout=90, what="the group Ready")
    leader = pods["leader"][0]
    ready_at = condition(leader, "Ready")["lastTransitionTime"]
    for worker in pods["worker"]:
        assert container(worker, "vllm")["state"]["running"]["startedAt"] <= ready_at
    logs = kubectl("logs", "-n", namespace, leader["metadata"]["name"]).stdout
    assert "rank 1 joined" in logs
    assert "rank 2 joined" in logs
    assert "engine ready" in logs
    assert logs.index("engine ready") > max(logs.index("rank 1 joined"), logs.index("rank 2 joined"))
    worker_logs = kubectl("logs", "-n", namespace, pods["worker"][0]["metadata"]["name"], "-c", "vllm").stdout
    assert "joined leader grp-leader-0-0.grp:29501" in worker_logs

    leader_ip = leader["status"]["podIP"]

    def endpoints() -> list[dict[str, Any]] | None:
        slices = kube.list_items(
            "discovery.k8s.io/v1",
            "EndpointSlice",
            namespace=namespace,
            label_selector="kubernetes.io/service-name=grp-serve",
        )
        found = [e for s in slices for e in s.get("endpoints") or ()]
        return found if any(e["conditions"].get("ready") for e in found) else None

    (endpoint,) = wait_for(endpoints, timeout=30, what="a ready endpoint of the Service")
    assert endpoint["addresses"] == [leader_ip]
    assert endpoint["targetRef"]["name"] == leader["metadata"]["name"]
    with httpx.Client(trust_env=False, timeout=10) as client:
        answer = client.post(
            f"http://{endpoint['addresses'][0]}:8000/v1/chat/completions",
            json={"model": "tiny", "messages": [{"role": "user", "content": "hello"}]},
        )
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"]

    assert len(marked_pids(mark)) >= 3
    delete_and_check_nothing_is_left(kube, namespace, "grp", mark)


def test_killing_a_worker_restarts_the_whole_group_through_the_failure_policy(
    kube: KubeApi, namespace: str, process_nodes: list[str], pod_network: str, require: Any
) -> None:
    require(pod_network == "netns", "workers find the leader by its DNS name, which needs pod namespaces")
    mark = secrets.token_hex(8)
    kube.create(group("crash", mark), namespace=namespace)
    before = wait_for(lambda: all_ready(kube, namespace, "crash", 2), timeout=90, what="the group Ready")
    uids_before = {p["metadata"]["uid"] for role in before.values() for p in role}

    worker_engines = [
        pid
        for pid in marked_pids(mark)
        if environ_of(pid).get("ROLE") == "worker" and "sparkrun_testbed.engine" in cmdline_of(pid)
    ]
    assert len(worker_engines) == 2, worker_engines
    os.kill(worker_engines[0], signal.SIGKILL)

    def restarted() -> dict[str, list[dict[str, Any]]] | None:
        jobset = kube.get(JOBSET, "JobSet", "crash", namespace=namespace) or {}
        if (jobset.get("status") or {}).get("restarts", 0) < 1:
            return None
        pods = all_ready(kube, namespace, "crash", 2)
        if pods and not {p["metadata"]["uid"] for role in pods.values() for p in role} & uids_before:
            return pods
        return None

    after = wait_for(restarted, timeout=120, what="the group restarted and Ready again")
    jobset = kube.get(JOBSET, "JobSet", "crash", namespace=namespace)
    assert jobset is not None
    assert jobset["status"]["restarts"] == 1
    assert after["leader"][0]["metadata"]["labels"].get("jobset.sigs.k8s.io/restart-attempt") == "1"
    # The old group's processes are gone: only the new group's three engines carry the mark.
    engines = wait_for(
        lambda: (
            found
            if len(found := [p for p in marked_pids(mark) if "sparkrun_testbed.engine" in cmdline_of(p)]) == 3
            else None
        ),
        timeout=30,
        what="exactly three engines",
    )
    assert all(environ_of(pid)[MARK_ENV] == mark for pid in engines)
    delete_and_check_nothing_is_left(kube, namespace, "crash", mark)

"""GPU telemetry in ``/v1/streams/monitor`` and in the InferenceCluster's status, on the testbed.

Tested (the shim and the operator run as their real commands with the chart's RBAC; the agent is
the real ``sparkrun-k8s agent`` with the fake NVML binding, ``tests/agent/fakenvml.py``, as the
pod of a real DaemonSet on a process node, so its pod IP is real):

- the monitor frame of the agent's node carries the fake GPUs' mean utilisation and summed memory,
  the host's CPU, memory and network rates, per-GPU detail and the driver version; a later
  subscriber's ``history`` has those samples;
- a pod labelled as the agent in the shim's namespace but not owned by a DaemonSet, and a
  DaemonSet's pod with the label in a tenant namespace, are never read: their nodes' fields stay
  ``""`` with a ``telemetry_error``, and the stream goes on;
- the operator writes ``gpuMemoryMiB`` and ``driverVersion`` into an InferenceCluster's status
  from the GPU feature discovery labels set on KWOK nodes (the full driver label, and the older
  major/minor/rev ones), when the labels change.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkrun_operator.api import telemetry as t
from sparkrun_testbed import topology
from sparkrun_testbed.kubeapi import KubeApi
from tests.agent.fakenvml import ENV as FAKE_NVML_ENV
from tests.process.helpers import pod_spec, ready, wait_for
from tests.shim.conftest import API, Daemon

pytestmark = pytest.mark.testbed

CHART_RBAC = True
REPO = Path(__file__).resolve().parents[2]
AGENT_NODE, STRAY_NODE, TENANT_NODE = "proc-0", "proc-1", "proc-2"
GIB = 1024**3
AGENT_LABELS = {
    "app.kubernetes.io/name": "sparkrun-operator",
    "app.kubernetes.io/component": t.AGENT_COMPONENT,
}


def _fake_gpus(utilisations: tuple[int, int]) -> str:
    gpus = [
        {"utilization": util, "memory_used": (i + 1) * 10 * GIB, "memory_total": 80 * GIB}
        for i, util in enumerate(utilisations)
    ]
    return json.dumps({"driver": "550.54.15", "gpus": gpus})


def _agent_pod_spec(node: str, utilisations: tuple[int, int]) -> dict[str, Any]:
    container = {
        "name": "agent",
        "image": "ghcr.io/sparkrun/sparkrun-operator:test",
        "command": ["python", "-m", "sparkrun_operator.cli.main", "agent"],
        "args": [
            *("--node", node, "--no-labels", "--port", "9400", "--interval", "1"),
            *("--nvml-module", "tests.agent.fakenvml"),
        ],
        "env": [
            {"name": "PYTHONPATH", "value": str(REPO)},
            {"name": FAKE_NVML_ENV, "value": _fake_gpus(utilisations)},
        ],
        "ports": [{"name": t.AGENT_PORT_NAME, "containerPort": 9400}],
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": 9400}, "periodSeconds": 1},
    }
    spec = pod_spec([container], restart="Always")
    spec["nodeSelector"] = {**spec["nodeSelector"], "kubernetes.io/hostname": node}
    return spec


def _daemonset(name: str, node: str, utilisations: tuple[int, int]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "labels": AGENT_LABELS},
        "spec": {
            "selector": {"matchLabels": AGENT_LABELS},
            "template": {"metadata": {"labels": AGENT_LABELS}, "spec": _agent_pod_spec(node, utilisations)},
        },
    }


def _ready_pod_on(kube: KubeApi, namespace: str, node: str) -> dict[str, Any]:
    seen: list[Any] = []

    def probe() -> dict[str, Any] | None:
        pods = kube.list_items("v1", "Pod", namespace=namespace, label_selector=t.AGENT_SELECTOR)
        seen[:] = [(p["metadata"]["name"], p["spec"].get("nodeName"), p.get("status")) for p in pods]
        on_node = [p for p in pods if p["spec"].get("nodeName") == node and ready(p)]
        return on_node[0] if on_node else None

    try:
        return wait_for(probe, timeout=90, what=f"a Ready agent pod on {node} in {namespace}")
    except AssertionError as error:
        raise AssertionError(f"{error}; pods: {seen}") from None


@pytest.fixture(scope="module")
def agents(daemon: Daemon) -> Iterator[None]:
    """The real agent as a DaemonSet's pod in the shim's namespace on AGENT_NODE; an unowned
    look-alike in the same namespace on STRAY_NODE; a tenant's DaemonSet on TENANT_NODE."""
    kube, namespace = daemon.kube, daemon.namespace
    tenant = "tenant-" + secrets.token_hex(4)
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": tenant}})
    try:
        kube.create(_daemonset("gpu-agent", AGENT_NODE, (37, 61)), namespace=namespace)
        stray = {
            "apiVersion": "v1",
            "kind": "Pod",
            # NB: the agent's label, not the whole selector of the DaemonSet (which would adopt it)
            "metadata": {
                "name": "gpu-agent-stray",
                "labels": {"app.kubernetes.io/component": t.AGENT_COMPONENT},
            },
            "spec": _agent_pod_spec(STRAY_NODE, (99, 99)),
        }
        kube.create(stray, namespace=namespace)
        kube.create(_daemonset("gpu-agent", TENANT_NODE, (98, 98)), namespace=tenant)
        for ns, node in ((namespace, AGENT_NODE), (namespace, STRAY_NODE), (tenant, TENANT_NODE)):
            _ready_pod_on(kube, ns, node)
        yield
    finally:
        kube.delete("apps/v1", "DaemonSet", "gpu-agent", namespace=namespace)
        kube.delete("v1", "Pod", "gpu-agent-stray", namespace=namespace)
        kube.delete("v1", "Namespace", tenant)


def _frames(daemon: Daemon, hosts: list[str], *, until: float) -> Iterator[dict[str, Any]]:
    with (
        daemon.http("reader") as client,
        client.stream(
            "GET", "/v1/streams/monitor", params={"hosts": ",".join(hosts), "interval": "1"}, timeout=30
        ) as stream,
    ):
        assert stream.status_code == 200
        for line in stream.iter_lines():
            if line.startswith("data: "):
                yield json.loads(line[6:])
            if time.monotonic() > until:
                return


def _complete(row: dict[str, Any]) -> bool:
    keys = (
        "gpu_util_percent",
        "cpu_percent",
        "memory_used_bytes",
        "rx_bytes_per_second",
        "tx_bytes_per_second",
    )
    return all(row[key] != "" for key in keys)


@pytest.mark.usefixtures("agents")
def test_the_monitor_shows_the_agents_samples_and_ignores_look_alikes(daemon: Daemon) -> None:
    hosts = [AGENT_NODE, STRAY_NODE, TENANT_NODE]
    rows: dict[str, dict[str, Any]] = {}
    frames = 0
    for event in _frames(daemon, hosts, until=time.monotonic() + 60):
        if event["type"] != "frame":
            continue
        frames += 1
        rows = {row["host"]: row for row in event["hosts"]}
        if _complete(rows[AGENT_NODE]):
            break
    assert rows, "no frame"
    agent = rows[AGENT_NODE]
    assert _complete(agent), agent
    assert agent["telemetry_error"] is None
    assert agent["gpu_util_percent"] == 49.0  # mean of 37 and 61
    assert agent["gpu_memory_used_bytes"] == 30 * GIB  # 10 GiB + 20 GiB
    assert agent["driver_version"] == "550.54.15"
    assert [(g["index"], g["utilization_percent"]) for g in agent["gpus"]] == [(0, 37.0), (1, 61.0)]
    assert [g["memory_total_bytes"] for g in agent["gpus"]] == [80 * GIB, 80 * GIB]
    assert 0 <= agent["cpu_percent"] <= 100
    assert agent["memory_used_bytes"] > 0
    assert agent["memory_total_bytes"] >= agent["memory_used_bytes"]
    assert agent["rx_bytes_per_second"] >= 0
    assert agent["tx_bytes_per_second"] >= 0
    assert agent["gpu_count"] > 0  # occupancy is still there
    for host in (STRAY_NODE, TENANT_NODE):
        row = rows[host]
        assert {row[k] for k in ("cpu_percent", "gpu_util_percent", "gpu_memory_used_bytes")} == {""}, row
        assert row["telemetry_error"] == "no telemetry agent runs on this node"
        assert row["gpus"] == []

    # a later subscriber's history has the recorded samples (the session is still shared)
    history = next(iter(_frames(daemon, [AGENT_NODE], until=time.monotonic() + 10)))
    assert history["type"] == "history"
    points = history["series"][0]["points"]
    assert any(p["sample"]["gpu_util_percent"] == 49.0 for p in points), points


@pytest.mark.usefixtures("agents")
def test_an_unknown_host_and_a_node_without_agent_stay_empty(daemon: Daemon) -> None:
    hosts = ["gpu-0", "no-such-node"]
    events = []
    for event in _frames(daemon, hosts, until=time.monotonic() + 30):
        events.append(event)
        if len(events) == 3:
            break
    assert [e["type"] for e in events] == ["history", "frame", "frame"]
    rows = {row["host"]: row for row in events[-1]["hosts"]}
    assert rows["gpu-0"]["telemetry_error"] == "no telemetry agent runs on this node"
    assert rows["no-such-node"]["gpu_util_percent"] == ""
    assert rows["no-such-node"]["reachable"] is False


# -- the InferenceCluster's status ----------------------------------------------------------------


def _kwok_node(name: str) -> dict[str, Any]:
    pool = topology.NodePool(prefix=name, count=1, gpus=4)
    manifest = topology.node_manifests(topology.Topology(pools=(pool,)))[0]
    manifest["metadata"]["name"] = name
    manifest["metadata"]["labels"]["kubernetes.io/hostname"] = name
    return manifest


def _label(kube: KubeApi, node: str, labels: dict[str, str | None]) -> None:
    kube.request(
        "PATCH",
        kube.resource_path("v1", "Node", name=node),
        content=json.dumps({"metadata": {"labels": labels}}),
        headers={"Content-Type": "application/merge-patch+json"},
    )


def test_the_cluster_status_reports_gpu_memory_and_driver_from_node_labels(daemon: Daemon) -> None:
    kube = daemon.kube
    suffix = secrets.token_hex(3)
    gfd, older = f"telemetry-gfd-{suffix}", f"telemetry-old-{suffix}"
    cluster = f"telemetry-{suffix}"
    for name in (gfd, older):
        kube.create(_kwok_node(name))
    try:
        kube.create(
            {
                "apiVersion": API,
                "kind": "InferenceCluster",
                "metadata": {"name": cluster},
                "spec": {"nodes": {"names": [gfd, older]}, "minReadyNodes": 0},
            }
        )

        def nodes_status(want: dict[str, tuple[Any, Any]]) -> dict[str, Any] | None:
            obj = kube.get(API, "InferenceCluster", cluster) or {}
            nodes = {n["name"]: n for n in (obj.get("status") or {}).get("nodes") or []}
            seen = {
                name: (nodes.get(name, {}).get("gpuMemoryMiB"), nodes.get(name, {}).get("driverVersion"))
                for name in want
            }
            return nodes if set(nodes) == set(want) and seen == want else None

        kube.wait(lambda: nodes_status({gfd: (None, None), older: (None, None)}), timeout=60, what="status")
        _label(kube, gfd, {t.GPU_MEMORY_LABEL: "81559", t.DRIVER_VERSION_LABEL: "550.54.15"})
        _label(
            kube,
            older,
            {t.DRIVER_MAJOR_LABEL: "535", t.DRIVER_MINOR_LABEL: "104", t.DRIVER_REV_LABEL: "05"},
        )
        nodes = kube.wait(
            lambda: nodes_status({gfd: (81559, "550.54.15"), older: (None, "535.104.05")}),
            timeout=60,
            what="gpuMemoryMiB and driverVersion in the cluster's status",
        )
        assert nodes[gfd]["gpus"]["capacity"] == 4
        obj = kube.get(API, "InferenceCluster", cluster)
        assert obj is not None
        assert obj["status"]["totals"]["gpus"]["capacity"] == 8
        # a label removed: the field goes away again
        _label(kube, gfd, {t.GPU_MEMORY_LABEL: None})
        kube.wait(
            lambda: nodes_status({gfd: (None, "550.54.15"), older: (None, "535.104.05")}),
            timeout=60,
            what="gpuMemoryMiB gone with its label",
        )
    finally:
        kube.delete(API, "InferenceCluster", cluster)
        for name in (gfd, older):
            kube.delete("v1", "Node", name)

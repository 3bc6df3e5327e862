"""The real agent (``sparkrun-k8s agent`` as a process, the fake NVML) labels its node on the
testbed's apiserver, authenticated as the chart's ServiceAccount with exactly the chart's
ClusterRole (get and patch nodes); where GPU feature discovery runs it leaves the labels alone."""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from sparkrun_operator.agent.labels import Publisher
from sparkrun_operator.api import telemetry
from sparkrun_operator.api.telemetry import SAMPLE_PATH, GPUSample, NodeSample, NVMLState
from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.render import keys
from sparkrun_testbed.kubeapi import KubeApi
from sparkrun_testbed.plane import Testbed
from tests.agent import fakenvml
from tests.deploy.chart import CHART, REPO, require_helm
from tests.shim.chart_rbac import _kubeconfig
from tests.shim.harness import service_account_token

pytestmark = pytest.mark.testbed

SPARKRUN_K8S = str(Path(sys.executable).with_name("sparkrun-k8s"))
GPUS = [
    {"name": "NVIDIA H200", "uuid": "GPU-11111111", "memory_total": 143771 * 1024 * 1024},
    {"name": "NVIDIA H200", "uuid": "GPU-22222222", "memory_total": 143771 * 1024 * 1024, "nvlink_links": 18},
]


@pytest.fixture
def agent_kubeconfig(testbed: Testbed, kube: KubeApi, namespace: str, tmp_path: Path) -> Iterator[Path]:
    """A kubeconfig of the chart's gpu-agent ServiceAccount, bound to the chart's ClusterRole."""
    release = f"h7{secrets.token_hex(3)}"
    out = subprocess.run(
        [
            require_helm(),
            "template",
            release,
            str(CHART),
            "--namespace",
            namespace,
            "--set",
            "gpuAgent.enabled=true",
            "--show-only",
            "templates/gpu-agent/rbac.yaml",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    docs = [d for d in yaml.safe_load_all(out) if d]
    assert [d["kind"] for d in docs] == ["ServiceAccount", "ClusterRole", "ClusterRoleBinding"]
    for doc in docs:
        kube.create(doc, namespace=namespace if doc["kind"] == "ServiceAccount" else None)
    account = docs[0]["metadata"]["name"]
    try:
        yield _kubeconfig(
            testbed, service_account_token(kube, namespace, account), tmp_path / "agent.kubeconfig"
        )
    finally:
        for doc in docs[1:]:
            kube.delete(doc["apiVersion"], doc["kind"], doc["metadata"]["name"])


@pytest.fixture
def nodes(kube: KubeApi) -> Iterator[tuple[str, str]]:
    """Two Nodes: one without GPU feature discovery, one GFD labelled."""
    plain, gfd = f"h7-gpu-{secrets.token_hex(3)}", f"h7-gfd-{secrets.token_hex(3)}"
    kube.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": plain, "labels": {"pool": "h7"}}})
    gfd_labels = {telemetry.GFD_TIMESTAMP_LABEL: "1700000000", telemetry.GPU_PRODUCT_LABEL: "GFD-Says-So"}
    kube.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": gfd, "labels": gfd_labels}})
    try:
        yield plain, gfd
    finally:
        kube.delete("v1", "Node", plain)
        kube.delete("v1", "Node", gfd)


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def _agent(node: str, kubeconfig: Path, tmp_path: Path) -> Iterator[str]:
    port = _port()
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        fakenvml.ENV: json.dumps({"gpus": GPUS, "driver": "560.35.03"}),
    }
    env.pop("NODE_NAME", None)
    log = (tmp_path / f"agent-{node}.log").open("w")
    argv = [
        SPARKRUN_K8S,
        "agent",
        "--node",
        node,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--interval",
        "0.5",
        "--nvml-module",
        "tests.agent.fakenvml",
        "--kubeconfig",
        str(kubeconfig),
    ]
    process = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        code = process.wait(timeout=20)
        log.close()
        assert code == 0, (tmp_path / f"agent-{node}.log").read_text()


def _until(probe: Any, what: str, seconds: float = 60) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _sample(url: str) -> NodeSample | None:
    try:
        answer = httpx.get(url + SAMPLE_PATH, timeout=2)
    except httpx.TransportError:
        return None
    return NodeSample.model_validate(answer.json()) if answer.status_code == 200 else None


def _labels(kube: KubeApi, node: str) -> dict[str, str]:
    found = kube.get("v1", "Node", node)
    assert found is not None
    return dict(found["metadata"].get("labels") or {})


def test_the_agent_labels_its_node_as_gfd_would(
    kube: KubeApi, nodes: tuple[str, str], agent_kubeconfig: Path, tmp_path: Path
) -> None:
    plain, _ = nodes
    with _agent(plain, agent_kubeconfig, tmp_path) as url:
        sample = _until(lambda: _sample(url), "the first sample")
        assert sample.node == plain
        assert [g.uuid for g in sample.gpus] == ["GPU-11111111", "GPU-22222222"]
        labels = _until(
            lambda: (ls := _labels(kube, plain)).get(telemetry.GPU_COUNT_LABEL) and ls, "the labels"
        )
    assert labels == {
        "pool": "h7",
        telemetry.GPU_PRODUCT_LABEL: "NVIDIA-H200",
        telemetry.GPU_MEMORY_LABEL: "143771",
        telemetry.GPU_COUNT_LABEL: "2",
        telemetry.DRIVER_VERSION_LABEL: "560.35.03",
        telemetry.DRIVER_MAJOR_LABEL: "560",
        telemetry.DRIVER_MINOR_LABEL: "35",
        telemetry.DRIVER_REV_LABEL: "03",
    }
    node = kube.get("v1", "Node", plain)
    assert node is not None
    managers = {m["manager"] for m in node["metadata"]["managedFields"]}
    assert keys.GPU_AGENT_MANAGER in managers


def test_where_gfd_runs_the_labels_are_left_alone(
    kube: KubeApi, nodes: tuple[str, str], agent_kubeconfig: Path, tmp_path: Path
) -> None:
    _, gfd = nodes
    before = kube.get("v1", "Node", gfd)
    assert before is not None
    with _agent(gfd, agent_kubeconfig, tmp_path) as url:
        first = _until(lambda: _sample(url), "the first sample")
        # several rounds (0.5 s each) after the first, each of which would have labelled the node
        _until(lambda: (s := _sample(url)) is not None and s.time > first.time + 2.0, "later samples")
    after = kube.get("v1", "Node", gfd)
    assert after is not None
    assert after["metadata"]["labels"] == before["metadata"]["labels"]
    managers = {m["manager"] for m in after["metadata"]["managedFields"]}
    assert keys.GPU_AGENT_MANAGER not in managers


async def test_the_publisher_writes_only_what_changed(
    kube: KubeApi, nodes: tuple[str, str], kubeconfig: Path
) -> None:
    plain, _ = nodes
    gpu = GPUSample(index=0, name="NVIDIA L40S", memory_total_bytes=46068 * 1024 * 1024)
    state = NVMLState(available=True, driver_version="550.54.15")
    sample = NodeSample(node=plain, time=0.0, nvml=state, gpus=[gpu])
    writes: list[tuple[str, str]] = []
    client = await Kube.connect(
        field_manager=keys.GPU_AGENT_MANAGER,
        kubeconfig=str(kubeconfig),
        on_write=lambda verb, path: writes.append((verb, path)),
    )
    try:
        publisher = Publisher(client, plain, recheck_seconds=3600)
        assert await publisher.publish(sample) == "patched"
        assert writes == [("PATCH", f"/api/v1/nodes/{plain}")]
        assert await publisher.publish(sample) == "skipped"  # not even read
        publisher.recheck_seconds = 0
        assert await publisher.publish(sample) == "unchanged"  # read, nothing to write
        assert len(writes) == 1
        # someone removed a label: put back at the next check, the others untouched
        kube.request(
            "PATCH",
            f"/api/v1/nodes/{plain}",
            json={"metadata": {"labels": {telemetry.GPU_MEMORY_LABEL: None}}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert await publisher.publish(sample) == "patched"
        assert _labels(kube, plain)[telemetry.GPU_MEMORY_LABEL] == "46068"
        # NVML gone: nothing written, nothing removed
        gone = sample.model_copy(update={"nvml": NVMLState(available=False, error="x"), "gpus": []})
        assert await publisher.publish(gone) == "no-gpus"
        assert len(writes) == 2
        assert _labels(kube, plain)[telemetry.GPU_PRODUCT_LABEL] == "NVIDIA-L40S"
    finally:
        await client.close()

"""The process runtime as a node agent: registration, heartbeats, and cleanup after a hard kill."""

from __future__ import annotations

import contextlib
import datetime
import os
import secrets
import signal
from pathlib import Path
from typing import Any

import pytest

from sparkrun_testbed import netns, plane, process_runtime, topology
from sparkrun_testbed.kubeapi import ApiError, KubeApi
from tests.process.helpers import (
    container,
    marked_pids,
    pod,
    pod_spec,
    shell,
    wait_for,
    wait_pod,
)

pytestmark = pytest.mark.testbed


def _parse(stamp: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def test_process_nodes_register_themselves_and_heartbeat(kube: KubeApi, process_nodes: list[str]) -> None:
    for name in process_nodes:
        node = kube.get("v1", "Node", name)
        assert node is not None
        meta, status = node["metadata"], node["status"]
        assert topology.KWOK_NODE_ANNOTATION not in (meta.get("annotations") or {})  # KWOK keeps off
        assert meta["labels"][topology.PROCESS_RUNTIME_LABEL] == "process"
        assert {c["type"]: c["status"] for c in status["conditions"]}["Ready"] == "True"
        assert [a["type"] for a in status["addresses"]] == ["InternalIP"]
        assert status["daemonEndpoints"]["kubeletEndpoint"]["Port"] > 0
        assert status["allocatable"][topology.GPU_RESOURCE] == "8"
        assert node["spec"]["taints"] == [topology.PROCESS_TAINT]
        assert status["nodeInfo"]["kubeletVersion"].startswith("v1.")
    lease_name = process_nodes[0]
    first = kube.get("coordination.k8s.io/v1", "Lease", lease_name, namespace="kube-node-lease")
    assert first is not None
    assert first["spec"]["holderIdentity"] == lease_name
    assert first["metadata"]["ownerReferences"][0]["kind"] == "Node"

    def renewed() -> bool:
        lease = kube.get("coordination.k8s.io/v1", "Lease", lease_name, namespace="kube-node-lease") or {}
        return _parse(lease["spec"]["renewTime"]) > _parse(first["spec"]["renewTime"])

    wait_for(renewed, timeout=25, what="a lease renewal", interval=1.0)


def test_nothing_a_hard_killed_runtime_ran_survives_cleanup(
    testbed: plane.Testbed, kube: KubeApi, namespace: str, tmp_path: Path, pod_network: str
) -> None:
    """A runtime killed with SIGKILL cannot stop its pods; ``testbed down`` (cleanup) does."""
    node = f"proc-extra-{secrets.token_hex(3)}"
    state_dir = tmp_path / "state"
    daemon = process_runtime.launch(
        testbed.run_dir,
        [node],
        health_port=0,
        extra_args=[f"--state-dir={state_dir}"],
        log=tmp_path / "runtime.log",
    )
    try:
        wait_for(
            lambda: process_runtime.read_info(testbed.run_dir, state_dir=state_dir),
            timeout=30,
            what=f"the second runtime to start (log: {tmp_path / 'runtime.log'})",
        )
        mark = secrets.token_hex(8)
        spec: dict[str, Any] = pod_spec([shell("sleeper", "setsid sleep 600 & exec sleep 600")], mark=mark)
        spec["nodeName"] = node  # bound directly, as the scheduler would
        kube.create(pod("orphan-to-be", spec), namespace=namespace)
        wait_pod(
            kube, namespace, "orphan-to-be", lambda p: "running" in container(p, "sleeper").get("state", {})
        )
        wait_for(lambda: len(marked_pids(mark)) >= 2, timeout=10, what="the pod's two processes")

        record = netns.NetRecord.load(state_dir / "network.json")
        os.kill(daemon.pid, signal.SIGKILL)  # no SIGTERM first: the runtime cannot clean up
        wait_for(lambda: not daemon.running(), timeout=10, what="the runtime to die")
        assert len(marked_pids(mark)) >= 2  # orphans, as a killed kubelet leaves its containers
        process_runtime.cleanup(testbed.run_dir, state_dir=state_dir)
        wait_for(lambda: not marked_pids(mark), timeout=10, what="the orphans to be killed")
        if pod_network == "netns":
            assert record is not None
            prefix = f"{netns.NAME_PREFIX}{record.net_id}"
            assert not [n for n in netns.list_netns() if n.startswith(prefix)]
            assert netns.NetRecord.load(state_dir / "network.json") is None
    finally:
        daemon.stop(grace=0)
        process_runtime.cleanup(testbed.run_dir, state_dir=state_dir)
        # No kubelet will finish a graceful deletion on that node: delete at once.
        path = kube.resource_path("v1", "Pod", namespace=namespace, name="orphan-to-be")
        with contextlib.suppress(ApiError):
            kube.request("DELETE", path, json={"gracePeriodSeconds": 0})
        kube.delete("v1", "Node", node)

"""The chart installed on a testbed of its own, its components running as pods on process nodes.

Used by ``e2e/test_helm_pods.py``: a fresh testbed with three tainted process nodes and no CRDs
(the chart brings them), ``helm`` and ``kubectl`` against it, and what the tests read off the
install: component pods, the operator's peering, the processes' RSS, an inventory of every object
in the cluster (to see what ``helm uninstall`` leaves).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from sparkrun_testbed import binaries, plane, process_runtime
from sparkrun_testbed.kubeapi import KubeApi
from sparkrun_testbed.topology import PROCESS_TAINT, NodePool, Topology

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "helm" / "sparkrun-operator"
TESTBED_VALUES = REPO / "hack" / "testbed-values.yaml"
RELEASE, NAMESPACE = "sparkrun", "sparkrun-system"
COMPONENTS = ("operator", "shim", "gateway")
IN_CI = os.environ.get("CI", "").lower() == "true"
TOPOLOGY = Topology(pools=(NodePool(prefix="proc", count=3, process=True, taints=(PROCESS_TAINT,)),))


def missing(reason: str) -> None:
    """Skip outside CI; fail under CI=true, where every prerequisite must be present."""
    if IN_CI:
        pytest.fail(f"prerequisite missing under CI=true: {reason}", pytrace=False)
    pytest.skip(reason)


def wait_for(probe: Callable[[], T | None], *, timeout: float, what: str, interval: float = 0.25) -> T:
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            last = probe()
            if last:
                return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


@dataclass
class Cluster:
    """The testbed, an admin client, and the CLIs pointed at it."""

    testbed: plane.Testbed
    kube: KubeApi
    helm_bin: str
    kubectl_bin: str

    def run(
        self, *argv: str, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "KUBECONFIG": str(self.testbed.kubeconfig)}
        done = subprocess.run(
            argv, input=input, capture_output=True, text=True, env=env, timeout=180, check=False
        )
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr}{done.stdout}")
        return done

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run(self.helm_bin, *args, check=check)

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return self.run(self.kubectl_bin, *args, input=input, check=check)

    def can(self, account: str, *args: str) -> bool:
        user = f"--as=system:serviceaccount:{NAMESPACE}:{RELEASE}-{account}"
        return self.kubectl("auth", "can-i", user, *args, check=False).stdout.strip() == "yes"

    def pods(self, component: str) -> list[dict[str, Any]]:
        selector = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component={component}"
        items = self.kube.list_items("v1", "Pod", namespace=NAMESPACE, label_selector=selector)
        return [p for p in items if not p["metadata"].get("deletionTimestamp")]

    def logs(self, pod: str) -> str:
        return self.kubectl("logs", "-n", NAMESPACE, pod).stdout


def start_cluster(run_dir: Path) -> Cluster:
    """A testbed of three tainted process nodes and no CRDs; fails or skips without prerequisites."""
    try:
        bins = binaries.locate(REPO)
    except binaries.BinariesMissing as error:
        missing(str(error))
        raise
    if absent := bins.missing():
        missing(f"testbed binaries missing: {absent} (make testbed-bin)")
    helm_bin = bins.bin_dir / "helm"
    if not helm_bin.is_file():
        missing(f"no helm in {bins.bin_dir} (make testbed-bin)")
    kubectl_bin = Path(sys.executable).parent / "kubectl"
    testbed = plane.Testbed.start(run_dir, bins, plane.Options(topology=TOPOLOGY, crd_dirs=()))
    try:
        info = wait_for(lambda: process_runtime.read_info(testbed.run_dir), timeout=30, what="runtime.json")
        if info["network"] != "netns":
            missing("process-node pods need network namespaces (root, iproute2) to have addresses")
    except BaseException:
        testbed.stop()
        raise
    return Cluster(testbed, testbed.api(), str(helm_bin), str(kubectl_bin))


def ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def deployment_rolled(cluster: Cluster, component: str, replicas: int, old: Iterable[str] = ()) -> bool:
    """``replicas`` Ready pods of the component, none of them in ``old`` (pod uids), and no others."""
    pods = cluster.pods(component)
    uids = {p["metadata"]["uid"] for p in pods}
    return len(pods) == replicas and all(ready(p) for p in pods) and not uids & set(old)


def node_runtime(cluster: Cluster, pod: dict[str, Any]) -> str:
    node = cluster.kube.get("v1", "Node", pod["spec"]["nodeName"]) or {}
    return str(node["metadata"]["labels"].get(PROCESS_TAINT["key"], ""))


def peers(cluster: Cluster) -> dict[str, int]:
    """The live operator replicas in the ClusterKopfPeering: pod name (POD_ID) -> priority."""
    peering = cluster.kube.get("kopf.dev/v1", "ClusterKopfPeering", "sparkrun-operator") or {}
    return {peer: int(entry["priority"]) for peer, entry in (peering.get("status") or {}).items()}


def active(cluster: Cluster) -> str | None:
    """The replica kopf lets work: the highest priority among the live peers."""
    live = peers(cluster)
    return max(live, key=lambda peer: live[peer]) if live else None


def pod_rss_kib(pod_name: str) -> int:
    """VmRSS of the processes the process runtime started for ``pod_name`` (its HOSTNAME)."""
    needle = f"HOSTNAME={pod_name}".encode()
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            for line in (entry / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total


Key = tuple[str, str, str]  # (resource, namespace, name)


def inventory(cluster: Cluster) -> dict[Key, dict[str, Any]]:
    """Every listable object in the cluster except Events, keyed by resource, namespace and name."""
    names = cluster.kubectl("api-resources", "--verbs=list", "-o", "name").stdout.split()
    kinds = [n for n in names if n.split(".")[0] != "events"]
    listed = cluster.kubectl("get", ",".join(kinds), "-A", "-o", "json", "--show-kind")
    found: dict[Key, dict[str, Any]] = {}
    for item in json.loads(listed.stdout)["items"]:
        meta = item["metadata"]
        key = (f"{item['kind']}.{item['apiVersion']}", meta.get("namespace", ""), meta["name"])
        found[key] = item
    return found


def owned_closure(objects: dict[Key, dict[str, Any]], roots: Iterable[Key]) -> set[Key]:
    """``roots`` and every object whose owner references lead to one of them (Endpoints go with
    their Service, whose name they share)."""
    keep = set(roots)
    while True:
        uids = {objects[k]["metadata"]["uid"] for k in keep}
        services = {(k[1], k[2]) for k in keep if k[0].startswith("Service.")}
        more = {
            key
            for key, obj in objects.items()
            if key not in keep
            and (
                any(ref["uid"] in uids for ref in obj["metadata"].get("ownerReferences") or ())
                or (key[0].startswith("Endpoints.") and (key[1], key[2]) in services)
            )
        }
        if not more:
            return keep
        keep |= more

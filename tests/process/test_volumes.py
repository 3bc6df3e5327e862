"""Volumes and in-cluster API access of process-node pods (mount namespaces: netns mode only)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sparkrun_testbed.kubeapi import KubeApi
from tests.process.helpers import container, phase, pod, pod_spec, shell, wait_for, wait_pod

pytestmark = pytest.mark.testbed

IN_CLUSTER_CLIENT = """
import asyncio
from kubernetes_asyncio import client, config

async def main():
    config.load_incluster_config()
    namespace = open("/var/run/secrets/kubernetes.io/serviceaccount/namespace").read()
    async with client.ApiClient() as api:
        pods = await client.CoreV1Api(api).list_namespaced_pod(namespace)
        print("pods:", " ".join(sorted(p.metadata.name for p in pods.items)))

asyncio.run(main())
"""


def test_a_pod_talks_to_the_api_with_its_service_account_in_cluster(
    kube: KubeApi, kubectl: Any, namespace: str, netns_network: None
) -> None:
    kube.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "default-view"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
            "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": namespace}],
        },
        namespace=namespace,
    )
    had_secrets = Path("/run/secrets/kubernetes.io").exists()
    client = {"name": "client", "image": "python:3.11", "command": ["python3", "-c", IN_CLUSTER_CLIENT]}
    kube.create(pod("in-cluster", pod_spec([client])), namespace=namespace)
    done = wait_pod(kube, namespace, "in-cluster", lambda p: phase(p) in ("Succeeded", "Failed"), timeout=90)
    logs = kubectl("logs", "-n", namespace, "in-cluster").stdout
    assert phase(done) == "Succeeded", logs
    assert "pods: in-cluster" in logs
    # The token, CA and namespace were mounted in the pod's own mount namespace only.
    assert Path("/run/secrets/kubernetes.io").exists() == had_secrets
    mounts = done["spec"]["containers"][0]["volumeMounts"]
    assert any(m["mountPath"] == "/var/run/secrets/kubernetes.io/serviceaccount" for m in mounts)


def test_volumes_are_mounted_in_the_pod_only(
    kube: KubeApi, kubectl: Any, namespace: str, netns_network: None
) -> None:
    kube.create(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"greeting": "hello"}},
        namespace=namespace,
    )
    volumes = [
        {"name": "shared", "emptyDir": {}},
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}},
        {
            "name": "cfg",
            "configMap": {"name": "cfg", "items": [{"key": "greeting", "path": "words/greeting"}]},
        },
        {
            "name": "info",
            "downwardAPI": {"items": [{"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]},
        },
    ]
    writer = shell(
        "writer",
        "echo from-writer > /mnt/msg; sleep 600",
        volumeMounts=[{"name": "shared", "mountPath": "/mnt"}],
    )
    reader = shell(
        "reader",
        "until [ -f /mnt/msg ]; do sleep 0.1; done; cat /mnt/msg; "
        'echo "$(cat /run/cfg/words/greeting)"; echo "$(cat /run/info/name)"; '
        "grep '^sparkrun-emptydir /dev/shm ' /proc/mounts; touch /run/cfg/x 2>/dev/null || echo read-only; "
        "ls /no/such/dir 2>/dev/null || echo not-mounted",
        volumeMounts=[
            {"name": "shared", "mountPath": "/mnt"},
            {"name": "shm", "mountPath": "/dev/shm"},
            {"name": "cfg", "mountPath": "/run/cfg", "readOnly": True},
            {"name": "info", "mountPath": "/var/run/info"},
            {"name": "shared", "mountPath": "/no/such/dir"},
        ],
    )
    spec = pod_spec([writer, reader])
    spec["volumes"] = volumes
    kube.create(pod("mounted", spec), namespace=namespace)
    wait_pod(kube, namespace, "mounted", lambda p: "terminated" in container(p, "reader").get("state", {}))
    out = kubectl("logs", "-n", namespace, "mounted", "-c", "reader").stdout.splitlines()
    assert out[:3] == ["from-writer", "hello", "mounted"]
    assert "tmpfs" in out[3]
    assert "size=65536k" in out[3]
    assert out[4:] == ["read-only", "not-mounted"]
    assert not Path("/mnt/msg").exists()  # the host's /mnt is untouched

    def failed_mounts() -> list[str] | None:
        events = kube.list_items("v1", "Event", namespace=namespace)
        found = [e["message"] for e in events if e["reason"] == "FailedMount"]
        return found or None

    messages = " | ".join(wait_for(failed_mounts, timeout=20, what="FailedMount events"))
    assert "/no/such/dir does not exist on this machine" in messages


def test_a_container_waits_for_a_volume_whose_source_is_missing(
    kube: KubeApi, kubectl: Any, namespace: str, netns_network: None
) -> None:
    """As a kubelet: no start without the volume (the process would write onto the host's path)."""
    spec = pod_spec(
        [shell("reader", "cat /run/later/word", volumeMounts=[{"name": "later", "mountPath": "/run/later"}])]
    )
    spec["volumes"] = [{"name": "later", "configMap": {"name": "later"}}]
    kube.create(pod("waits", spec), namespace=namespace)

    def failed_mount() -> str | None:
        events = kube.list_items("v1", "Event", namespace=namespace)
        return next((e["message"] for e in events if e["reason"] == "FailedMount"), None)

    message = wait_for(failed_mount, timeout=30, what="a FailedMount event")
    assert message.startswith("Unable to attach or mount volumes: unmounted volumes=[later]: ")
    assert 'configmap "later" not found' in message
    waiting = kube.get("v1", "Pod", "waits", namespace=namespace)
    assert waiting is not None
    state = container(waiting, "reader").get("state", {})
    assert state.get("waiting", {}).get("reason") == "ContainerCreating"
    kube.create(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "later"}, "data": {"word": "now"}},
        namespace=namespace,
    )
    done = wait_pod(kube, namespace, "waits", lambda p: phase(p) in ("Succeeded", "Failed"), timeout=60)
    assert phase(done) == "Succeeded"
    assert kubectl("logs", "-n", namespace, "waits").stdout.strip() == "now"

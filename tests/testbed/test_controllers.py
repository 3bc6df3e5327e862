"""kube-controller-manager runs for real: Deployments roll out, garbage collection follows owners."""

from __future__ import annotations

from typing import Any

import pytest

from sparkrun_testbed.kubeapi import KubeApi

pytestmark = pytest.mark.testbed


def deployment(name: str, replicas: int) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "main", "image": "registry.invalid/none:0"}]},
            },
        },
    }


def test_deleting_an_owner_garbage_collects_its_children(kube: KubeApi, namespace: str) -> None:
    kube.apply(deployment("web", 3), namespace=namespace)

    def pods() -> list[dict[str, Any]]:
        return kube.list_items("v1", "Pod", namespace=namespace, label_selector="app=web")

    kube.wait(
        lambda: len([p for p in pods() if p["status"].get("phase") == "Running"]) == 3,
        timeout=60,
        what="3 running pods of Deployment web",
    )
    (replicaset,) = kube.list_items("apps/v1", "ReplicaSet", namespace=namespace, label_selector="app=web")
    assert replicaset["metadata"]["ownerReferences"][0]["kind"] == "Deployment"

    kube.delete("apps/v1", "Deployment", "web", namespace=namespace, propagation="Background")
    kube.wait(
        lambda: not kube.list_items("apps/v1", "ReplicaSet", namespace=namespace) and not pods(),
        timeout=60,
        what="the garbage collector to delete the ReplicaSet and its pods",
    )


def test_orphan_propagation_keeps_children(kube: KubeApi, namespace: str) -> None:
    owner = kube.create(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner"}, "data": {}},
        namespace=namespace,
    )
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner["metadata"]["uid"]}
    for name in ("child-a", "child-b"):
        kube.create(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "ownerReferences": [ref]}},
            namespace=namespace,
        )
    kube.delete("v1", "ConfigMap", "owner", namespace=namespace, propagation="Orphan")
    kube.wait(
        lambda: kube.get("v1", "ConfigMap", "owner", namespace=namespace) is None,
        timeout=30,
        what="owner deleted",
    )

    def orphaned(name: str) -> bool:
        child = kube.get("v1", "ConfigMap", name, namespace=namespace)
        return child is not None and not child["metadata"].get("ownerReferences")

    for name in ("child-a", "child-b"):
        kube.wait(
            lambda name=name: orphaned(name), timeout=30, what=f"the garbage collector to orphan {name}"
        )

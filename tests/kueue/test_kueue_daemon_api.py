"""Kueue through the daemon API, with the chart's RBAC (issue 32): ``plugins.k8s.kueue_status``
and ``plugins.k8s.setup_kueue`` over HTTP against Kueue v0.17.0 on the testbed, the chart value
``operator.rbac.kueueProvisioning`` off (a typed refusal naming it) and on (the queues Kueue
accepts; a workload in them admitted), and an InferenceCluster's ``queueName`` as its
``status.queue`` and ``QueueReady``.

The shim and the operator run as their ServiceAccounts with exactly the chart's RBAC
(``tests/shim/chart_rbac.py``); turning the value on adds the ClusterRole and binding that
``helm upgrade --set operator.rbac.kueueProvisioning=true`` would add, to the running release.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from sparkrun_operator.ops import catalog
from sparkrun_testbed.kubeapi import KubeApi
from sparkrun_testbed.kueue_run import Kueue
from sparkrun_testbed.plane import Testbed
from tests.operator.conftest import API, condition, get_workload, workload
from tests.shim.chart_rbac import render_rbac
from tests.shim.conftest import Daemon, start_daemon, stop_daemon

pytestmark = pytest.mark.testbed

KUEUE = "kueue.x-k8s.io/v1beta2"
VALUE = "operator.rbac.kueueProvisioning"
#: The names setup_kueue gives its ClusterQueue and LocalQueue.
QUEUE = "sparkrun"
TOPOLOGY = {"nodes": 1, "gpusPerNode": 4, "tensorParallel": 4}


@pytest.fixture(scope="module")
def daemon(
    request: pytest.FixtureRequest,
    kueue: Kueue,
    testbed: Testbed,
    crds: list[str],
    kube: KubeApi,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Daemon]:
    """A shim and an operator with the chart's default RBAC (the value off), Kueue running."""
    running = start_daemon(testbed, kube, tmp_path_factory.mktemp("shim"), chart_rbac=True)
    failed_before = request.session.testsfailed
    try:
        yield running
    finally:
        if request.session.testsfailed > failed_before:
            print(running.runner.logs())
        # What setup_kueue made, while Kueue still runs (its finalizers): the LocalQueue, the
        # ClusterQueue and the ResourceFlavors it names.
        for item in kube.list_items(API, "InferenceWorkload", namespace=running.namespace):
            kube.delete(API, "InferenceWorkload", item["metadata"]["name"], namespace=running.namespace)
        kube.delete(KUEUE, "LocalQueue", QUEUE, namespace=running.namespace)
        made = kube.get(KUEUE, "ClusterQueue", QUEUE)
        kube.delete(KUEUE, "ClusterQueue", QUEUE)
        for group in ((made or {}).get("spec") or {}).get("resourceGroups") or []:
            for flavor in group.get("flavors") or []:
                kube.delete(KUEUE, "ResourceFlavor", flavor["name"])
        stop_daemon(running)


def _run(daemon: Daemon, who: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """Run job ``name`` through its HTTP alias; the finished job."""
    op = catalog.load().get(name)
    assert op.kind == "job"
    assert op.http_path
    with daemon.http(who) as client:
        answer = client.post(op.http_path, json=arguments)
    assert answer.status_code == 202, (name, answer.text)
    job: dict[str, Any] = daemon.wait_job(answer.json()["job_id"], who, timeout=120)
    return job


def _succeeded(job: dict[str, Any]) -> Any:
    assert job["state"] == "succeeded", job
    return job["result"]


def _wait_active(kube: KubeApi, kind: str, namespace: str | None) -> dict[str, Any]:
    """Kueue's ``kind`` named ``sparkrun`` once Kueue says it is Active."""

    def probe() -> dict[str, Any] | None:
        found = kube.get(KUEUE, kind, QUEUE, namespace=namespace)
        return found if (condition(found, "Active") or {}).get("status") == "True" else None

    active: dict[str, Any] = kube.wait(probe, timeout=60, what=f"{kind} {QUEUE} Active")
    return active


def _grant_kueue_provisioning(daemon: Daemon) -> None:
    """What ``helm upgrade --set operator.rbac.kueueProvisioning=true`` adds: the ClusterRole
    ``<release>-operator-kueue`` and its binding (torn down with the release's RBAC)."""
    assert daemon.rbac is not None
    off = {(d["kind"], d["metadata"]["name"]) for d in render_rbac(daemon.namespace, daemon.rbac.release)}
    added = [
        d
        for d in render_rbac(daemon.namespace, daemon.rbac.release, [f"{VALUE}=true"])
        if (d["kind"], d["metadata"]["name"]) not in off
    ]
    assert sorted(d["kind"] for d in added) == ["ClusterRole", "ClusterRoleBinding"], added
    (role,) = [d for d in added if d["kind"] == "ClusterRole"]
    assert role["rules"] == [
        {
            "apiGroups": ["kueue.x-k8s.io"],
            "resources": ["resourceflavors", "clusterqueues", "localqueues"],
            "verbs": ["create", "patch"],
        }
    ]
    for doc in added:
        daemon.kube.apply(doc)
        made = (doc["apiVersion"], doc["kind"], None, doc["metadata"]["name"])
        if made not in daemon.rbac.outside:
            daemon.rbac.outside.append(made)


def _grant_queue_admin(daemon: Daemon) -> None:
    """The ``admin`` principal may write Kueue's cluster-scoped ResourceFlavors and ClusterQueues
    itself (a ClusterRole, as a cluster administrator has): setup_kueue's writes need it, the
    daemon's admin scope in one namespace does not suffice."""
    assert daemon.rbac is not None
    name = f"{daemon.namespace}-queue-admin"
    rbac = "rbac.authorization.k8s.io/v1"
    role = {
        "apiVersion": rbac,
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": [
            {
                "apiGroups": ["kueue.x-k8s.io"],
                "resources": ["resourceflavors", "clusterqueues"],
                "verbs": ["create", "patch"],
            }
        ],
    }
    binding = {
        "apiVersion": rbac,
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": "admin", "namespace": daemon.namespace}],
    }
    for doc in (role, binding):
        daemon.kube.apply(doc)
        made = (rbac, doc["kind"], None, name)
        if made not in daemon.rbac.outside:
            daemon.rbac.outside.append(made)


@pytest.fixture
def provisioned(daemon: Daemon, kube: KubeApi) -> str:
    """LocalQueue ``sparkrun`` in the daemon's namespace, made by setup_kueue (value on) unless
    the test above made it already; its name."""
    if kube.get(KUEUE, "LocalQueue", QUEUE, namespace=daemon.namespace) is None:
        _grant_queue_admin(daemon)
        _grant_kueue_provisioning(daemon)
        assert _succeeded(_run(daemon, "admin", "plugins.k8s.setup_kueue", {}))["provisioned"] is True
    _wait_active(kube, "LocalQueue", daemon.namespace)
    return QUEUE


def test_setup_kueue_refused_without_the_value_then_provisions_queues_kueue_admits_from(
    daemon: Daemon, kube: KubeApi
) -> None:
    status = _succeeded(_run(daemon, "operator", "plugins.k8s.kueue_status", {}))
    assert status == {"kueue_installed": True, "jobset_installed": True}

    preview = _succeeded(_run(daemon, "admin", "plugins.k8s.setup_kueue", {"dry_run": True}))
    assert (preview["provisioned"], preview["dry_run"]) == (False, True)
    assert preview["kueue_version"] == "installed"
    flavors = {f["name"]: f for f in preview["flavors"]}
    assert "nvidia-h100-80gb-hbm3" in flavors
    h100 = flavors["nvidia-h100-80gb-hbm3"]
    assert h100["node_labels"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert h100["gpu_quota"] >= 16  # gpu-0 and gpu-1, 8 each (and the process nodes')
    manifests = list(yaml.safe_load_all(preview["manifests_yaml"]))
    assert [m["kind"] for m in manifests][-2:] == ["ClusterQueue", "LocalQueue"]
    assert {m["apiVersion"] for m in manifests} == {KUEUE}
    assert kube.get(KUEUE, "ClusterQueue", QUEUE) is None

    # The daemon's admin scope in one namespace is no right to write cluster-scoped quota (the
    # ClusterQueue every namespace may feed, forced over what an administrator set): the
    # principal itself must be allowed to write ResourceFlavors and ClusterQueues.
    unauthorized = _run(daemon, "admin", "plugins.k8s.setup_kueue", {})
    assert unauthorized["state"] == "failed", unauthorized
    error = unauthorized["error"]["error"]
    assert error["type"] == "PermissionError", unauthorized
    assert error["attrs"]["reason"] == "cluster_not_authorized"
    assert "(cluster-scoped)" in unauthorized["error"]["detail"]
    assert kube.get(KUEUE, "ClusterQueue", QUEUE) is None
    _grant_queue_admin(daemon)

    # The chart's default: the operator may not write Kueue's queues; the refusal names the value.
    refused = _run(daemon, "admin", "plugins.k8s.setup_kueue", {})
    assert refused["state"] == "failed", refused
    error = refused["error"]["error"]
    assert error["type"] == "FeatureDisabled"
    assert error["attrs"]["reason"] == "not_granted"
    assert error["attrs"]["feature_flag"] == VALUE
    assert f"{VALUE}=true" in refused["error"]["detail"]
    assert "dry_run" in error["attrs"]["alternative"]
    assert not {f["metadata"]["name"] for f in kube.list_items(KUEUE, "ResourceFlavor")} & set(flavors)

    _grant_kueue_provisioning(daemon)
    done = _succeeded(_run(daemon, "admin", "plugins.k8s.setup_kueue", {}))
    assert (done["provisioned"], done["namespace"]) == (True, daemon.namespace)
    assert (done["cluster_queue"], done["local_queue"]) == (QUEUE, QUEUE)
    for name in flavors:
        assert kube.get(KUEUE, "ResourceFlavor", name) is not None
    cluster_queue = _wait_active(kube, "ClusterQueue", None)
    quotas = cluster_queue["spec"]["resourceGroups"][0]["flavors"]
    assert {q["name"] for q in quotas} == set(flavors)
    assert _wait_active(kube, "LocalQueue", daemon.namespace)["spec"]["clusterQueue"] == QUEUE
    # Applying again changes nothing and succeeds (server-side apply).
    assert _succeeded(_run(daemon, "admin", "plugins.k8s.setup_kueue", {}))["provisioned"] is True

    # A workload in that LocalQueue is admitted by Kueue; its status says so.
    kube.create(
        workload("queued", daemon.namespace, topology=TOPOLOGY, scheduling={"queueName": QUEUE}),
        namespace=daemon.namespace,
    )
    admitted = kube.wait(
        lambda: (
            (condition(found := get_workload(kube, daemon.namespace, "queued"), "Admitted") or {}).get(
                "status"
            )
            == "True"
            and ((found or {}).get("status") or {}).get("queue", {}).get("clusterQueue")
            and found
        ),
        timeout=120,
        what="the workload admitted through LocalQueue sparkrun",
    )
    queue = admitted["status"]["queue"]
    assert (queue["name"], queue["clusterQueue"], queue["admitted"]) == (QUEUE, QUEUE, True)
    assert condition(admitted, "Admitted")["reason"] == "AdmittedByKueue"  # type: ignore[index]


def _cluster(kube: KubeApi, name: str, queue: str) -> None:
    kube.apply(
        {
            "apiVersion": API,
            "kind": "InferenceCluster",
            "metadata": {"name": name},
            "spec": {"nodes": {"names": ["gpu-0", "gpu-1"]}, "queueName": queue},
        }
    )


def _queue_ready(kube: KubeApi, name: str, status: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        found = kube.get(API, "InferenceCluster", name)
        ready = condition(found, "QueueReady")
        return found if ready is not None and ready["status"] == status else None

    found: dict[str, Any] = kube.wait(probe, timeout=90, what=f"cluster {name} QueueReady {status}")
    return found


def test_an_inference_clusters_queue_is_observable(daemon: Daemon, kube: KubeApi, provisioned: str) -> None:
    """``queueName`` of a cluster: QueueReady True with Kueue's counts where the LocalQueue
    exists in the namespace of its workloads, False naming it where it does not."""
    tag = secrets.token_hex(3)
    ready, missing = f"kq-{tag}", f"kq-missing-{tag}"
    try:
        _cluster(kube, ready, provisioned)
        _cluster(kube, missing, "no-such-queue")
        # no workload on it yet: nothing to check
        unused = condition(_queue_ready(kube, ready, "Unknown"), "QueueReady")
        assert unused is not None
        assert unused["reason"] == "QueueUnused"
        for name, cluster in (("on-ready", ready), ("on-missing", missing)):
            kube.create(
                workload(name, daemon.namespace, topology=TOPOLOGY, cluster=cluster),
                namespace=daemon.namespace,
            )

        found = _queue_ready(kube, ready, "True")
        (local,) = found["status"]["queue"]["namespaces"]
        assert found["status"]["queue"]["name"] == QUEUE
        assert found["status"]["queue"]["kueueInstalled"] is True
        assert (local["namespace"], local["exists"], local["clusterQueue"]) == (daemon.namespace, True, QUEUE)
        # the workload on the cluster inherits its queueName and is admitted through it
        kube.wait(
            lambda: (
                (condition(get_workload(kube, daemon.namespace, "on-ready"), "Admitted") or {}).get("status")
                == "True"
            ),
            timeout=120,
            what="the cluster's workload admitted",
        )
        counted = kube.wait(
            lambda: (
                (got := kube.get(API, "InferenceCluster", ready))
                and got["status"]["queue"]["namespaces"][0]["admitted"] >= 1
                and got
            ),
            timeout=60,
            what="the admitted count in the cluster's status",
        )
        message = condition(counted, "QueueReady")["message"]  # type: ignore[index]
        assert f"LocalQueue {QUEUE} exists in 1 namespace(s), feeding ClusterQueue {QUEUE}" in message
        assert condition(counted, "QueueReady")["reason"] == "QueueExists"  # type: ignore[index]

        absent = _queue_ready(kube, missing, "False")
        (local,) = absent["status"]["queue"]["namespaces"]
        assert (local["namespace"], local["exists"]) == (daemon.namespace, False)
        refused = condition(absent, "QueueReady")
        assert refused is not None
        assert refused["reason"] == "QueueNotFound"
        assert "no-such-queue" in refused["message"]
        assert daemon.namespace in refused["message"]
        # and the workload on it says which queue it waits for
        lost = kube.wait(
            lambda: (
                (condition(got := get_workload(kube, daemon.namespace, "on-missing"), "Admitted") or {}).get(
                    "reason"
                )
                == "QueueNotFound"
                and got
            ),
            timeout=60,
            what="QueueNotFound on the workload of the cluster without its queue",
        )
        assert lost["status"]["phase"] == "Pending"
    finally:
        for name in ("on-ready", "on-missing"):
            kube.delete(API, "InferenceWorkload", name, namespace=daemon.namespace)
        for name in (ready, missing):
            kube.delete(API, "InferenceCluster", name)

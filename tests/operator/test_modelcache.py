"""The ModelCache controller end to end: the testbed, the real operator, download Jobs whose pods
run the real downloader (``huggingface_hub``) as processes against the local Hub, and workloads
that start from the cache and serve offline.

The Hub listens on the process nodes' ``InternalIP`` (the host side of the pods' network, the
one host address pods can reach). The testbed has no storage provisioner: each test makes a
``hostPath`` PersistentVolume pre-bound (``claimRef``) to the claim the cache creates.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sparkrun_testbed import topology
from sparkrun_testbed.hfhub import TOKEN, Hub, default_repos
from sparkrun_testbed.hfhub.fixtures import GATED, TAG, TINY
from sparkrun_testbed.kubeapi import KubeApi
from tests.operator.conftest import API, OperatorProcess, condition, jobsets, wait_condition, workload
from tests.process.helpers import MARK_ENV, cmdline_of, environ_of, marked_pids

Factory = Callable[..., OperatorProcess]
MOUNT = "/run/sparkrun-cache"
CLASS = "testbed-hostpath"
TOLERATE = [
    {
        "key": topology.PROCESS_TAINT["key"],
        "operator": "Equal",
        "value": topology.PROCESS_TAINT["value"],
        "effect": topology.PROCESS_TAINT["effect"],
    }
]
ON_PROCESS_NODES: dict[str, Any] = {
    "nodeSelector": {topology.PROCESS_RUNTIME_LABEL: "process"},
    "tolerations": TOLERATE,
}


def _node_ip(kube: KubeApi) -> str:
    nodes = kube.list_items("v1", "Node", label_selector=f"{topology.PROCESS_RUNTIME_LABEL}=process")
    assert nodes, "no process nodes on this testbed"
    return next(a["address"] for a in nodes[0]["status"]["addresses"] if a["type"] == "InternalIP")


@pytest.fixture
def pod_hub(kube: KubeApi, netns_network: None) -> Iterator[Hub]:
    with Hub(default_repos(lfs_mib=1, tokenizer=False), tokens=[TOKEN], host=_node_ip(kube)) as hub:
        yield hub


@pytest.fixture
def volumes(kube: KubeApi) -> Iterator[list[str]]:
    made: list[str] = []
    yield made
    for name in made:
        kube.delete("v1", "PersistentVolume", name)


def host_volume(kube: KubeApi, root: Path, namespace: str, claim: str, mode: str = "ReadWriteOnce") -> str:
    """A ``hostPath`` PersistentVolume at ``root``, pre-bound to claim ``claim`` of ``namespace``
    (``<namespace>-<claim>``, returned): the testbed has no provisioner."""
    name = f"{namespace}-{claim}"
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": name},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": [mode],
                "storageClassName": CLASS,
                "persistentVolumeReclaimPolicy": "Retain",
                "hostPath": {"path": str(root), "type": "DirectoryOrCreate"},
                "claimRef": {"namespace": namespace, "name": claim},
            },
        }
    )
    return name


def bound_claim(kube: KubeApi, root: Path, namespace: str, claim: str) -> str:
    """:func:`host_volume` (ReadWriteMany) and the claim bound to it; the volume's name."""
    name = host_volume(kube, root, namespace, claim, mode="ReadWriteMany")
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim, "namespace": namespace},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": CLASS,
                "resources": {"requests": {"storage": "1Gi"}},
                "volumeName": name,
            },
        }
    )
    return name


def _volume(
    kube: KubeApi, tmp_path: Path, namespace: str, claim: str, made: list[str], mode: str = "ReadWriteOnce"
) -> Path:
    path = tmp_path / f"pv-{claim}"
    made.append(host_volume(kube, path, namespace, claim, mode))
    return path


def _cache(
    name: str, namespace: str, hub: Hub, repo: str, revision: str, mode: str = "ReadWriteOnce", **source: Any
) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "ModelCache",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "source": {"huggingFace": {"repo": repo, "revision": revision, "endpoint": hub.url, **source}},
            "storage": {"create": {"size": "1Gi", "storageClassName": CLASS, "accessModes": [mode]}},
            "verify": "sha256",
            "download": ON_PROCESS_NODES,
        },
    }


def _get(kube: KubeApi, namespace: str, name: str) -> dict[str, Any] | None:
    return kube.get(API, "ModelCache", name, namespace=namespace)


def _wait_phase(kube: KubeApi, namespace: str, name: str, phase: str, timeout: float = 120) -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        obj = _get(kube, namespace, name)
        return obj if obj and (obj.get("status") or {}).get("phase") == phase else None

    last: list[Any] = []

    def check() -> dict[str, Any] | None:
        obj = ready()
        last[:] = [_get(kube, namespace, name)]
        return obj

    try:
        return kube.wait(check, timeout=timeout, what=f"ModelCache {name} {phase}")
    except Exception as error:
        raise AssertionError(
            f"{error}; last: {json.dumps(last[0].get('status') if last[0] else None)}"
        ) from error


def _operator(operator_factory: Factory, namespace: str) -> OperatorProcess:
    return operator_factory(namespace, "--cache-mount-path", MOUNT)


def test_download_gates_the_workload_which_serves_offline(
    kube: KubeApi, namespace: str, operator_factory: Factory, pod_hub: Hub, tmp_path: Path, volumes: list[str]
) -> None:
    operator = _operator(operator_factory, namespace)
    files = _volume(kube, tmp_path, namespace, "tiny", volumes)
    kube.apply(_cache("tiny", namespace, pod_hub, TINY, TAG))
    kube.apply(
        workload(
            "tiny-w",
            namespace,
            model={"name": TINY, "servedName": "tiny", "cacheRef": {"name": "tiny"}},
            scheduling=ON_PROCESS_NODES,
        )
    )
    # the workload waits, with no JobSet, until the cache is Ready
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        obj = _get(kube, namespace, "tiny")
        phase = (obj.get("status") or {}).get("phase") if obj else None
        if phase == "Ready":
            break
        assert phase != "Failed", obj["status"] if obj else None
        assert jobsets(kube, namespace, "tiny-w") == [], f"a JobSet before the cache is Ready ({phase})"
        time.sleep(0.5)
    cache = _wait_phase(kube, namespace, "tiny", "Ready", timeout=5)
    status = cache["status"]
    repo = pod_hub.repo(TINY)
    commit = repo.tags[TAG]
    assert status["resolvedRevision"] == commit  # the tag resolved to its commit
    tree = repo.tree(commit)
    assert status["manifest"] == {"files": len(tree), "totalBytes": sum(m.file.size for m in tree.values())}
    assert status["claims"] == ["tiny-w"]
    assert status["claimName"] == "tiny"
    assert condition(cache, "Ready")["observedGeneration"] == cache["metadata"]["generation"]  # type: ignore[index]
    assert (
        files / "hub" / "models--sparkrun-test--tiny-model" / "snapshots" / commit / "config.json"
    ).is_file()

    obj = wait_condition(kube, namespace, "tiny-w", "Ready", timeout=120)
    [js] = jobsets(kube, namespace, "tiny-w")
    pod = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    engine = pod["containers"][0]
    assert engine["args"][engine["args"].index("--revision") + 1] == commit
    assert engine["args"][0] == TINY
    assert {"name": "HF_HOME", "value": MOUNT} in engine["env"]
    assert {"name": "HF_HUB_OFFLINE", "value": "1"} in engine["env"]
    assert {"name": "model-cache", "mountPath": MOUNT, "readOnly": True} in engine["volumeMounts"]
    url = obj["status"]["endpoints"][0]["url"]
    answer = httpx.post(
        f"{url}/v1/chat/completions",
        json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text

    # deletion waits while the workload claims the cache, and proceeds with the force annotation
    kube.delete(API, "ModelCache", "tiny", namespace=namespace)
    blocked = kube.wait(
        lambda: (o := _get(kube, namespace, "tiny")) and condition(o, "DeletionBlocked") and o,
        timeout=30,
        what="DeletionBlocked",
    )
    assert "tiny-w" in condition(blocked, "DeletionBlocked")["message"]  # type: ignore[index]
    time.sleep(2)
    assert _get(kube, namespace, "tiny") is not None
    kube.request(
        "PATCH",
        kube.resource_path(API, "ModelCache", namespace=namespace, name="tiny"),
        json={"metadata": {"annotations": {"sparkrun.dev/force-delete": "true"}}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    kube.wait(lambda: _get(kube, namespace, "tiny") is None, timeout=30, what="the cache gone")
    assert operator.alive()


def test_gated_without_and_with_a_token(
    kube: KubeApi, namespace: str, operator_factory: Factory, pod_hub: Hub, tmp_path: Path, volumes: list[str]
) -> None:
    _operator(operator_factory, namespace)
    _volume(kube, tmp_path, namespace, "gated", volumes)
    _volume(kube, tmp_path, namespace, "gated-token", volumes)
    kube.apply(_cache("gated", namespace, pod_hub, GATED, "main"))
    failed = _wait_phase(kube, namespace, "gated", "Failed", timeout=120)
    ready = condition(failed, "Ready")
    assert ready is not None
    assert ready["reason"] == "AuthenticationRequired", ready
    assert "tokenSecretRef" in ready["message"]

    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "hf", "namespace": namespace},
            "stringData": {"token": TOKEN},
        }
    )
    kube.apply(_cache("gated-token", namespace, pod_hub, GATED, "main", tokenSecretRef={"name": "hf"}))
    cache = _wait_phase(kube, namespace, "gated-token", "Ready", timeout=120)
    assert cache["status"]["resolvedRevision"] == pod_hub.repo(GATED).head
    # the token is nowhere but in its Secret: not in status, Jobs, pods, events or logs
    seen = [json.dumps(cache)]
    for kind, api in (("Job", "batch/v1"), ("Pod", "v1"), ("Event", "v1")):
        seen.append(json.dumps(kube.list_items(api, kind, namespace=namespace)))
    for pod in kube.list_items("v1", "Pod", namespace=namespace, label_selector="sparkrun.dev/model-cache"):
        name = pod["metadata"]["name"]
        seen.append(kube.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}/log").text)
    assert len(seen) > 3
    assert all(TOKEN not in text for text in seen)


def test_a_killed_download_pod_resumes(
    kube: KubeApi, namespace: str, operator_factory: Factory, pod_hub: Hub, tmp_path: Path, volumes: list[str]
) -> None:
    _operator(operator_factory, namespace)
    _volume(kube, tmp_path, namespace, "resume", volumes)
    lfs = f"{TINY}/model.safetensors"
    size = pod_hub.repo(TINY).tree(pod_hub.repo(TINY).head)["model.safetensors"].file.size
    pod_hub.slow("*model.safetensors", rate=size / 8)  # about 8 s for the big file
    kube.apply(_cache("resume", namespace, pod_hub, TINY, "main"))

    def midway() -> list[dict[str, Any]] | None:
        served = pod_hub.bytes_served(lfs)
        pods = kube.list_items(
            "v1", "Pod", namespace=namespace, label_selector="sparkrun.dev/model-cache=resume"
        )
        running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
        return running if running and size / 4 < served < size * 3 / 4 else None

    [first] = kube.wait(midway, timeout=90, what="the download half way through the big file")
    status = (_get(kube, namespace, "resume") or {}).get("status") or {}
    assert status.get("phase") in ("Resolving", "Downloading"), status
    kube.request(
        "DELETE",
        f"/api/v1/namespaces/{namespace}/pods/{first['metadata']['name']}",
        json={"gracePeriodSeconds": 0},
    )
    pod_hub.clear_faults()
    cache = _wait_phase(kube, namespace, "resume", "Ready", timeout=120)
    assert cache["status"]["resolvedRevision"] == pod_hub.repo(TINY).head
    # the second pod continued the big file (Range) instead of fetching it again
    assert pod_hub.bytes_served(lfs) < size * 1.5, (pod_hub.bytes_served(lfs), size)
    pods = kube.list_items("v1", "Pod", namespace=namespace, label_selector="sparkrun.dev/model-cache=resume")
    [second] = [p for p in pods if p["metadata"]["name"] != first["metadata"]["name"]]
    log = kube.request("GET", f"/api/v1/namespaces/{namespace}/pods/{second['metadata']['name']}/log").text
    result = json.loads(next(line for line in log.splitlines() if '"event": "result"' in line))
    assert result["how"].get("resumed") == 1, result["how"]  # the orphaned .incomplete, continued


def test_an_unbound_claim_is_a_clear_condition(
    kube: KubeApi, namespace: str, operator_factory: Factory, pod_hub: Hub
) -> None:
    _operator(operator_factory, namespace)
    kube.apply(_cache("nowhere", namespace, pod_hub, TINY, "main"))  # no PersistentVolume for it

    def storage() -> dict[str, Any] | None:
        cond = condition(_get(kube, namespace, "nowhere"), "StorageReady")
        return cond if cond and cond["reason"] == "ClaimPending" and "not bound" in cond["message"] else None

    cond = kube.wait(storage, timeout=60, what="StorageReady=False ClaimPending")
    assert cond["status"] == "False"
    obj = _get(kube, namespace, "nowhere")
    assert obj is not None
    assert obj["status"]["phase"] == "Pending"
    assert "claim" in obj["status"]["message"]


def test_every_rank_of_a_multi_node_workload_reads_the_same_revision(
    kube: KubeApi, namespace: str, operator_factory: Factory, pod_hub: Hub, tmp_path: Path, volumes: list[str]
) -> None:
    _operator(operator_factory, namespace)
    _volume(kube, tmp_path, namespace, "shared", volumes, mode="ReadWriteMany")
    kube.apply(_cache("shared", namespace, pod_hub, TINY, "dev", mode="ReadWriteMany"))
    mark = f"mc-{namespace}"
    kube.apply(
        workload(
            "pair",
            namespace,
            model={"name": TINY, "servedName": "pair", "cacheRef": {"name": "shared"}},
            engine={"env": [{"name": MARK_ENV, "value": mark}]},
            topology={"nodes": 2, "gpusPerNode": 1, "tensorParallel": 2},
            scheduling=ON_PROCESS_NODES,
        )
    )
    cache = _wait_phase(kube, namespace, "shared", "Ready", timeout=120)
    commit = pod_hub.repo(TINY).branches["dev"]
    assert cache["status"]["resolvedRevision"] == commit
    assert cache["status"].get("nodeName") is None  # ReadWriteMany: any node
    wait_condition(kube, namespace, "pair", "Ready", timeout=150)
    ranks = [pid for pid in marked_pids(mark) if environ_of(pid).get(MARK_ENV) == mark]
    engines = [pid for pid in ranks if "--revision" in cmdline_of(pid)]
    assert len(engines) == 2, [cmdline_of(pid) for pid in ranks]
    for pid in engines:
        argv = cmdline_of(pid)
        assert argv[argv.index("--revision") + 1] == commit
        assert environ_of(pid)["HF_HOME"] == MOUNT
        assert environ_of(pid)["HF_HUB_OFFLINE"] == "1"

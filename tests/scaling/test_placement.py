"""Placement that checks GPU memory, with the real operator on the testbed (docs/autoscaling.md,
"Placement that checks GPU memory").

A pool of KWOK nodes labelled as GPU feature discovery would label 24 GiB GPUs
(``nvidia.com/gpu.memory=24576``), an InferenceCluster of them, and a Ready ModelCache of a
Qwen3-8B-sized model (its ``status`` written through the status subresource, as a finished
download Job would leave it: a real download of 16 GB is out of reach here; the downloader's
shape report is tested for real in ``test_shape_download.py``). A workload serving it with TP 1
needs about 21.9 GiB per GPU, more than 0.9 x 24 GiB: ``Scheduled=False`` ``InsufficientGPUMemory``
and no JobSet. Labelling one node as an 80 GB GPU clears it by itself (a Node event re-plans the
workload) and the JobSet is created.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sparkrun_operator.render import keys
from sparkrun_testbed import plane
from sparkrun_testbed.kubeapi import KubeApi
from sparkrun_testbed.topology import POOL_LABEL, NodePool, Topology
from tests.operator.conftest import (
    API,
    OperatorProcess,
    condition,
    get_workload,
    jobsets,
    wait_condition,
    workload,
)

pytestmark = pytest.mark.testbed

Factory = Callable[..., OperatorProcess]
MERGE = {"Content-Type": "application/merge-patch+json"}
MEMORY_LABEL = "nvidia.com/gpu.memory"
TAINT_KEY = "test.sparkrun.dev/fit"
QWEN3_8B_SHAPE = {
    "numHiddenLayers": 36,
    "numKeyValueHeads": 8,
    "headDim": 128,
    "dtype": "bfloat16",
    "dtypeBytes": 2,
    "maxPositionEmbeddings": 40960,
    "weightsBytes": 16_381_470_208,
}


@pytest.fixture
def pool(testbed: plane.Testbed, kube: KubeApi) -> Iterator[tuple[str, list[str]]]:
    """Two tainted KWOK nodes with two 24 GiB GPUs each and an InferenceCluster of them; removed
    afterwards (the testbed is shared by the session)."""
    tag = f"fit-{secrets.token_hex(3)}"
    nodes = NodePool(
        prefix=tag,
        count=2,
        gpus=2,
        gpu_product="NVIDIA-A10",
        labels={MEMORY_LABEL: "24576", POOL_LABEL: tag},
        taints=({"key": TAINT_KEY, "value": tag, "effect": "NoSchedule"},),
    )
    names: list[str] = []
    try:  # NB: before the nodes: whatever was made is removed when a later step fails
        names = testbed.create_nodes(Topology(pools=(nodes,)))
        kube.apply(
            {
                "apiVersion": API,
                "kind": "InferenceCluster",
                "metadata": {"name": tag},
                "spec": {
                    "nodes": {"selector": {"matchLabels": {POOL_LABEL: tag}}},
                    "tolerations": [
                        {"key": TAINT_KEY, "operator": "Equal", "value": tag, "effect": "NoSchedule"}
                    ],
                },
            }
        )
        yield tag, names
    finally:
        kube.delete(API, "InferenceCluster", tag)
        for name in names:
            kube.delete("v1", "Node", name)


def ready_cache(kube: KubeApi, namespace: str, name: str, *, operator_running: bool = False) -> None:
    """A ModelCache whose download finished: Ready, with its manifest and the model's shape.

    With an operator already running (``operator_running``), its first pass over the new cache
    (planned from the object without a status) must have written before the Ready status is:
    written after it, that pass's status would replace the Ready one (it nulls what it lacks)."""
    kube.apply(
        {
            "apiVersion": API,
            "kind": "ModelCache",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "source": {"huggingFace": {"repo": "Qwen/Qwen3-8B"}},
                "storage": {"claimName": "models", "path": "/hub"},
            },
        }
    )
    status = {
        "phase": "Ready",
        "resolvedRevision": "b" * 40,
        "manifest": {"files": 12, "totalBytes": 16_400_000_000},
        "modelShape": QWEN3_8B_SHAPE,
        "accessModes": ["ReadWriteMany"],
    }
    path = kube.resource_path(API, "ModelCache", namespace=namespace, name=name) + "/status"
    if not operator_running:
        kube.request("PATCH", path, json={"status": status}, headers=MERGE)
        return
    settle_ready_cache(kube, namespace, name, path, status)


def _cache_state(kube: KubeApi, namespace: str, name: str) -> tuple[str | None, list[str]]:
    """The cache's phase and the names of its download Jobs."""
    cache = kube.get(API, "ModelCache", name, namespace=namespace) or {}
    jobs = kube.list_items(
        "batch/v1", "Job", namespace=namespace, label_selector=f"{keys.LABEL_MODEL_CACHE}={name}"
    )
    return (cache.get("status") or {}).get("phase"), [j["metadata"]["name"] for j in jobs]


def settle_ready_cache(kube: KubeApi, namespace: str, name: str, path: str, status: dict[str, Any]) -> None:
    """Make a running operator keep the Ready status: its planner keeps a Ready cache only while
    no download Job exists (plan/modelcache.py), and its first pass over the new cache made one.
    Delete the Jobs and write Ready until both hold for two seconds (a pass that raced the writes
    made a Job again or wrote its own phase: then once more). Bounded: 20 tries."""
    for _ in range(20):
        for job in _cache_state(kube, namespace, name)[1]:
            kube.delete("batch/v1", "Job", job, namespace=namespace)
        kube.request("PATCH", path, json={"status": status}, headers=MERGE)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and _cache_state(kube, namespace, name) == ("Ready", []):
            time.sleep(0.2)
        if time.monotonic() >= deadline:
            return
    raise AssertionError(
        f"the operator did not keep ModelCache {name} Ready: {_cache_state(kube, namespace, name)}"
    )


def _too_big(kube: KubeApi, namespace: str, operator_factory: Factory, cluster: str) -> None:
    """Workload ``big``: Qwen3-8B from ModelCache ``qwen3-8b`` at its full context, on ``cluster``
    (24 GiB GPUs: too small), the operator serving ``namespace``."""
    ready_cache(kube, namespace, "qwen3-8b")
    operator_factory(namespace)
    kube.apply(
        workload(
            "big",
            namespace,
            cluster=cluster,
            model={"name": "Qwen/Qwen3-8B", "cacheRef": {"name": "qwen3-8b"}},
        )
    )


def test_a_model_too_large_for_the_pool_waits_with_a_reason_until_a_bigger_node_joins(
    kube: KubeApi, namespace: str, operator_factory: Factory, pool: tuple[str, list[str]]
) -> None:
    cluster, names = pool
    _too_big(kube, namespace, operator_factory, cluster)
    obj = wait_condition(
        kube, namespace, "big", "Scheduled", "False", reason="InsufficientGPUMemory", timeout=90
    )
    message = condition(obj, "Scheduled")["message"]  # type: ignore[index]
    assert message.startswith("needs 21.9 GiB per GPU with TP 1 (weights 15.3 GiB + KV cache 5.6 GiB"), (
        message
    )
    assert f"nodes of InferenceCluster '{cluster}' have 24 GiB per GPU (0 of 2 fit)" in message
    assert condition(obj, "Ready")["reason"] == "InsufficientGPUMemory"  # type: ignore[index]
    assert condition(obj, "CacheReady")["status"] == "True"  # type: ignore[index]
    assert jobsets(kube, namespace, "big") == []

    # a bigger GPU joins the pool (here: a node relabelled): the Node event re-plans the workload
    # at once (20 s: well before the drift pass, 60 s +-10% after the operator started)
    path = kube.resource_path("v1", "Node", name=names[1])
    kube.request("PATCH", path, json={"metadata": {"labels": {MEMORY_LABEL: "81559"}}}, headers=MERGE)
    started = time.monotonic()
    created = kube.wait(
        lambda: jobsets(kube, namespace, "big") or None, timeout=20, what="the JobSet once a node fits"
    )
    print(f"JobSet {time.monotonic() - started:.1f} s after the node was relabelled")
    assert len(created) == 1

    def cleared() -> dict[str, Any] | None:
        current = get_workload(kube, namespace, "big")
        cond = condition(current, "Scheduled")
        return current if cond is not None and cond["reason"] != "InsufficientGPUMemory" else None

    kube.wait(cleared, timeout=30, what="Scheduled no longer InsufficientGPUMemory")


def test_a_spec_that_fits_clears_the_condition(
    kube: KubeApi, namespace: str, operator_factory: Factory, pool: tuple[str, list[str]]
) -> None:
    cluster, _ = pool
    _too_big(kube, namespace, operator_factory, cluster)
    wait_condition(kube, namespace, "big", "Scheduled", "False", reason="InsufficientGPUMemory", timeout=90)
    assert jobsets(kube, namespace, "big") == []
    # TP 2 halves the weights and the KV cache per GPU: 11.4 GiB fits in 21.6
    path = kube.resource_path(API, "InferenceWorkload", namespace=namespace, name="big")
    topology = {"gpusPerNode": 2, "tensorParallel": 2}
    kube.request("PATCH", path, json={"spec": {"topology": topology}}, headers=MERGE)
    created = kube.wait(
        lambda: jobsets(kube, namespace, "big") or None, timeout=45, what="the JobSet with TP 2"
    )
    assert len(created) == 1

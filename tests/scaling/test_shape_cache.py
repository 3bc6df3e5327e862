"""The model's shape end to end: a real ModelCache download Job (its pod runs the real downloader
as a process on a process node, against the local Hub), ``status.modelShape`` from the Job's
result line, and the memory fit of a workload serving from that cache: with the model's own
context (2^20 tokens: a 144 GiB KV cache) no 24 GiB node fits (``InsufficientGPUMemory``, no
JobSet); with ``maxModelLen: 4096`` it does."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkrun_testbed import topology
from sparkrun_testbed.hfhub import Hub, Repo, generated
from sparkrun_testbed.kubeapi import KubeApi
from tests.operator.conftest import API, OperatorProcess, condition, jobsets, wait_condition, workload
from tests.operator.test_modelcache import CLASS, MOUNT, ON_PROCESS_NODES, host_volume
from tests.scaling.test_placement import pool as pool  # the fixture

pytestmark = pytest.mark.testbed

Factory = Callable[..., OperatorProcess]
REPO_ID = "sparkrun-test/long-context"
CONFIG = {
    "architectures": ["Qwen3ForCausalLM"],
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "torch_dtype": "bfloat16",
    "max_position_embeddings": 1 << 20,
}
MERGE = {"Content-Type": "application/merge-patch+json"}


@pytest.fixture
def pod_hub(kube: KubeApi, netns_network: None) -> Iterator[Hub]:
    nodes = kube.list_items("v1", "Node", label_selector=f"{topology.PROCESS_RUNTIME_LABEL}=process")
    assert nodes, "no process nodes on this testbed"
    address = next(a["address"] for a in nodes[0]["status"]["addresses"] if a["type"] == "InternalIP")
    files = {"config.json": json.dumps(CONFIG).encode(), "model.safetensors": generated(1 << 20, "long")}
    with Hub([Repo(REPO_ID, files)], host=address) as hub:
        yield hub


def test_a_real_download_reports_the_shape_and_the_fit_uses_it(
    kube: KubeApi,
    namespace: str,
    operator_factory: Factory,
    pod_hub: Hub,
    tmp_path: Path,
    pool: tuple[str, list[str]],
) -> None:
    cluster, _ = pool
    volume = host_volume(kube, tmp_path / "pv", namespace, "long", "ReadWriteMany")
    try:
        operator_factory(namespace, "--cache-mount-path", MOUNT)
        kube.apply(
            {
                "apiVersion": API,
                "kind": "ModelCache",
                "metadata": {"name": "long", "namespace": namespace},
                "spec": {
                    "source": {"huggingFace": {"repo": REPO_ID, "endpoint": pod_hub.url}},
                    "storage": {
                        "create": {"size": "1Gi", "storageClassName": CLASS, "accessModes": ["ReadWriteMany"]}
                    },
                    "download": ON_PROCESS_NODES,
                },
            }
        )

        def ready() -> dict[str, Any] | None:
            obj = kube.get(API, "ModelCache", "long", namespace=namespace)
            phase = ((obj or {}).get("status") or {}).get("phase")
            assert phase != "Failed", obj
            return obj if phase == "Ready" else None

        cache = kube.wait(ready, timeout=180, what="ModelCache long Ready")
        assert cache["status"]["modelShape"] == {
            "numHiddenLayers": 36,
            "numKeyValueHeads": 8,
            "headDim": 128,
            "dtype": "bfloat16",
            "dtypeBytes": 2,
            "maxPositionEmbeddings": 1 << 20,
            "weightsBytes": 1 << 20,
        }

        model = {"name": REPO_ID, "cacheRef": {"name": "long"}}
        kube.apply(workload("long-w", namespace, cluster=cluster, model=model))
        obj = wait_condition(
            kube, namespace, "long-w", "Scheduled", "False", reason="InsufficientGPUMemory", timeout=90
        )
        message = condition(obj, "Scheduled")["message"]  # type: ignore[index]
        assert message.startswith("needs 145 GiB per GPU with TP 1 (weights 0 GiB + KV cache 144 GiB"), (
            message
        )
        assert jobsets(kube, namespace, "long-w") == []

        path = kube.resource_path(API, "InferenceWorkload", namespace=namespace, name="long-w")
        kube.request("PATCH", path, json={"spec": {"engine": {"maxModelLen": 4096}}}, headers=MERGE)
        kube.wait(lambda: jobsets(kube, namespace, "long-w") or None, timeout=45, what="the JobSet at 4096")
    finally:
        kube.delete("v1", "PersistentVolume", volume)

"""What a workload depends on, against the testbed: InferenceCluster status and placement,
Recipe status and serving a recipe (a new recipe revision rolls out; a pinned revision holds),
and a ModelCache that gates the JobSets until it is Ready.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sparkrun_operator.recipe import identity as recipe_identity
from sparkrun_testbed.kubeapi import KubeApi
from tests.operator.conftest import API, OperatorProcess, condition, jobsets, wait_condition, workload

Factory = Callable[..., OperatorProcess]


def _leader_spec(js: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    return spec


@pytest.fixture
def cluster_name(kube: KubeApi, namespace: str) -> Iterator[str]:
    name = f"pool-{namespace}"[:63].rstrip("-")
    yield name
    kube.delete(API, "InferenceCluster", name)


def test_cluster_status_and_placement(
    kube: KubeApi, namespace: str, cluster_name: str, operator_factory: Factory
) -> None:
    operator_factory(namespace)
    kube.apply(
        {
            "apiVersion": API,
            "kind": "InferenceCluster",
            "metadata": {"name": cluster_name},
            "spec": {"nodes": {"names": ["gpu-0", "gpu-1", "gpu-9"]}, "minReadyNodes": 2},
        }
    )

    def cluster_status() -> dict[str, Any] | None:
        obj = kube.get(API, "InferenceCluster", cluster_name)
        ready = condition(obj, "Ready")
        return obj if ready is not None and ready["status"] == "True" else None

    obj = kube.wait(cluster_status, timeout=60, what="the cluster Ready")
    status = obj["status"]
    assert [n["name"] for n in status["nodes"]] == ["gpu-0", "gpu-1"]
    assert (status["totals"]["nodes"], status["totals"]["readyNodes"]) == (2, 2)
    assert status["totals"]["gpus"]["allocatable"] == 16
    assert status["gpuProduct"] == "NVIDIA-H100-80GB-HBM3"
    degraded = condition(obj, "Degraded")
    assert degraded is not None
    assert (degraded["status"], degraded["reason"]) == ("True", "NodesMissing")
    assert "gpu-9" in degraded["message"]

    kube.apply(
        workload(
            "placed",
            namespace,
            cluster=cluster_name,
            topology={"nodes": 1, "gpusPerNode": 2, "tensorParallel": 2},
        )
    )
    wait_condition(kube, namespace, "placed", "Ready", timeout=90)
    pod = _leader_spec(jobsets(kube, namespace, "placed")[0])
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert terms == [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        for node in ("gpu-0", "gpu-1", "gpu-9")
    ]

    def accounted() -> dict[str, Any] | None:
        current = kube.get(API, "InferenceCluster", cluster_name) or {}
        nodes = (current.get("status") or {}).get("nodes") or []
        hosting = [n for n in nodes if f"{namespace}/placed" in n.get("workloads", [])]
        return hosting[0] if hosting and hosting[0]["gpus"]["allocated"] >= 2 else None

    node = kube.wait(accounted, timeout=60, what="the cluster to account the workload's GPUs")
    assert node["gpus"]["free"] == node["gpus"]["allocatable"] - node["gpus"]["allocated"]

    # a workload naming a cluster that does not exist says so
    kube.apply(workload("lost", namespace, cluster="no-such-cluster"))
    obj = wait_condition(kube, namespace, "lost", "Scheduled", "False", reason="ClusterNotFound", timeout=60)
    assert "no-such-cluster" in condition(obj, "Scheduled")["message"]  # type: ignore[index]
    assert jobsets(kube, namespace, "lost") == []


RECIPE_SPEC: dict[str, Any] = {
    "model": "Qwen/Qwen3-8B",
    "runtime": "vllm",
    "container": "vllm/vllm-openai:v0.11.2",
    "defaults": {"tensor_parallel": 2, "max_model_len": 4096, "served_model_name": "qwen3-8b"},
    "env": {"NCCL_CUMEM_ENABLE": "0"},
}


def _recipe(namespace: str, **defaults: Any) -> dict[str, Any]:
    spec = {**RECIPE_SPEC, "defaults": {**RECIPE_SPEC["defaults"], **defaults}}
    return {
        "apiVersion": API,
        "kind": "Recipe",
        "metadata": {"name": "qwen3-8b", "namespace": namespace},
        "spec": spec,
    }


def _recipe_revision(doc: dict[str, Any]) -> str:
    from sparkrun_operator.api.recipe import RecipeSpec

    return recipe_identity.recipe_revision(RecipeSpec.model_validate(doc["spec"]).to_v2())


def test_recipe_status_and_serving_a_recipe(kube: KubeApi, namespace: str, operator_factory: Factory) -> None:
    operator_factory(namespace)
    recipe = _recipe(namespace)
    kube.apply(recipe)

    def valid() -> dict[str, Any] | None:
        obj = kube.get(API, "Recipe", "qwen3-8b", namespace=namespace)
        cond = condition(obj, "Valid")
        return obj if cond is not None and cond["status"] == "True" else None

    obj = kube.wait(valid, timeout=60, what="the recipe Valid")
    assert obj["status"]["revision"] == _recipe_revision(recipe)
    assert len(obj["status"]["intentId"]) == 16

    kube.apply(workload("served", namespace, model=None, recipe={"name": "qwen3-8b"}))
    wl = wait_condition(kube, namespace, "served", "Ready", timeout=90)
    assert wl["status"]["recipeRevision"] == obj["status"]["revision"]
    assert condition(wl, "RecipeResolved")["status"] == "True"  # type: ignore[index]
    leader = _leader_spec(jobsets(kube, namespace, "served")[0])["containers"][0]
    assert leader["image"] == "vllm/vllm-openai:v0.11.2"
    args = leader["args"]
    assert args[0] == "Qwen/Qwen3-8B"
    assert args[args.index("--served-model-name") + 1] == "qwen3-8b"
    assert args[args.index("--tensor-parallel-size") + 1] == "2"
    assert {"name": "NCCL_CUMEM_ENABLE", "value": "0"} in leader["env"]
    first = wl["status"]["revision"]

    # a new recipe revision rolls out to workloads that follow the recipe
    kube.apply(_recipe(namespace, max_model_len=8192))
    wl = wait_condition(
        kube,
        namespace,
        "served",
        "Ready",
        timeout=120,
        extra=lambda o: o["status"]["revision"] != first and o["status"]["phase"] == "Running",
    )
    leader = _leader_spec(jobsets(kube, namespace, "served")[0])["containers"][0]
    assert leader["args"][leader["args"].index("--max-model-len") + 1] == "8192"

    # a workload pinned to another revision holds and says why
    kube.apply(workload("pinned", namespace, model=None, recipe={"name": "qwen3-8b", "revision": "0" * 12}))
    obj = wait_condition(
        kube, namespace, "pinned", "RecipeResolved", "False", reason="RecipeRevisionMismatch"
    )
    assert "0" * 12 in condition(obj, "RecipeResolved")["message"]  # type: ignore[index]
    assert jobsets(kube, namespace, "pinned") == []

    # an invalid recipe is reported on the recipe
    bad = _recipe(namespace)
    bad["metadata"]["name"] = "broken"
    bad["spec"]["runtime"] = "sglang"
    kube.apply(bad)

    def invalid() -> dict[str, Any] | None:
        current = kube.get(API, "Recipe", "broken", namespace=namespace)
        cond = condition(current, "Valid")
        return current if cond is not None and cond["status"] == "False" else None

    broken = kube.wait(invalid, timeout=60, what="the broken recipe reported")
    assert broken["status"]["issues"][0]["field"] == "runtime"


def test_cache_gates_the_jobsets(kube: KubeApi, namespace: str, operator_factory: Factory) -> None:
    operator_factory(namespace)
    kube.apply(
        {
            "apiVersion": API,
            "kind": "ModelCache",
            "metadata": {"name": "qwen-cache", "namespace": namespace},
            "spec": {
                "source": {"huggingFace": {"repo": "Qwen/Qwen3-0.6B"}},
                "storage": {"claimName": "models", "path": "/hub"},
            },
        }
    )
    kube.apply(
        workload("cached", namespace, model={"name": "Qwen/Qwen3-0.6B", "cacheRef": {"name": "qwen-cache"}})
    )
    obj = wait_condition(kube, namespace, "cached", "CacheReady", "False", reason="CacheNotReady", timeout=60)
    assert condition(obj, "Ready")["reason"] == "WaitingForCache"  # type: ignore[index]
    assert jobsets(kube, namespace, "cached") == []

    # the ModelCache controller says why: the claim does not exist (a real download to Ready and
    # a workload serving from it: tests/operator/test_modelcache.py)
    def storage() -> dict[str, Any] | None:
        cache = kube.get(API, "ModelCache", "qwen-cache", namespace=namespace)
        return condition(cache, "StorageReady")

    cond = kube.wait(storage, timeout=30, what="StorageReady")
    assert cond["status"] == "False"
    assert cond["reason"] == "ClaimNotFound"
    assert "models" in cond["message"]
    assert jobsets(kube, namespace, "cached") == []

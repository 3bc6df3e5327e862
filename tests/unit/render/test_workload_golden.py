"""Golden files for the JobSets and Service of a workload (``render/workload.py``).

Each case renders every replica's JobSet plus the Service and compares the YAML text with
``golden/<case>.yaml``. Run with ``UPDATE_GOLDEN=1`` to rewrite the goldens after an intended
change, then review the diff: it is exactly what changes for users' pods.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrun_operator.api.meta import LabelSelector, LabelSelectorRequirement, Toleration
from sparkrun_operator.api.recipe import RecipeSpec
from sparkrun_operator.api.workload import InferenceWorkloadSpec
from sparkrun_operator.recipe.resolve import resolve
from sparkrun_operator.render.workload import (
    CacheMount,
    Owner,
    Placement,
    ServingInputs,
    render_jobset,
    render_service,
)

GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"
NS = "serving"
OWNER_UID = "6f0c2a3e-0000-4000-8000-000000000001"


def _spec(doc: dict[str, Any]) -> InferenceWorkloadSpec:
    return InferenceWorkloadSpec.model_validate(doc)


def _inputs(
    doc: dict[str, Any],
    *,
    recipe: RecipeSpec | None = None,
    placement: Placement | None = None,
    cache: CacheMount | None = None,
) -> tuple[InferenceWorkloadSpec, ServingInputs]:
    spec = _spec(doc)
    resolution = resolve(workload=spec, recipe=recipe)
    assert resolution.spec is not None, resolution.issues
    return spec, ServingInputs(
        spec=resolution.spec, scheduling=spec.scheduling, placement=placement, cache=cache
    )


def _render(
    name: str,
    doc: dict[str, Any],
    *,
    recipe: RecipeSpec | None = None,
    placement: Placement | None = None,
    cache: CacheMount | None = None,
) -> list[dict[str, Any]]:
    spec, inputs = _inputs(doc, recipe=recipe, placement=placement, cache=cache)
    owner = Owner(name=name, uid=OWNER_UID)
    suspend = spec.state == "Stopped"
    docs = [
        render_jobset(namespace=NS, workload=name, inputs=inputs, replica=i, suspend=suspend, owner=owner)
        for i in range(spec.replicas)
    ]
    docs.append(render_service(namespace=NS, workload=name, owner=owner))
    return docs


QWEN = {"name": "Qwen/Qwen3-0.6B", "revision": "c1899de289a04d12100db370d81485cdf75e47ca"}

RECIPE = RecipeSpec.model_validate(
    {
        "model": "Qwen/Qwen3-8B",
        "modelRevision": "b968826d9c46dd6066d109eabc6255188de91218",
        "runtime": "vllm",
        "container": "vllm/vllm-openai:v0.11.2",
        "minNodes": 1,
        "maxNodes": 2,
        "defaults": {
            "port": 8000,
            "tensor_parallel": 2,
            "gpu_memory_utilization": 0.9,
            "max_model_len": 32768,
            "served_model_name": "qwen3-8b",
            "kv_cache_dtype": "fp8",
            "enable_prefix_caching": False,
            "trust_remote_code": True,
        },
        "env": {"NCCL_CUMEM_ENABLE": "0"},
    }
)

RECIPE_TEMPLATE = RecipeSpec.model_validate(
    {
        "model": "Qwen/Qwen3-30B-A3B",
        "runtime": "vllm",
        "container": "vllm/vllm-openai:v0.11.2",
        "minNodes": 2,
        "defaults": {"port": 9000, "tensor_parallel": 8, "pipeline_parallel": 2, "max_num_seqs": 64},
        "command": (
            "vllm serve {model} --port {port} -tp {tensor_parallel} -pp {pipeline_parallel} \\\n"
            "  --max-num-seqs {max_num_seqs} --enable-expert-parallel --served-model-name a b"
        ),
    }
)

CASES: dict[str, Callable[[], list[dict[str, Any]]]] = {
    "one-node-one-gpu": lambda: _render("qwen-small", {"model": QWEN}),
    "one-node-eight-gpus": lambda: _render(
        "qwen-tp8",
        {
            "model": {**QWEN, "servedName": "qwen", "aliases": ["qwen-latest"]},
            "engine": {
                "maxModelLen": 8192,
                "gpuMemoryUtilization": 0.85,
                "args": ["--chat-template", "{{ messages[0]['content'] }} x"],
            },
            "topology": {"nodes": 1, "gpusPerNode": 8, "tensorParallel": 8},
            "replicas": 2,
        },
    ),
    "two-nodes-tp8-pp2": lambda: _render(
        "llama-70b",
        {
            "model": {"name": "meta-llama/Llama-3.3-70B-Instruct"},
            "topology": {"nodes": 2, "gpusPerNode": 8, "tensorParallel": 8, "pipelineParallel": 2},
        },
    ),
    "four-nodes-tp8-pp4": lambda: _render(
        "deepseek",
        {
            "model": {"name": "deepseek-ai/DeepSeek-V3", "servedName": "deepseek-v3"},
            "engine": {
                "env": [{"name": "NCCL_SOCKET_IFNAME", "value": "eth0"}],
                "args": ["--trust-remote-code"],
            },
            "topology": {"nodes": 4, "gpusPerNode": 8, "tensorParallel": 8, "pipelineParallel": 4},
        },
    ),
    "from-recipe": lambda: _render(
        "qwen3-8b",
        {
            "recipe": {"name": "qwen3-8b-vllm"},
            "engine": {"env": [{"name": "NCCL_CUMEM_ENABLE", "value": "1"}]},
        },
        recipe=RECIPE,
    ),
    "from-recipe-template": lambda: _render(
        "qwen3-moe", {"recipe": {"name": "qwen3-moe"}}, recipe=RECIPE_TEMPLATE
    ),
    "cache-ref": lambda: _render(
        "qwen-cached",
        {"model": {"name": "Qwen/Qwen3-0.6B", "revision": "main", "cacheRef": {"name": "qwen3-0-6b"}}},
        cache=CacheMount(
            cache="qwen3-0-6b",
            claim_name="models",
            path="/hub",
            revision="c1899de289a04d12100db370d81485cdf75e47ca",
        ),
    ),
    "stopped": lambda: _render("qwen-stopped", {"model": QWEN, "state": "Stopped", "replicas": 2}),
    "sleeping": lambda: _render(
        "qwen-sleepy", {"model": QWEN, "state": "Sleeping", "engine": {"enableSleepMode": True}}
    ),
    "cluster-placement": lambda: _render(
        "qwen-placed",
        {
            "model": QWEN,
            "scheduling": {
                "tolerations": [{"key": "team", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}],
                "priorityClassName": "inference-high",
                "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
            },
        },
        placement=Placement(
            cluster="h100",
            node_names=("gpu-b", "gpu-a"),
            tolerations=(Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"),),
            queue_name="inference",
        ),
    ),
    "cluster-selector": lambda: _render(
        "qwen-selected",
        {"model": QWEN, "scheduling": {"queueName": "team-a"}},
        placement=Placement(
            cluster="pool",
            gpu_resource="amd.com/gpu",
            node_selector=LabelSelector(
                match_labels={"sparkrun.dev/pool": "inference"},
                match_expressions=[
                    LabelSelectorRequirement(key="node.kubernetes.io/exclude", operator="DoesNotExist")
                ],
            ),
            queue_name="pool-queue",
        ),
    ),
}


def _dump(docs: list[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(docs, sort_keys=False, width=120)


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden(case: str) -> None:
    text = _dump(CASES[case]())
    path = GOLDEN / f"{case}.yaml"
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"missing golden {path}; run with UPDATE_GOLDEN=1"
    assert text == path.read_text(), (
        f"{case} differs from {path}; rerun with UPDATE_GOLDEN=1 and review the diff"
    )


def test_no_stray_goldens() -> None:
    """Every golden file belongs to a case (a renamed case leaves no stale file behind)."""
    on_disk = {p.stem for p in GOLDEN.glob("*.yaml")}
    assert on_disk == set(CASES)

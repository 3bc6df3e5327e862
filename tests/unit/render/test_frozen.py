"""The frozen serving inputs (``render/frozen.py``): the wire form of a workload's ControllerRevision.

Tested: the round trip keeps the revision hash and renders the same JobSets for every golden
workload shape (recipe, template, cache, placement, selector, multi-node, pod override); a
malformed, out-of-bounds, unknown-field, wrong-version or oversized document is refused with a
``ValueError`` naming the problem.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from sparkrun_operator.api.meta import LabelSelector, LabelSelectorRequirement, Toleration
from sparkrun_operator.api.podoverride import PodOverride
from sparkrun_operator.render.frozen import MAX_WIRE_BYTES, from_wire, to_wire
from sparkrun_operator.render.workload import CacheMount, Placement, ServingInputs, render_jobset
from tests.unit.render.test_workload_golden import QWEN, RECIPE, RECIPE_TEMPLATE, _inputs


def _shape(doc: dict[str, Any], **kwargs: Any) -> Callable[[], ServingInputs]:
    return lambda: _inputs(doc, **kwargs)[1]


SHAPES: dict[str, Callable[[], ServingInputs]] = {
    "one-node-one-gpu": _shape({"model": QWEN}),
    "one-node-eight-gpus": _shape(
        {
            "model": {**QWEN, "servedName": "qwen", "aliases": ["qwen-latest"]},
            "engine": {
                "maxModelLen": 8192,
                "gpuMemoryUtilization": 0.85,
                "args": ["--chat-template", "{{ messages[0]['content'] }} x"],
            },
            "topology": {"nodes": 1, "gpusPerNode": 8, "tensorParallel": 8},
        }
    ),
    "four-nodes-tp8-pp4": _shape(
        {
            "model": {"name": "deepseek-ai/DeepSeek-V3", "servedName": "deepseek-v3"},
            "engine": {
                "env": [
                    {"name": "NCCL_SOCKET_IFNAME", "value": "eth0"},
                    {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}},
                ],
                "args": ["--trust-remote-code"],
            },
            "topology": {"nodes": 4, "gpusPerNode": 8, "tensorParallel": 8, "pipelineParallel": 4},
        }
    ),
    "from-recipe": _shape(
        {
            "recipe": {"name": "qwen3-8b-vllm"},
            "engine": {"env": [{"name": "NCCL_CUMEM_ENABLE", "value": "1"}]},
        },
        recipe=RECIPE,
    ),
    "from-recipe-template": _shape({"recipe": {"name": "qwen3-moe"}}, recipe=RECIPE_TEMPLATE),
    "cache-ref": _shape(
        {"model": {"name": "Qwen/Qwen3-0.6B", "revision": "main", "cacheRef": {"name": "qwen3-0-6b"}}},
        cache=CacheMount(
            cache="qwen3-0-6b", claim_name="models", path="/hub", revision="c1899de", node="gpu-a"
        ),
    ),
    "sleeping": _shape({"model": QWEN, "state": "Sleeping", "engine": {"enableSleepMode": True}}),
    "cluster-placement": _shape(
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
    "cluster-selector": _shape(
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
        ),
    ),
}


def _with_pod() -> ServingInputs:
    base = SHAPES["one-node-one-gpu"]()
    pod = PodOverride.model_validate(
        {"serviceAccountName": "engines", "labels": {"team": "ml"}, "annotations": {"a": "b"}}
    )
    return ServingInputs(spec=base.spec, scheduling=base.scheduling, pod=pod)


SHAPES["pod-override"] = _with_pod


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_round_trip_keeps_the_revision_and_the_pods(shape: str) -> None:
    inputs = SHAPES[shape]()
    wire = to_wire(inputs)
    # the wire form is plain JSON (what a ControllerRevision's data stores)
    again = from_wire(json.loads(json.dumps(wire)))
    assert again.revision() == inputs.revision()
    assert again == inputs
    for replica in (0, 1):
        assert render_jobset(
            namespace="ns", workload="w", inputs=again, replica=replica, suspend=False
        ) == render_jobset(namespace="ns", workload="w", inputs=inputs, replica=replica, suspend=False)
    assert to_wire(again) == wire


def _good() -> dict[str, Any]:
    return to_wire(SHAPES["cluster-placement"]())


def _set(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    *parents, last = path.split(".")
    node = out
    for part in parents:
        node = node[part]
    node[last] = value
    return out


@pytest.mark.parametrize(
    ("doc", "says"),
    [
        ([], "must be an object"),
        ("text", "must be an object"),
        (_set(_good(), "version", 2), "version"),
        (_set(_good(), "spec.image", ""), "spec.image"),
        (_set(_good(), "spec.unknown", 1), "spec.unknown"),
        (_set(_good(), "spec.topology.nodes", 0), "spec.topology.nodes"),
        (_set(_good(), "spec.topology.gpusPerNode", 3), "gpusPerNode x nodes"),
        (_set(_good(), "spec.engineArgs", "not-a-list"), "spec.engineArgs"),
        (_set(_good(), "spec.gpuMemoryUtilization", 7), "spec.gpuMemoryUtilization"),
        (_set(_good(), "placement.cluster", 5), "placement.cluster"),
        (_set(_good(), "scheduling.tolerations", [{"operator": "Sometimes"}]), "scheduling.tolerations"),
        (_set(_good(), "cache", {"cache": "c"}), "cache.claimName"),
        (_set(_good(), "pod", {"hostNetwork": True}), "pod"),
        (_set(_good(), "spec.servedName", "x" * 600), "spec.servedName"),
    ],
)
def test_malformed_documents_are_refused(doc: Any, says: str) -> None:
    with pytest.raises(ValueError, match="frozen serving inputs") as caught:
        from_wire(doc)
    assert says in str(caught.value)


def test_an_oversized_document_is_refused_before_it_is_parsed() -> None:
    doc = _set(_good(), "spec.engineArgs", ["x" * 30_000] * (MAX_WIRE_BYTES // 30_000 + 1))
    with pytest.raises(ValueError, match="bytes, over"):
        from_wire(doc)


def test_a_document_that_is_not_json_is_refused() -> None:
    with pytest.raises(ValueError, match="not JSON"):
        from_wire({"version": 1, "spec": {1, 2}})

"""The daemon's view of an InferenceCluster shows the GPU resource in use (review of issue 28).

``spec.gpuResource`` may change and wait for ``spec.approve`` (ADR 0046): until then workloads are
placed with ``status.applied.gpuResource``, and ``cluster.*`` / ``catalog.clusters`` count each
node's accelerators of that resource, not of the one merely asked for. A cluster without an
applied value yet (its first status not written) shows the spec's; a malformed one is ignored.
"""

from __future__ import annotations

from typing import Any

import pytest

from sparkrun_operator.ops.executors.clusters import cluster_definition
from sparkrun_operator.plan.cluster import ObservedNode

NODES = {
    "gpu-0": ObservedNode(
        name="gpu-0", capacity={"nvidia.com/gpu": 8}, allocatable={"nvidia.com/gpu": 8}, ready=True
    )
}


def _cluster(applied: Any) -> dict[str, Any]:
    cluster: dict[str, Any] = {
        "metadata": {"name": "rack-a"},
        "spec": {"nodes": {"names": ["gpu-0"]}, "gpuResource": "amd.com/gpu"},
    }
    if applied is not None:
        cluster["status"] = {"applied": applied}
    return cluster


def _count(cluster: dict[str, Any]) -> int:
    (accelerator,) = cluster_definition(cluster, NODES)["hosts_hardware"]["gpu-0"]["accelerators"] or [
        {"count": 0}
    ]
    return int(accelerator["count"])


def test_a_changed_gpu_resource_not_yet_approved_shows_the_one_in_use() -> None:
    applied = {"gpuResource": "nvidia.com/gpu", "revision": "0123456789"}
    definition = cluster_definition(_cluster(applied), NODES)
    (accelerator,) = definition["hosts_hardware"]["gpu-0"]["accelerators"]
    assert (accelerator["vendor"], accelerator["count"]) == ("nvidia", 8)


@pytest.mark.parametrize("applied", [None, {"gpuResource": 7}, {"gpuResource": "x" * 300, "revision": "zz"}])
def test_without_a_valid_applied_value_the_spec_counts(applied: Any) -> None:
    assert _count(_cluster(applied)) == 0  # the spec's amd.com/gpu: none on this node

"""The InferenceCluster status's per-node GPU memory and driver version (``plan/cluster.py``).

Tested: ``gpuMemoryMiB`` and ``driverVersion`` come from the GPU feature discovery labels
(``api/telemetry.py``), whoever wrote them; the full driver label wins over major/minor/rev; a
missing or malformed label (hostile text, out of bounds) leaves the field absent; the totals and the
rest of a node's status are unchanged; the serialized status carries the camelCase names.
"""

from __future__ import annotations

import datetime as dt

import pytest

from sparkrun_operator.api import telemetry as t
from sparkrun_operator.api.cluster import InferenceClusterSpec, InferenceClusterStatus
from sparkrun_operator.plan.cluster import ObservedNode, driver_version, plan_status

NOW = dt.datetime(2026, 9, 1, tzinfo=dt.UTC)
GPU = "nvidia.com/gpu"


def _plan(*nodes: ObservedNode) -> InferenceClusterStatus:
    return plan_status(
        name="rack",
        spec=InferenceClusterSpec.model_validate({"nodes": {"names": [n.name for n in nodes]}}),
        generation=1,
        previous=InferenceClusterStatus(),
        nodes=list(nodes),
        pods=[],
        clusters=[],
        now=NOW,
    )


def _node(name: str, **labels: str) -> ObservedNode:
    return ObservedNode(name=name, labels=labels, ready=True, capacity={GPU: 4}, allocatable={GPU: 4})


def test_memory_and_driver_from_gfd_labels() -> None:
    gfd = _node(
        "gfd-node",
        **{
            t.GPU_MEMORY_LABEL: "81559",
            t.DRIVER_VERSION_LABEL: "550.54.15",
            t.DRIVER_MAJOR_LABEL: "999",
            t.DRIVER_MINOR_LABEL: "1",
            t.GFD_TIMESTAMP_LABEL: "1700000000",
        },
    )
    older = _node(
        "old-gfd", **{t.DRIVER_MAJOR_LABEL: "535", t.DRIVER_MINOR_LABEL: "104", t.DRIVER_REV_LABEL: "05"}
    )
    bare = _node("no-labels")
    status = _plan(gfd, older, bare)
    by_name = {n.name: n for n in status.nodes}
    assert (by_name["gfd-node"].gpu_memory_mib, by_name["gfd-node"].driver_version) == (81559, "550.54.15")
    assert (by_name["old-gfd"].gpu_memory_mib, by_name["old-gfd"].driver_version) == (None, "535.104.05")
    assert (by_name["no-labels"].gpu_memory_mib, by_name["no-labels"].driver_version) == (None, None)
    assert status.totals.gpus.allocatable == 12
    wire = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert [n["name"] for n in wire["nodes"]] == ["gfd-node", "no-labels", "old-gfd"]
    assert wire["nodes"][0]["gpuMemoryMiB"] == 81559
    assert wire["nodes"][0]["driverVersion"] == "550.54.15"
    assert "gpuMemoryMiB" not in wire["nodes"][1]
    assert "driverVersion" not in wire["nodes"][1]


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ({t.DRIVER_MAJOR_LABEL: "550", t.DRIVER_MINOR_LABEL: "54"}, "550.54"),
        ({t.DRIVER_MAJOR_LABEL: "550", t.DRIVER_MINOR_LABEL: "54", t.DRIVER_REV_LABEL: ""}, "550.54"),
        ({t.DRIVER_MAJOR_LABEL: "550", t.DRIVER_MINOR_LABEL: "54", t.DRIVER_REV_LABEL: "x"}, "550.54"),
        ({t.DRIVER_MAJOR_LABEL: "550"}, None),
        ({t.DRIVER_MAJOR_LABEL: "5\u0665", t.DRIVER_MINOR_LABEL: "1"}, None),
        ({t.DRIVER_MAJOR_LABEL: "1" * 10, t.DRIVER_MINOR_LABEL: "1"}, None),
        ({t.DRIVER_VERSION_LABEL: "550.54.15\u202e"}, None),
        ({t.DRIVER_VERSION_LABEL: "5" * 64}, None),
        ({t.DRIVER_VERSION_LABEL: ""}, None),
        ({t.DRIVER_VERSION_LABEL: "bad value", t.DRIVER_MAJOR_LABEL: "1", t.DRIVER_MINOR_LABEL: "2"}, "1.2"),
    ],
)
def test_driver_version_is_read_strictly(labels: dict[str, str], expected: str | None) -> None:
    assert driver_version(labels) == expected


@pytest.mark.parametrize("memory", ["", "-1", "0", "1e5", "\u0668\u0660", "99999999999", str((1 << 24) + 1)])
def test_a_malformed_memory_label_leaves_the_field_absent(memory: str) -> None:
    status = _plan(_node("odd", **{t.GPU_MEMORY_LABEL: memory}))
    assert status.nodes[0].gpu_memory_mib is None
    # the status still validates as the CRD's schema bounds say
    InferenceClusterStatus.model_validate(status.model_dump(mode="json", by_alias=True))

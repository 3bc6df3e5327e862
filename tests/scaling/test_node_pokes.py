"""Which Node events re-plan the workloads waiting for GPU memory (``controllers/workload_pokes.py``).

Kubelets and node-problem-detector rewrite a Node's status every few minutes (heartbeats,
images, condition timestamps): at a few hundred nodes that is an event a second. Each poked
every waiting workload's full pass, so a tenant's thousand workloads too large for the pool
kept the full lane busy for everyone. Only a change of what the fit and the candidate list
read (labels, GPU capacity, readiness, cordon) or a node coming or going counts."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from sparkrun_operator.controllers.workload_pokes import node_changed


def node(
    name: str = "gpu-1", *, heartbeat: str = "2026-12-06T10:00:00Z", version: str = "1"
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "resourceVersion": version,
            "labels": {"nvidia.com/gpu.memory": "24576", "pool": "gpu"},
        },
        "spec": {},
        "status": {
            "capacity": {"nvidia.com/gpu": "2", "cpu": "32"},
            "allocatable": {"nvidia.com/gpu": "2", "cpu": "31"},
            "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": heartbeat}],
            "images": [],
        },
    }


def test_a_heartbeat_is_not_a_change() -> None:
    marks: dict[str, int] = {}
    assert node_changed(marks, None, node())  # first seen (the initial listing)
    beat = node(heartbeat="2026-12-06T10:05:00Z", version="2")
    beat["status"]["images"] = [{"names": ["engine:1"], "sizeBytes": 1}]
    assert not node_changed(marks, "MODIFIED", beat)
    assert not node_changed(marks, "MODIFIED", beat)


def relabelled(body: dict[str, Any]) -> None:
    body["metadata"]["labels"]["nvidia.com/gpu.memory"] = "81920"


def regpu(body: dict[str, Any]) -> None:
    body["status"]["allocatable"]["nvidia.com/gpu"] = "4"


def cordoned(body: dict[str, Any]) -> None:
    body["spec"]["unschedulable"] = True


def not_ready(body: dict[str, Any]) -> None:
    body["status"]["conditions"][0]["status"] = "False"


@pytest.mark.parametrize("change", [relabelled, regpu, cordoned, not_ready])
def test_what_the_fit_reads_is_a_change(change: Any) -> None:
    marks: dict[str, int] = {}
    node_changed(marks, None, node())
    changed = copy.deepcopy(node(version="2"))
    change(changed)
    assert node_changed(marks, "MODIFIED", changed)
    assert not node_changed(marks, "MODIFIED", changed)


def test_a_node_coming_or_going_is_a_change_and_is_forgotten() -> None:
    marks: dict[str, int] = {}
    assert node_changed(marks, "ADDED", node("a"))
    assert node_changed(marks, "ADDED", node("b"))
    assert node_changed(marks, "DELETED", node("a"))
    assert set(marks) == {"b"}

"""``spec.gpuResource`` of an InferenceCluster is applied on request (ADR 0046), outside the
planner: offline admission accepts a change (the CRD's immutability rule is gone; an approve that
is not a hash is still refused), and a workload is placed with ``status.applied``, not the spec
(``plan/observe.py``'s ``cluster_from`` / ``workload_cluster``, as the ``iw_clusters`` index
stores the cluster).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import kopf
import pytest
import yaml

from sparkrun_operator.api.admission import validate
from sparkrun_operator.controllers.indexes import cluster_record
from sparkrun_operator.plan import observe

ROOT = Path(__file__).resolve().parents[2]
CLUSTER: dict[str, Any] = {
    "apiVersion": "sparkrun.dev/v1alpha1",
    "kind": "InferenceCluster",
    "metadata": {"name": "pool"},
    "spec": {"nodes": {"names": ["a"]}, "gpuResource": "nvidia.com/gpu"},
}


@pytest.fixture(scope="module")
def crds() -> dict[str, dict[str, Any]]:
    docs = [yaml.safe_load(p.read_text()) for p in sorted((ROOT / "crds").glob("*.yaml"))]
    return {d["spec"]["names"]["kind"]: d for d in docs}


def test_admission_accepts_a_gpu_resource_update(crds: dict[str, dict[str, Any]]) -> None:
    new = copy.deepcopy(CLUSTER)
    new["spec"]["gpuResource"] = "amd.com/gpu"
    assert validate(new, old=CLUSTER, crds=crds) == []
    new["spec"]["approve"] = "0123456789"
    assert validate(new, old=CLUSTER, crds=crds) == []


def test_admission_refuses_an_approve_that_is_not_a_hash(crds: dict[str, dict[str, Any]]) -> None:
    new = copy.deepcopy(CLUSTER)
    new["spec"]["approve"] = "yes"
    assert [e.path for e in validate(new, old=CLUSTER, crds=crds)] == ["spec.approve"]


def _stored(applied: Any) -> dict[str, Any]:
    """The cluster as the ``iw_clusters`` index holds it (metadata, spec, status.applied)."""
    doc = copy.deepcopy(CLUSTER)
    doc["spec"]["gpuResource"] = "amd.com/gpu"  # changed, not approved
    doc["status"] = {} if applied is None else {"applied": applied}
    return doc


def test_placement_uses_the_applied_gpu_resource() -> None:
    full = _stored({"gpuResource": "nvidia.com/gpu", "revision": "0123456789"})
    full["status"]["nodes"] = [{"name": "a"}]  # the rest of the status is not kept
    stored = cluster_record(kopf.Body(full))
    assert stored["status"] == {"applied": {"gpuResource": "nvidia.com/gpu", "revision": "0123456789"}}
    parsed = observe.cluster_from(stored)
    assert parsed is not None
    assert parsed[0].gpu_resource == "nvidia.com/gpu"
    cluster, raw = observe.workload_cluster("pool", {"pool": [stored]})
    assert cluster is not None
    assert raw is stored
    assert cluster.gpu_resource == "nvidia.com/gpu"


@pytest.mark.parametrize(
    "applied",
    [None, {"gpuResource": "x"}, {"gpuResource": "nvidia.com/gpu", "revision": "not-a-hash"}, "text"],
    ids=["no-status-yet", "no-revision", "bad-revision", "not-an-object"],
)
def test_placement_falls_back_to_the_spec_without_a_valid_applied(applied: Any) -> None:
    parsed = observe.cluster_from(_stored(applied))
    assert parsed is not None
    assert parsed[0].gpu_resource == "amd.com/gpu"

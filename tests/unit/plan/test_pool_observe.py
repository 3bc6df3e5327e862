"""InferencePools and endpoint-picker objects as the planner sees them (``plan/poolobserve.py``,
re-exported by ``plan/observe.py``): total on malformed objects, bounded on what a gateway wrote."""

from __future__ import annotations

from typing import Any

import pytest

from sparkrun_operator.api.clip import SERVER_TEXT_MAX
from sparkrun_operator.api.inferencepool import InferencePoolStatus, PoolParentStatus
from sparkrun_operator.plan.observe import picker_from, pool_from
from sparkrun_operator.plan.poolobserve import MAX_PARENTS, REASON_MAX
from sparkrun_operator.render import keys
from sparkrun_operator.render.inferencepool import PickerSettings, render_picker, render_pool
from sparkrun_operator.render.workload import Owner

OWNER = Owner(name="qwen", uid="uid-w")


def _with_identity(doc: dict[str, Any], uid: str = "uid-1") -> dict[str, Any]:
    doc["metadata"]["uid"] = uid
    return doc


def _parent(name: str, *conditions: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
    ref: dict[str, Any] = {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": name}
    if namespace is not None:
        ref["namespace"] = namespace
    return {"parentRef": ref, "controllerName": "example.net/gw", "conditions": list(conditions)}


def _cond(type_: str, status: str, reason: str, message: str = "") -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "message": message}


def test_our_pool_with_its_hash_controller_and_parents() -> None:
    doc = _with_identity(render_pool(namespace="ns", workload="qwen", spec=None, owner=OWNER))
    doc["status"] = {
        "parents": [
            _parent(
                "gw",
                _cond("Accepted", "True", "Accepted"),
                _cond("ResolvedRefs", "False", "InvalidExtensionRef", "no such Service qwen-epp"),
                namespace="infra",
            ),
            _parent("local", _cond("Accepted", "False", "NotSupportedByParent", "nope")),
        ]
    }
    pool = pool_from(doc)
    assert pool is not None
    assert (pool.name, pool.uid, pool.controller) == ("qwen", "uid-1", "uid-w")
    assert pool.hash == doc["metadata"]["annotations"][keys.ANNOTATION_POOL_HASH]
    first, second = pool.parents
    assert (first.parent, first.accepted, first.resolved_refs) == ("Gateway/infra/gw", "True", "False")
    assert (first.reason, first.message) == ("InvalidExtensionRef", "no such Service qwen-epp")
    assert not first.accepts
    assert (second.parent, second.accepted, second.resolved_refs) == ("Gateway/ns/local", "False", "Unknown")
    assert second.reason == "NotSupportedByParent"


def test_another_products_pool_has_no_controller_of_ours() -> None:
    doc = {
        "apiVersion": "inference.networking.k8s.io/v1",
        "kind": "InferencePool",
        "metadata": {
            "name": "qwen",
            "namespace": "ns",
            "uid": "u",
            "ownerReferences": [{"kind": "Deployment", "name": "x", "uid": "d", "controller": True}],
        },
    }
    pool = pool_from(doc)
    assert pool is not None
    assert pool.controller is None
    assert pool.hash is None
    assert pool.parents == ()
    # another group's kind of the same name (a CRD of another product) is not ours either
    doc["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "example.com/v1",
            "kind": "InferenceWorkload",
            "name": "qwen",
            "uid": "w",
            "controller": True,
        }
    ]
    pool = pool_from(doc)
    assert pool is not None
    assert pool.controller is None
    doc["metadata"]["ownerReferences"][0]["apiVersion"] = "sparkrun.dev/v1alpha1"
    pool = pool_from(doc)
    assert pool is not None
    assert pool.controller == "w"


def test_a_hostile_status_is_bounded() -> None:
    huge = "x" * 100_000
    doc = _with_identity(render_pool(namespace="ns", workload="qwen", spec=None, owner=OWNER))
    doc["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    doc["status"] = {
        "parents": [
            _parent(
                huge, _cond("Accepted", "False", huge, huge), *[_cond("X", "True", "x")] * 50, namespace=huge
            ),
            "not an object",
            {"parentRef": "nope"},
            *[_parent(f"g{i}", _cond("Accepted", "True", "Accepted")) for i in range(100)],
        ]
    }
    pool = pool_from(doc)
    assert pool is not None
    assert pool.deleting
    assert len(pool.parents) <= MAX_PARENTS
    first = pool.parents[0]
    assert len(first.parent) <= 381
    assert InferencePoolStatus(
        name="qwen",
        parents=[
            PoolParentStatus(parent=first.parent, accepted=first.accepted, resolved_refs=first.resolved_refs)
        ],
    )
    assert len(first.reason) == REASON_MAX
    assert len(first.message) == SERVER_TEXT_MAX
    assert first.accepted == "False"


@pytest.mark.parametrize(
    "doc",
    [
        {},
        {"metadata": "x"},
        {"metadata": {"name": "qwen"}},
        {"kind": "Service", "metadata": {"name": "qwen", "uid": "u"}},
        {"kind": "InferencePool", "metadata": {"name": 3, "uid": "u"}},
    ],
)
def test_malformed_pools_are_not_pools(doc: dict[str, Any]) -> None:
    assert pool_from(doc) is None


def test_the_picker_objects_and_the_deployments_readiness() -> None:
    docs = render_picker(namespace="ns", workload="qwen", spec=None, settings=PickerSettings(), owner=OWNER)
    seen = [picker_from(_with_identity(d, f"uid-{d['kind']}")) for d in docs]
    assert [(o.kind, o.name, o.controller) for o in seen if o] == [
        (d["kind"], "qwen-epp", "uid-w") for d in docs
    ]
    assert all(
        o is not None and o.hash == d["metadata"]["annotations"][keys.ANNOTATION_POOL_HASH]
        for o, d in zip(seen, docs, strict=True)
    )
    deployment = docs[2]
    assert deployment["kind"] == "Deployment"
    cases = [
        ({}, None, False),
        ({"readyReplicas": 1, "observedGeneration": 2}, 2, True),
        ({"readyReplicas": 1, "observedGeneration": 1}, 2, False),
        ({"readyReplicas": 0, "observedGeneration": 2}, 2, False),
        ({"readyReplicas": True, "observedGeneration": 2}, 2, False),
        ({"readyReplicas": 1}, None, True),
    ]
    for status, generation, ready in cases:
        doc = dict(deployment, status=status)
        doc["metadata"] = dict(deployment["metadata"])
        if generation is not None:
            doc["metadata"]["generation"] = generation
        found = picker_from(doc)
        assert found is not None
        assert found.ready is ready, (status, generation)


def test_other_kinds_and_foreign_owners() -> None:
    assert picker_from({"kind": "ConfigMap", "metadata": {"name": "qwen-epp", "uid": "u"}}) is None
    assert picker_from({"metadata": {"name": "qwen-epp", "uid": "u"}}) is None
    foreign = picker_from(
        {
            "kind": "Service",
            "metadata": {
                "name": "qwen-epp",
                "uid": "u",
                "ownerReferences": [{"kind": "InferenceWorkload", "uid": "other", "controller": False}],
                "annotations": {keys.ANNOTATION_POOL_HASH: "y" * 65},
            },
        }
    )
    assert foreign is not None
    assert foreign.controller is None
    assert foreign.hash is None
    assert not foreign.ready

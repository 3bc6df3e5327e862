"""The project's own daemon operations (ADR 0048) and the pure parts of ``ops/rollout.py``.

Tested: the four operations are in the catalog in the plugin namespace (owner ``sparkrun-k8s``,
the document's alias rule, the declared kind and scope, an executor each); their schemas are in
the daemon API's schema vocabulary (no ``$ref``, ``format``, ``const``, ``allOf``, ``oneOf``;
``additionalProperties: false`` on every object) and are what the pydantic types say; a keyword
outside the vocabulary fails the generator; the request validator refuses a revision below 1, a
malformed hash and unknown fields; a result built by the ops layer satisfies its result schema;
the default rollback target and the drift-approval refusals (no drift, unresolved, stale hash).
The operations against a real apiserver: tests/shim/test_rollout_ops.py and
tests/testbed/test_rollout_cli.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel, Field

from sparkrun_operator.api import pluginops
from sparkrun_operator.api.history import DriftStatus
from sparkrun_operator.ops import catalog, rollout
from sparkrun_operator.ops.errors import Conflict, Invalid, ResultContractError
from sparkrun_operator.ops.executors import EXECUTORS
from sparkrun_operator.ops.schema import SchemaValidator, request_validator

EXPECTED = {
    "plugins.sparkrun-k8s.workloads.history": (
        "query",
        "read",
        "/v1/plugins/sparkrun-k8s/ops/workloads/history",
    ),
    "plugins.sparkrun-k8s.workloads.rollback": (
        "job",
        "operate",
        "/v1/plugins/sparkrun-k8s/ops/workloads/rollback",
    ),
    "plugins.sparkrun-k8s.workloads.apply_drift": (
        "job",
        "operate",
        "/v1/plugins/sparkrun-k8s/ops/workloads/apply_drift",
    ),
    "plugins.sparkrun-k8s.clusters.apply_drift": (
        "job",
        "admin",
        "/v1/plugins/sparkrun-k8s/ops/clusters/apply_drift",
    ),
    "plugins.sparkrun-k8s.objects.get": ("query", "read", "/v1/plugins/sparkrun-k8s/ops/objects/get"),
    "plugins.sparkrun-k8s.clusters.drain": (
        "job",
        "admin",
        "/v1/plugins/sparkrun-k8s/ops/clusters/drain",
    ),
    "plugins.sparkrun-k8s.workloads.lease": (
        "query",
        "operate",
        "/v1/plugins/sparkrun-k8s/ops/workloads/lease",
    ),
    "plugins.sparkrun-k8s.workloads.release": (
        "query",
        "operate",
        "/v1/plugins/sparkrun-k8s/ops/workloads/release",
    ),
    "plugins.sparkrun-k8s.workloads.leases": (
        "query",
        "read",
        "/v1/plugins/sparkrun-k8s/ops/workloads/leases",
    ),
}
FORBIDDEN_KEYWORDS = {"$ref", "$defs", "format", "const", "allOf", "oneOf", "exclusiveMinimum", "title"}


def _walk(node: Any) -> Any:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


def test_the_operations_are_in_the_plugin_namespace() -> None:
    ops = catalog.load()
    project = {op.name: op for op in ops if op.owner == pluginops.PLUGIN_ID}
    assert set(project) == set(EXPECTED)
    for name, (kind, scope, path) in EXPECTED.items():
        op = project[name]
        assert (op.kind, op.scope, op.http_path, op.enabled) == (kind, scope, path, True)
        assert op.local_name == name.removeprefix("plugins.sparkrun-k8s.")
        assert ops.by_path(path) is op
        assert op.discovery()["owner"] == "sparkrun-k8s"
        assert name in EXECUTORS
        assert not op.resumable  # a rerun could roll back or approve something else


def test_schemas_are_in_the_daemon_vocabulary() -> None:
    for op in catalog.load():
        if op.owner != pluginops.PLUGIN_ID:
            continue
        for schema in (op.request_schema, op.result_schema):
            for node in _walk(schema):
                assert not FORBIDDEN_KEYWORDS & set(node) - {"properties"}, (op.name, node)
                if (
                    "properties" in node
                    and isinstance(node["properties"], dict)
                    and node.get("type") == "object"
                ):
                    assert node["additionalProperties"] is False, (op.name, node)
        assert op.request_schema == pluginops.daemon_schema(
            next(o.request for o in pluginops.OPERATIONS if o.name == op.name), mode="validation"
        )


def test_a_keyword_outside_the_vocabulary_fails_the_generator() -> None:
    class Odd(BaseModel):
        ratio: float = Field(gt=0)  # exclusiveMinimum

    with pytest.raises(pluginops.SchemaVocabularyError, match="exclusiveMinimum"):
        pluginops.daemon_schema(Odd, mode="validation")


def test_requests_are_checked_against_the_schema() -> None:
    op = catalog.load().get("plugins.sparkrun-k8s.workloads.rollback")
    check = request_validator(op.name, op.version, op.request_schema).check_request
    check({"workload": "w", "revision": 2})
    check({"workload": "w", "clear": True})
    for bad in (
        {"workload": "w", "revision": 0},
        {"workload": "w", "extra": 1},
        {"revision": 1},
        {"workload": ""},
    ):
        with pytest.raises(Invalid):
            check(bad)
    drift = catalog.load().get("plugins.sparkrun-k8s.workloads.apply_drift")
    with pytest.raises(Invalid):
        request_validator(drift.name, drift.version, drift.request_schema).check_request(
            {"workload": "w", "revision": "NOT-A-HASH"}
        )


def test_results_satisfy_their_schemas() -> None:
    op = catalog.load().get("plugins.sparkrun-k8s.workloads.history")
    result = pluginops.HistoryResult(
        workload="w",
        namespace="ns",
        apply="OnRequest",
        pinned=1,
        revisions=[
            pluginops.RevisionEntry(
                number=1,
                name="w-1",
                hash="0123456789",
                cause="Created",
                current=False,
                served_from="2026-12-06T12:00:00Z",
            ),
            pluginops.RevisionEntry(
                number=2, name="w-2", hash="abcdef0123", cause="Rollback", rollback_of=1, current=True
            ),
        ],
        drift=DriftStatus.model_validate(
            {"reason": "RevisionPinned", "revision": "fedcba9876", "since": "2026-12-06T12:00:00Z"}
        ),
    )
    data = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    SchemaValidator(op.result_schema).check_result(op.name, json.loads(json.dumps(data)))
    assert data["drift"]["revision"] == "fedcba9876"
    with pytest.raises(ResultContractError):
        SchemaValidator(op.result_schema).check_result(op.name, {**data, "revisions": [{"number": 0}]})


def _workload(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "w", "namespace": "ns", "resourceVersion": "7"},
        "spec": {},
        "status": status,
    }


def test_default_rollback_target_is_the_previous_revision() -> None:
    previous = {"number": 3, "hash": "0123456789", "name": "w-3"}
    assert rollout.default_revision(_workload(history={"previous": previous})) == 3
    with pytest.raises(Conflict) as refused:
        rollout.default_revision(_workload(history={"current": previous}))
    assert refused.value.attrs["reason"] == "no_previous_revision"


@pytest.mark.parametrize(
    ("present", "pending", "given", "reason"),
    [
        (False, None, None, "no_drift"),
        (True, None, None, "drift_unresolved"),
        (True, "0123456789", "9876543210", "stale_revision"),
    ],
)
def test_drift_approval_refusals(present: bool, pending: str | None, given: str | None, reason: str) -> None:
    with pytest.raises(Conflict) as refused:
        rollout._pending(present, pending, given, "InferenceWorkload w")
    assert refused.value.status == 409
    assert refused.value.attrs["reason"] == reason


def test_drift_approval_takes_the_pending_hash() -> None:
    assert rollout._pending(True, "0123456789", None, "w") == "0123456789"
    assert rollout._pending(True, "0123456789", "0123456789", "w") == "0123456789"

"""Argument and result validation against the declared schemas (``ops/schema.py``).

Tested: the reference daemon's wording and precedence of problems (type, unknown fields,
missing fields, then nested values), integer vs number, enums and bounds, ``anyOf`` required
alternatives, the implicit request limits, the refusal of credentials anywhere in the arguments,
strict JSON body parsing, and result contract violations; every enabled operation has an
executor.
"""

from __future__ import annotations

import pytest

from sparkrun_operator.ops import catalog
from sparkrun_operator.ops.errors import Invalid, ResultContractError
from sparkrun_operator.ops.executors import EXECUTORS
from sparkrun_operator.ops.schema import SchemaValidator, parse_json_object, reject_secrets

OPS = catalog.load()


def _problem(name: str, arguments: object) -> str:
    with pytest.raises(Invalid) as caught:
        SchemaValidator(OPS.get(name).request_schema).check_request(arguments)
    return caught.value.detail


@pytest.mark.parametrize(
    ("name", "arguments", "detail"),
    [
        ("cluster.create", {"name": "x"}, "request: missing fields: hosts"),
        ("cluster.create", {"name": "x", "hosts": ["a"], "zzz": 1}, "request: unknown fields: zzz"),
        ("cluster.create", {"zzz": 1}, "request: unknown fields: zzz"),
        ("cluster.create", {"name": 1, "hosts": ["a"]}, "request.name: expected string"),
        ("cluster.create", {"name": "x", "hosts": []}, "request.hosts: too few items"),
        ("cluster.create", {"name": "x", "hosts": [7]}, "request.hosts[]: expected string"),
        ("workloads.run", {"recipe": "r", "ray_port": 1.0}, "request.ray_port: expected integer"),
        ("workloads.run", {"recipe": "r", "ray_port": 70000}, "request.ray_port: number out of range"),
        ("workloads.run", {"recipe": "r", "solo": 1}, "request.solo: expected boolean"),
        ("workloads.run", {"recipe": "r", "transfer_mode": "zz"}, "request.transfer_mode: unsupported value"),
        ("workloads.stop_all", {}, "request: invalid value"),
        ("workloads.reconcile", {"recipe": "r", "recipe_revision": "x", "workload_id": "w", "acknowledge_effects": False}, "request.acknowledge_effects: unsupported value"),  # noqa: E501
        ("cluster.default", {"name": 5}, "request.name: invalid value"),
        ("diagnostics.collect", {"max_bytes": 10}, "request.max_bytes: number out of range"),
    ],
)  # fmt: skip
def test_request_problems_read_like_the_reference(name: str, arguments: object, detail: str) -> None:
    assert _problem(name, arguments) == detail


def test_valid_requests_pass() -> None:
    for name, arguments in [
        ("cluster.create", {"name": "lab", "hosts": ["a", "b"], "description": "d", "user": "u"}),
        ("cluster.default", {"name": None}),
        ("workloads.stop_all", {"cluster": "c"}),
        ("workloads.run", {"recipe": "r", "overrides": {"tensor_parallel": 2, "nested": {"a": [1, 2.5]}}}),
        ("workloads.list", {}),
    ]:
        SchemaValidator(OPS.get(name).request_schema).check_request(arguments)


def test_implicit_limits_apply_where_the_schema_declares_none() -> None:
    assert _problem("workloads.run", {"recipe": "r", "overrides": {"k": "x" * 65537}}) == (
        "request.overrides.k: string too long"
    )
    assert _problem("workloads.run", {"recipe": "r", "overrides": {"k": list(range(2049))}}) == (
        "request.overrides.k: too many items"
    )
    assert _problem("workloads.run", {"recipe": "r", "overrides": {"k": 1e101}}) == (
        "request.overrides.k: number out of range"
    )
    deep: dict[str, object] = {}
    node = deep
    for _ in range(25):
        node["a"] = {}
        node = node["a"]  # type: ignore[assignment]
    assert "maximum nesting depth exceeded" in _problem("workloads.run", {"recipe": "r", "overrides": deep})
    # A declared maxLength replaces the implicit one (catalog.import allows 256 KiB of content).
    SchemaValidator(OPS.get("catalog.import").request_schema).check_request({"content": "x" * 200_000})


@pytest.mark.parametrize(
    "overrides",
    [{"api_token": "x"}, {"password": "x"}, {"nested": {"HF_TOKEN": "x"}}, {"list": [{"secret": 1}]}],
)
def test_credentials_are_refused_anywhere(overrides: dict[str, object]) -> None:
    assert _problem("workloads.run", {"recipe": "r", "overrides": overrides}) == (
        "Secrets must be supplied through a credential prompt, not persisted arguments"
    )


def test_non_secret_lookalikes_are_allowed() -> None:
    reject_secrets({"api_key_env": "X", "placement_token": "t", "token_duration": "1h", "tokenizer": "y"})


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        (b"{bad", "Invalid JSON request"),
        (b"", "Invalid JSON request"),
        (b"[1]", "Request must be a JSON object"),
        (b'"x"', "Request must be a JSON object"),
        (b'{"a": NaN}', "Invalid JSON request"),
        (b"\xff\xfe", "Invalid JSON request"),
    ],
)
def test_bodies_must_be_one_json_object(body: bytes, detail: str) -> None:
    with pytest.raises(Invalid) as caught:
        parse_json_object(body)
    assert caught.value.detail == detail
    assert caught.value.status == 422


def test_results_are_checked_against_the_result_schema() -> None:
    op = OPS.get("catalog.clusters")
    validator = SchemaValidator(op.result_schema)
    validator.check_result(op.name, [{"name": "a", "description": "", "host_count": 1, "default": False}])
    with pytest.raises(ResultContractError) as caught:
        validator.check_result(op.name, [{"name": "a"}])
    assert caught.value.attrs == {"code": "invalid_operation_result"}
    assert caught.value.status == 500
    with pytest.raises(ResultContractError):
        SchemaValidator(OPS.get("catalog.cleanup").result_schema).check_result(
            "catalog.cleanup", float("nan")
        )


def test_every_enabled_operation_has_an_executor_and_no_disabled_one_does() -> None:
    enabled = {op.name for op in OPS if op.enabled}
    assert set(EXECUTORS) == enabled

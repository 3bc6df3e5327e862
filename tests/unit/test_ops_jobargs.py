"""A DaemonJob's arguments: bounds, canonical digest, and the check that pins them
(``ops/jobargs.py``; the apiserver side: ``tests/shim/test_job_arguments.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from sparkrun_operator.api import bounds
from sparkrun_operator.ops import jobs
from sparkrun_operator.ops.errors import DaemonError, Invalid


def _nest(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for _ in range(depth):
        value = {"a": value}
    return value


def _spec(arguments: dict[str, Any], **spec: Any) -> dict[str, Any]:
    digest = jobs.request_digest("workloads.run", 1, arguments, "daemon")
    return {
        "operation": "workloads.run",
        "operationVersion": 1,
        "manager": "daemon",
        "arguments": arguments,
    } | {
        "requestDigest": digest,
        **spec,
    }


def test_the_digest_is_that_of_the_arguments_as_the_apiserver_returns_them() -> None:
    sent = {"whole": 1.0, "big": 2**64, "huge": 1e20, "text": "\ud800x", "list": [2.0, 0.5], "\udfffk": -0.0}
    returned = {
        "whole": 1,
        "big": float(2**64),
        "huge": 10**20,
        "text": "\ufffdx",
        "list": [2, 0.5],
        "\ufffdk": 0,
    }
    assert jobs.request_digest("op.x", 1, sent, "daemon") == jobs.request_digest(
        "op.x", 1, returned, "daemon"
    )
    # Go prints that float64 with all its digits; Python reads them as an int outside int64.
    printed = {**returned, "big": 18446744073709552000, "none": None}
    assert jobs.request_digest("op.x", 1, {**sent, "none": None}, "daemon") == jobs.request_digest(
        "op.x", 1, printed, "daemon"
    )
    # Values that differ stay different.
    assert jobs.request_digest("op.x", 1, {"a": 1.5}, "daemon") != jobs.request_digest(
        "op.x", 1, {"a": 1}, "daemon"
    )
    assert jobs.request_digest("op.x", 1, {"a": "1"}, "daemon") != jobs.request_digest(
        "op.x", 1, {"a": 1}, "daemon"
    )
    assert jobs.request_digest("op.x", 1, {"a": True}, "daemon") != jobs.request_digest(
        "op.x", 1, {"a": 1}, "daemon"
    )


def test_arguments_within_the_bounds_pass() -> None:
    # arguments is level 1; containers with entries up to level ARGUMENTS_DEPTH, empty ones one deeper.
    deepest = _nest(bounds.ARGUMENTS_DEPTH - 2, [{}])
    jobs.check_arguments(
        {"o": deepest, "content": "c" * bounds.ARGUMENT_STRING_MAX_LENGTH, "hosts": ["h"] * 2048}
    )
    jobs.check_arguments({f"k{i}": i for i in range(bounds.ARGUMENTS_MAX_PROPERTIES)})


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"o": _nest(bounds.ARGUMENTS_DEPTH)}, "request.o" + ".a" * 7 + ": nests deeper than 8 levels"),
        ({"o": _nest(2000)}, "request.o" + ".a" * 7 + ": nests deeper than 8 levels"),
        ({"l": [[[[[[[[1]]]]]]]]}, "request.l[0][0][0][0][0][0][0]: nests deeper than 8 levels"),
        ({"s": {"t": "x" * 262145}}, "request.s.t: string longer than 262144 characters"),
        ({"m": {str(i): i for i in range(2049)}}, "request.m: more than 2048 entries"),
        ({f"k{i}": i for i in range(65)}, "request: more than 64 arguments"),
    ],
)
def test_arguments_over_a_bound_are_refused_with_the_path(arguments: dict[str, Any], message: str) -> None:
    with pytest.raises(Invalid) as refused:
        jobs.check_arguments(arguments)
    assert str(refused.value).startswith(message), refused.value


def test_the_executor_takes_only_the_arguments_of_the_digest() -> None:
    arguments = {"recipe": "r", "overrides": {"max_model_len": 1.0}}
    stored = _spec(
        {"recipe": "r", "overrides": {"max_model_len": 1}}, requestDigest=_spec(arguments)["requestDigest"]
    )
    assert jobs.verified_arguments(stored) == {"recipe": "r", "overrides": {"max_model_len": 1}}

    changed = {**stored, "arguments": {"recipe": "other", "overrides": {"max_model_len": 1}}}
    for spec, reason in [
        (changed, "arguments_changed"),
        ({**stored, "requestDigest": None}, "request_digest_missing"),
    ]:
        with pytest.raises(DaemonError) as refused:
            jobs.verified_arguments(spec)
        assert (refused.value.error_type, refused.value.attrs) == ("PermissionError", {"reason": reason})
    # Another manager or operation is another request.
    for key, value in [("manager", "automation"), ("operation", "workloads.plan"), ("operationVersion", 2)]:
        with pytest.raises(DaemonError):
            jobs.verified_arguments({**stored, key: value})


def test_an_object_stored_before_the_bound_is_refused_without_recursion() -> None:
    # 900 levels: what Python's json still decodes; the check walks it without recursing.
    spec = _spec({}) | {"arguments": {"deep": _nest(900)}}
    with pytest.raises(Invalid, match="nests deeper than 8 levels"):
        jobs.verified_arguments(spec)

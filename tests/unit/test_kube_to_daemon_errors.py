"""Kubernetes errors become daemon errors by class (``ops.runner.as_daemon_error``, issue 25).

One row per ``Kube*`` class, and a plain ``KubeError`` with a status number that other classes
carry (400, 500): the status number decides nothing, the class does. A ``KubeTooManyRequests``
(the apiserver throttled the daemon, after the client's own retries) is the daemon's
``KubernetesUnavailable`` (503, retryable, the advised delay in ``attrs.retry_after_seconds``), not
the caller's ``Conflict("Busy")``; never a ``Retry-After`` header, which clients resend any verb on.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from sparkrun_operator.k8s import errors as k8s
from sparkrun_operator.ops.errors import error_body
from sparkrun_operator.ops.runner import KUBE_TO_DAEMON, as_daemon_error

DETAIL = "Kubernetes API: what the apiserver said"

#: (error, HTTP status, error type, retryable, attrs)
CASES: list[tuple[k8s.KubeError, int, str, bool, dict[str, Any]]] = [
    (
        k8s.from_transport(ConnectionResetError("reset"), method="GET", path="/x"),
        503,
        "KubernetesUnavailable",
        True,
        {},
    ),
    (k8s.KubeUnavailable("what the apiserver said", status=503), 503, "KubernetesUnavailable", True, {}),
    (
        k8s.KubeTooManyRequests("what the apiserver said", status=429, retry_after=2.5),
        503,
        "KubernetesUnavailable",
        True,
        {"retry_after_seconds": 3},
    ),
    (k8s.KubeBadRequest("what the apiserver said", status=400), 422, "ValueError", False, {}),
    (k8s.KubeNotFound("what the apiserver said", status=404), 404, "LookupError", False, {}),
    (k8s.KubeConflict("what the apiserver said", status=409), 409, "Conflict", False, {}),
    (k8s.KubeAlreadyExists("what the apiserver said", status=409), 409, "Conflict", False, {}),
    (k8s.KubeInvalid("what the apiserver said", status=422), 422, "ValueError", False, {}),
    (k8s.KubeForbidden("what the apiserver said", status=403), 500, "PermissionError", False, {}),
    (k8s.KubeGone("what the apiserver said", status=410), 500, "InternalError", False, {}),
    (k8s.KubeError("what the apiserver said", status=400), 500, "InternalError", False, {}),
    (k8s.KubeError("what the apiserver said", status=500), 500, "InternalError", False, {}),
    # status 0 without a class (no usable credentials, an unexpected watch event): not an outage
    (k8s.KubeError("what the apiserver said"), 500, "InternalError", False, {}),
]


def _id(case: Any) -> str:
    return f"{type(case).__name__}-{case.status}" if isinstance(case, k8s.KubeError) else ""


@pytest.mark.parametrize(("error", "status", "type_name", "retryable", "attrs"), CASES, ids=_id)
def test_each_kube_class_maps_to_its_daemon_error(
    error: k8s.KubeError, status: int, type_name: str, retryable: bool, attrs: dict[str, Any]
) -> None:
    mapped = as_daemon_error(error)
    got_status, body, got_headers = error_body(mapped)
    assert (got_status, body["error"]["type"], body["error"]["retryable"]) == (status, type_name, retryable)
    assert body["error"]["attrs"] == attrs
    assert got_headers == {}  # a 503 with Retry-After would make client-go resend a POST
    if error.status:
        assert body["detail"] == DETAIL


def test_every_kube_class_has_a_row() -> None:
    """A new ``Kube*`` class needs its row here (and a decision in ``KUBE_TO_DAEMON``)."""
    classes = {c for _, c in inspect.getmembers(k8s, inspect.isclass) if issubclass(c, k8s.KubeError)}
    assert classes == {type(case[0]) for case in CASES}
    assert k8s.KubeError in KUBE_TO_DAEMON  # every KubeError maps, whatever its class


@pytest.mark.parametrize(
    ("http", "status", "type_name"),
    [
        (400, 422, "ValueError"),
        (404, 404, "LookupError"),
        (409, 409, "Conflict"),
        (429, 503, "KubernetesUnavailable"),
        (502, 503, "KubernetesUnavailable"),
        (405, 500, "InternalError"),
    ],
)
def test_an_apiserver_answer_maps_through_its_class(http: int, status: int, type_name: str) -> None:
    """``from_response`` picks the class from the answer; the daemon error follows the class."""
    error = k8s.from_response(status=http, body=b'{"message": "m"}', method="GET", path="/x", retry_after="1")
    mapped = as_daemon_error(error)
    assert (mapped.status, mapped.error_type) == (status, type_name)


@pytest.mark.parametrize(
    ("advised", "seconds"),
    [
        ("inf", k8s.RETRY_AFTER_MAX),
        ("1e999", k8s.RETRY_AFTER_MAX),
        ("1e300", k8s.RETRY_AFTER_MAX),
        ("nan", 1.0),
        ("-inf", 1.0),
        ("-5", 0.0),
        ("soon", 1.0),
        ("2.5", 2.5),
    ],
)
def test_a_hostile_retry_after_is_bounded_all_the_way_to_the_answer(advised: str, seconds: float) -> None:
    """A proxy in front of the apiserver may advise anything: the wait stays bounded and the
    daemon's answer is still its 503 envelope (``inf`` once raised ``OverflowError`` from
    ``math.ceil`` inside the error handler: a bare 500 without the envelope)."""
    error = k8s.from_response(status=429, body=b"{}", method="GET", path="/x", retry_after=advised)
    assert isinstance(error, k8s.KubeTooManyRequests)
    assert error.retry_after == seconds
    status, body, headers = error_body(as_daemon_error(error))
    assert (status, body["error"]["type"], headers) == (503, "KubernetesUnavailable", {})
    assert 1 <= body["error"]["attrs"]["retry_after_seconds"] <= k8s.RETRY_AFTER_MAX

"""``plugins.sparkrun-k8s.objects.get`` of a DaemonJob (ops/executors/objects.py) hides another
principal's job as an unknown one, in the answer and in what it costs.

Keyed job ids are computable (``sha256(principal NUL key)``), so a reader who could tell "another
principal's job" from "no such job" learns whether that principal used an idempotency key
(docs/security.md). The answer is the same 404; the apiserver calls made on the way must be the
same too, or the time a SubjectAccessReview takes tells them apart.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from starlette.requests import Request

from sparkrun_operator.k8s.auth import UserInfo
from sparkrun_operator.ops.errors import NotFound
from sparkrun_operator.ops.executors.objects import get
from sparkrun_operator.ops.invocation import OperationContext
from sparkrun_operator.ops.settings import Settings
from sparkrun_operator.shim.boundary import CALLER
from sparkrun_operator.shim.identity import Caller
from sparkrun_operator.shim.state import ShimState

ALICE_JOB = "a" * 32
UNKNOWN = "b" * 32


class _Rest:
    """The apiserver as objects.get sees it: one DaemonJob of alice's; every review denied."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def get(self, resource: Any, name: str, namespace: str | None = None) -> Any:
        self.calls.append(f"get {resource.plural}")
        if name != ALICE_JOB:
            return None
        return {
            "metadata": {"name": name, "namespace": namespace, "resourceVersion": "7", "uid": "u"},
            "spec": {"operation": "workloads.sleep", "principal": {"username": "alice"}},
        }

    async def request(self, method: str, path: str, **_: Any) -> Any:
        self.calls.append(f"{method} {path.rsplit('/', 1)[-1]}")
        return {"status": {"allowed": False}}


def _ask(name: str) -> tuple[NotFound, list[str]]:
    rest = _Rest()
    ctx = OperationContext(
        rest=rest,  # type: ignore[arg-type]  # the two calls objects.get makes
        settings=Settings(namespace="tenant-a"),
        principal="bob",
        user=UserInfo(username="bob"),
    )
    with pytest.raises(NotFound) as caught:
        asyncio.run(get(ctx, {"kind": "DaemonJob", "name": name}))
    return caught.value, rest.calls


def test_another_principals_job_costs_what_an_unknown_one_does() -> None:
    hidden, hidden_calls = _ask(ALICE_JOB)
    unknown, unknown_calls = _ask(UNKNOWN)
    assert (hidden.status, hidden.error_type, hidden.detail) == (404, "KeyError", "'Unknown job'")
    assert (unknown.status, unknown.error_type, unknown.detail) == (
        hidden.status,
        hidden.error_type,
        hidden.detail,
    )
    assert hidden_calls == unknown_calls


class _Gate:
    """The shim's gate, counting what it is asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def require(self, caller: Any, scope: str) -> None:
        self.asked.append(f"require {scope}")

    async def admin(self, caller: Any) -> bool:
        self.asked.append("admin")
        return False


class _Jobs:
    async def find(self, job_id: str) -> Any:
        if job_id != ALICE_JOB:
            return None
        return {"metadata": {"name": job_id}, "spec": {"principal": {"username": "alice"}}}


def _access(name: str) -> tuple[NotFound, list[str]]:
    state = ShimState.__new__(ShimState)
    gate = _Gate()
    state.gate = gate  # type: ignore[assignment]
    state.jobs = _Jobs()  # type: ignore[assignment]
    caller = Caller(user=UserInfo(username="bob"), manager="daemon", via="bearer")
    request = Request({"type": "http", "method": "GET", "path": "/", "headers": [], CALLER: caller})
    with pytest.raises(NotFound) as caught:
        asyncio.run(state._job_access(request, name))
    return caught.value, gate.asked


def test_the_job_routes_ask_the_same_for_another_principals_job_and_an_unknown_one() -> None:
    hidden, hidden_asked = _access(ALICE_JOB)
    unknown, unknown_asked = _access(UNKNOWN)
    assert (hidden.status, hidden.error_type) == (unknown.status, unknown.error_type) == (404, "KeyError")
    assert hidden_asked == unknown_asked

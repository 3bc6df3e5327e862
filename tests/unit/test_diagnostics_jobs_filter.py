"""The diagnostics bundle's DaemonJob section shows a non-admin only its own jobs, deciding with
one uncached SubjectAccessReview of the caller's ``admin`` verb on ``sparkrun.dev/
daemonoperations`` in the API's namespace (``ops/executors/diagnostics.py``; the one rule of
``ops/authz.py``, issue 25). The fake client speaks the apiserver's JSON (list, review)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from sparkrun_operator.k8s.auth import UserInfo
from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.ops.executors import diagnostics
from sparkrun_operator.ops.invocation import OperationContext
from sparkrun_operator.ops.settings import Settings


def _job(name: str, owner: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "creationTimestamp": f"2026-01-01T00:00:0{name[-1]}Z"},
        "spec": {"operation": "workloads.launch", "principal": {"username": owner}},
        "status": {"state": "failed", "error": {"message": f"{owner}'s secret error"}},
    }


class FakeKube:
    """The two calls the section makes: a list of DaemonJobs and SubjectAccessReviews."""

    def __init__(self, admin: bool) -> None:
        self.admin = admin
        self.reviews: list[dict[str, Any]] = []

    async def list(self, resource: Any, namespace: str | None = None, **_: Any) -> list[dict[str, Any]]:
        assert namespace == "tenant-a"
        return [_job("job-1", "alice"), _job("job-2", "mallory"), _job("job-3", "alice")]

    async def request(self, method: str, path: str, body: Any = None, **_: Any) -> dict[str, Any]:
        assert (method, path) == ("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews")
        self.reviews.append(body["spec"])
        return {"status": {"allowed": self.admin}}


def _rows(admin: bool, calls: int = 1) -> tuple[list[list[Any]], FakeKube]:
    rest = FakeKube(admin)
    ctx = OperationContext(
        rest=cast(Kube, rest),
        settings=Settings(namespace="tenant-a"),
        principal="alice",
        user=UserInfo(username="alice", groups=("devs",)),
    )

    async def run() -> list[list[Any]]:
        return [await diagnostics._daemonjobs(ctx) for _ in range(calls)]

    return asyncio.run(run()), rest


@pytest.mark.parametrize(
    ("admin", "owners"), [(False, ["alice", "alice"]), (True, ["alice", "mallory", "alice"])]
)
def test_a_non_admin_sees_only_its_own_jobs(admin: bool, owners: list[str]) -> None:
    (rows,), rest = _rows(admin)
    by_id = {"job-1": "alice", "job-2": "mallory", "job-3": "alice"}
    assert sorted(by_id[row["id"]] for row in rows) == sorted(owners)
    assert rest.reviews == [
        {
            "user": "alice",
            "groups": ["devs"],
            "resourceAttributes": {
                "group": "sparkrun.dev",
                "resource": "daemonoperations",
                "verb": "admin",
                "namespace": "tenant-a",
            },
        }
    ]


def test_each_bundle_asks_again() -> None:
    """No cache: a principal whose admin binding was removed is filtered in the next bundle."""
    _, rest = _rows(False, calls=2)
    assert len(rest.reviews) == 2

"""The workload operations' lookups and preconditions, on a recording apiserver stand-in:
``workloads.lease`` / ``release`` refuse a workload written since the ETag the daemon API checked
(``ops/executors/ownership.py``: the check and the Lease's write are not one step), and a
workload addressed by name is read with one GET, never a list of the namespace
(``ops/executors/workloads/lifecycle.py`` ``find``)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sparkrun_operator.ops.errors import NotFound, PreconditionFailed
from sparkrun_operator.ops.executors.ownership import EXECUTORS
from sparkrun_operator.ops.executors.workloads import lifecycle
from sparkrun_operator.ops.invocation import OperationContext
from sparkrun_operator.ops.settings import Settings

LEASE = "plugins.sparkrun-k8s.workloads.lease"
RELEASE = "plugins.sparkrun-k8s.workloads.release"
WORKLOAD = {
    "metadata": {"name": "wl", "namespace": "ns", "uid": "u1", "resourceVersion": "8"},
    "spec": {"lease": {"ttlSeconds": 60}},
    "status": {"workloadId": "sparkrun_0123456789abcdef_0123456789ab"},
}


class _Rest:
    """One workload (at resourceVersion 8) and no Lease; records every call."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def as_manager(self, _: str) -> _Rest:
        return self

    async def get(self, resource: Any, name: str, namespace: str | None = None) -> Any:
        self.calls.append(f"get {resource.plural} {name}")
        if resource.plural == "inferenceworkloads" and name == "wl":
            return WORKLOAD
        return None

    async def list(self, resource: Any, namespace: str | None = None, **_: Any) -> list[Any]:
        self.calls.append(f"list {resource.plural}")
        return [WORKLOAD] if resource.plural == "inferenceworkloads" else []

    async def create(self, resource: Any, body: Any, namespace: str | None = None) -> Any:
        self.calls.append(f"create {resource.plural}")
        return body


def _ctx(rest: _Rest, if_match: str | None) -> OperationContext:
    return OperationContext(
        rest=rest,  # type: ignore[arg-type]  # the calls these operations make
        settings=Settings(namespace="ns"),
        principal="alice",
        if_match=if_match,
    )


@pytest.mark.parametrize("operation", [LEASE, RELEASE])
def test_a_lease_write_refuses_a_workload_changed_since_the_check(operation: str) -> None:
    rest = _Rest()
    with pytest.raises(PreconditionFailed) as refused:
        asyncio.run(EXECUTORS[operation](_ctx(rest, "7"), {"workload": "wl"}))
    assert (refused.value.attrs["etag"], refused.value.attrs["if_match"]) == ('"8"', '"7"')
    assert not any("leases" in call for call in rest.calls)  # the Lease is neither read nor written


def test_a_lease_write_at_the_checked_etag_goes_ahead() -> None:
    rest = _Rest()
    done = asyncio.run(EXECUTORS[LEASE](_ctx(rest, "8"), {"workload": "wl"}))
    assert done["owner"] == "alice"
    assert rest.calls[-1] == "create leases"


def test_a_workload_is_found_by_name_with_one_get_and_by_id_with_a_list() -> None:
    rest = _Rest()
    assert asyncio.run(lifecycle.find(rest, "ns", "wl")) is WORKLOAD  # type: ignore[arg-type]
    assert rest.calls == ["get inferenceworkloads wl"]
    found = asyncio.run(lifecycle.find(rest, "ns", "sparkrun_0123456789abcdef_0123456789ab"))  # type: ignore[arg-type]
    assert found is WORKLOAD
    assert rest.calls[-1] == "list inferenceworkloads"
    for unknown in ("other", "Not-A-Name", "sparkrun_ffff_ffff", "ns/other"):
        with pytest.raises(NotFound, match=f"Unknown workload: {unknown}"):
            asyncio.run(lifecycle.find(rest, "ns", unknown))  # type: ignore[arg-type]

"""``ops/rollout.py``'s reads of a workload's kept revisions are bounded and keep the workload's
own: ControllerRevisions of a StatefulSet whose pods carry the workload label come first in the
listing, yet the workload's revisions are found; a namespace with 100,000 of them is not read
whole."""

from __future__ import annotations

from typing import Any

import pytest

from sparkrun_operator.ops import rollout
from sparkrun_operator.ops.errors import Conflict
from tests.unit.plan.test_history import _world
from tests.unit.plan.test_history_hostile import _with_account
from tests.unit.plan.test_workload_plan import NAME

UID = "uid-w"


def _data(hash_: str) -> dict[str, Any]:
    return {"hash": hash_, "cause": "Created", "inputs": {}}


def _ours(number: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"qwen-{number}",
            "ownerReferences": [{"kind": "InferenceWorkload", "uid": UID, "controller": True}],
        },
        "revision": number,
        "data": _data(f"{number:010x}"),
    }


def _statefulset(i: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"aaa-{i:06d}",
            "ownerReferences": [{"kind": "StatefulSet", "uid": "uid-sts", "controller": True}],
        },
        "revision": i + 1,
        "data": {"spec": {"template": {}}},
    }


class PagingRest:
    """``request("GET", ...)`` of a ControllerRevision list, paged as kube-apiserver pages it."""

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items
        self.pages = 0

    async def request(self, method: str, path: str, *, query: dict[str, Any], **_: Any) -> Any:
        assert method == "GET"
        assert path.endswith("/namespaces/ns/controllerrevisions")
        assert query["labelSelector"] == "sparkrun.dev/workload=qwen"
        self.pages += 1
        start = int(query.get("continue") or 0)
        end = start + int(query["limit"])
        more = {"continue": str(end)} if end < len(self.items) else {}
        return {"items": self.items[start:end], "metadata": more}


WORKLOAD = {"metadata": {"name": "qwen", "namespace": "ns", "uid": UID}}


async def test_the_workloads_revisions_are_found_behind_a_statefulsets() -> None:
    rest = PagingRest([*(_statefulset(i) for i in range(300)), _ours(1), _ours(2), _ours(3)])
    kept = await rollout.kept_revisions(rest, WORKLOAD)  # type: ignore[arg-type]
    assert [n for n, _obj, _data in kept] == [1, 2, 3]


async def test_a_namespace_of_100000_revisions_is_not_read_whole() -> None:
    rest = PagingRest([_statefulset(i) for i in range(100_000)])
    assert await rollout.kept_revisions(rest, WORKLOAD) == []  # type: ignore[arg-type]
    assert rest.pages <= rollout.MAX_REVISIONS_SCANNED // 100


async def test_the_newest_are_kept_when_there_are_more_than_the_read_bound() -> None:
    count = rollout.MAX_REVISIONS_READ + 20
    rest = PagingRest([_ours(n) for n in range(1, count + 1)])
    kept = await rollout.kept_revisions(rest, WORKLOAD)  # type: ignore[arg-type]
    assert len(kept) == rollout.MAX_REVISIONS_READ
    assert kept[-1][0] == count


async def test_a_rollback_the_operator_would_refuse_is_refused_before_the_pin_is_written() -> None:
    """Revision 1 ran as ServiceAccount ``power``, the spec names none now: the pin would change
    nothing but UpToDate (``revisions.rollback_refused``), so the caller hears it at once (409
    ``rollback_refused``) and nothing is written."""
    first, _revisions, _rev = _world(_with_account("power"))
    doc = {**first.revisions[0], "metadata": {**first.revisions[0]["metadata"], "uid": "u1"}}
    workload = {
        "metadata": {"name": NAME, "namespace": "ns", "uid": "uid-w", "generation": 2},
        "spec": _with_account(None).to_wire(),
    }
    with pytest.raises(Conflict) as refused:
        await rollout.rollback(PagingRest([doc]), workload, revision=1)  # type: ignore[arg-type]
    assert refused.value.attrs["reason"] == "rollback_refused"
    assert "'power'" in str(refused.value)

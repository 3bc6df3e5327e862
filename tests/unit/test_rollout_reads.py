"""``ops/rollout.py``'s reads of a workload's kept revisions are bounded and keep the workload's
own: ControllerRevisions of a StatefulSet whose pods carry the workload label come first in the
listing, yet the workload's revisions are found; a namespace with 100,000 of them is not read
whole. They are read as the planner reads them (``revisions.revision_from`` and ``usable``): one
the operator would not serve (frozen inputs that do not read back, an owner of another kind) is
neither listed nor a rollback target."""

from __future__ import annotations

from typing import Any

import pytest

from sparkrun_operator.ops import rollout
from sparkrun_operator.ops.errors import Conflict, NotFound
from tests.unit.plan.test_history import IMAGE_A, _image, _world
from tests.unit.plan.test_history_hostile import _with_account
from tests.unit.plan.test_workload_plan import NAME

UID = "uid-w"


#: A ServingRevision the planner made (its frozen inputs read back).
_SERVED: dict[str, Any] = _world(_image(IMAGE_A))[0].revisions[0]["data"]


def _data(hash_: str) -> dict[str, Any]:
    return {**_SERVED, "hash": hash_, "cause": "Created"}


def _ours(number: int, data: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"qwen-{number}",
            "uid": f"uid-qwen-{number}",
            "ownerReferences": [{"kind": "InferenceWorkload", "uid": UID, "controller": True}],
        },
        "revision": number,
        "data": data if data is not None else _data(f"{number:010x}"),
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
    assert [found.number for _obj, found in kept] == [1, 2, 3]


async def test_a_namespace_of_100000_revisions_is_not_read_whole() -> None:
    rest = PagingRest([_statefulset(i) for i in range(100_000)])
    assert await rollout.kept_revisions(rest, WORKLOAD) == []  # type: ignore[arg-type]
    assert rest.pages <= rollout.MAX_REVISIONS_SCANNED // 100


async def test_the_newest_are_kept_when_there_are_more_than_the_read_bound() -> None:
    count = rollout.MAX_REVISIONS_READ + 20
    rest = PagingRest([_ours(n) for n in range(1, count + 1)])
    kept = await rollout.kept_revisions(rest, WORKLOAD)  # type: ignore[arg-type]
    assert len(kept) == rollout.MAX_REVISIONS_READ
    assert kept[-1][1].number == count


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


async def test_a_revision_the_operator_would_not_serve_is_not_listed_nor_a_rollback_target() -> None:
    """Revision 2's data is a ServingRevision whose frozen inputs do not read back; revision 3 is
    controlled by a StatefulSet that happens to have the workload's UID. The planner serves
    neither (``revisions.usable`` / ``revision_from``), so the history does not list them and an
    undo to them is ``revision_not_kept``, with no write."""
    broken = _ours(2, {**_SERVED, "hash": "2222222222", "inputs": {"spec": {"image": 7}}})
    other = _ours(3)
    other["metadata"]["ownerReferences"] = [{"kind": "StatefulSet", "uid": UID, "controller": True}]
    rest = PagingRest([_ours(1), broken, other])
    assert [found.number for _obj, found in await rollout.kept_revisions(rest, WORKLOAD)] == [1]  # type: ignore[arg-type]
    workload = {**WORKLOAD, "metadata": {**WORKLOAD["metadata"], "generation": 1}, "spec": {}}
    for number in (2, 3):
        with pytest.raises(NotFound) as missing:
            await rollout.rollback(rest, workload, revision=number)  # type: ignore[arg-type]
        assert missing.value.attrs == {"reason": "revision_not_kept", "kept": [1]}


class RecordingRest(PagingRest):
    """A :class:`PagingRest` that also takes PATCHes and keeps their bodies."""

    def __init__(self, items: list[dict[str, Any]]) -> None:
        super().__init__(items)
        self.patches: list[Any] = []

    async def request(self, method: str, path: str, *, query: dict[str, Any] | None = None, **kw: Any) -> Any:
        if method == "PATCH":
            self.patches.append(kw["body"])
            return {}
        return await super().request(method, path, query=query or {}, **kw)


@pytest.mark.parametrize(
    ("rollout_spec", "kwargs", "expected"),
    [
        ({"apply": "OnRequest", "approve": "abcdef0123"}, {"revision": 1}, {"revision": 1}),
        ({"apply": "OnRequest", "approve": "abcdef0123", "revision": 1}, {"clear": True}, {}),
    ],
)
async def test_a_rollback_or_unpin_removes_the_approve_in_the_same_patch(
    rollout_spec: dict[str, Any], kwargs: dict[str, Any], expected: dict[str, Any]
) -> None:
    """A rollback forgets earlier approvals: pinning (or unpinning) removes
    ``spec.rollout.approve`` in the same JSON patch, after its test of the generation."""
    rest = RecordingRest([_ours(1), _ours(2)])
    workload = {
        **WORKLOAD,
        "metadata": {**WORKLOAD["metadata"], "generation": 4},
        "spec": {"rollout": rollout_spec},
    }
    await rollout.rollback(rest, workload, **kwargs)  # type: ignore[arg-type]
    [patch] = rest.patches
    assert patch[0] == {"op": "test", "path": "/metadata/generation", "value": 4}
    doc: dict[str, Any] = {"rollout": dict(rollout_spec)}
    for op in patch[1:]:
        key = op["path"].removeprefix("/spec/rollout/")
        if op["op"] == "remove":
            del doc["rollout"][key]
        else:
            doc["rollout"][key] = op["value"]
    assert doc["rollout"] == {"apply": "OnRequest", **expected}

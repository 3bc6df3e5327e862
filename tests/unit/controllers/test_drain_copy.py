"""A workload's copy of its groups' moves in a cluster's drain (``status.drain``, ADR 0049): the
``iw_drains`` index parses each cluster's ``status.drain`` once per cluster change, the planner
copies the workload's entry (its own cluster's first) into its status, and a cluster event pokes
the status lane of only the workloads whose entry changed (``controllers/workload_pokes.py``
``drain_changes``), not the full lane of every listed workload on every event; the full lanes
of a cluster's workloads are poked only when what their plans read of it changed
(``placement_changed``)."""

from __future__ import annotations

from typing import Any

from sparkrun_operator.api.drain import ClusterDrainStatus, GroupDrain
from sparkrun_operator.controllers import workload as controller
from sparkrun_operator.controllers.workload_pokes import drain_changes, placement_changed
from sparkrun_operator.plan import drain
from tests.unit.controllers.recording_memo import patches_of, recording_memo
from tests.unit.controllers.test_workload_lanes import _body, _full_lane, _indices, _refresh


def _group(workload: str, replica: int, state: str = "Moving", **kw: Any) -> GroupDrain:
    return GroupDrain(
        namespace="ns",
        workload=workload,
        replica=replica,
        jobset=f"{workload}-r{replica}",
        state=state,  # type: ignore[arg-type]
        **kw,
    )


def _cluster(*groups: GroupDrain, state: str = "Draining") -> dict[str, Any]:
    status = ClusterDrainStatus(request="r1", state=state, groups=list(groups))  # type: ignore[arg-type]
    return {"metadata": {"name": "pool"}, "status": {"drain": status.to_wire()}}


async def test_the_status_lane_copies_the_workloads_entry_from_the_index() -> None:
    ctx = recording_memo()
    full = _full_lane(ctx)
    writes = controller.Writes()
    moving = _cluster(_group("qwen", 0, unrouted=["qwen-0-leader-0-0-x"]), _group("other", 0))
    done = _cluster(_group("qwen", 0, state="Ready"), state="Done")
    indices = _indices(ready=True)
    indices["iw_drains"] = {
        ("ns", "qwen"): [
            drain.workload_views("z-pool", moving["status"]["drain"])[("ns", "qwen")],
            drain.workload_views("a-old", done["status"]["drain"])[("ns", "qwen")],
        ]
    }
    assert await _refresh(ctx, _body(), indices, writes)
    (_, patch), *_ = patches_of(ctx)
    copied = patch["status"]["drain"]
    # the workload names no cluster: the first by name ("a-old"), only its own groups
    assert (copied["cluster"], copied["state"]) == ("a-old", "Done")
    assert [(g["workload"], g["state"]) for g in copied["groups"]] == [("qwen", "Ready")]
    assert not full.is_set()
    # gone from every drain: the copy goes too
    indices["iw_drains"] = {}
    assert await _refresh(ctx, _body(patch["status"], version="2"), indices, writes)
    assert patches_of(ctx)[-1][1]["status"]["drain"] is None
    await ctx.http.aclose()


def test_a_cluster_event_pokes_only_the_workloads_whose_entry_changed() -> None:
    seen: dict[str, Any] = {}
    first = _cluster(_group("qwen", 0), _group("other", 0, state="Pending"))
    assert drain_changes(seen, "pool", first) == {("ns", "qwen"), ("ns", "other")}
    # the same drain again (another status write of the cluster): nothing to copy
    assert (
        drain_changes(seen, "pool", _cluster(_group("qwen", 0), _group("other", 0, state="Pending"))) == set()
    )
    # one group progresses: only its workload
    moved = _cluster(_group("qwen", 0, state="Ready"), _group("other", 0, state="Pending"))
    assert drain_changes(seen, "pool", moved) == {("ns", "qwen")}
    # the drain's state is part of every workload's copy
    blocked = _cluster(_group("qwen", 0, state="Ready"), _group("other", 0, state="Pending"), state="Blocked")
    assert drain_changes(seen, "pool", blocked) == {("ns", "qwen"), ("ns", "other")}
    # a workload no longer listed (its entry goes), and another cluster's events are its own
    assert drain_changes(seen, "pool", _cluster(_group("other", 0, state="Pending"), state="Blocked")) == {
        ("ns", "qwen")
    }
    assert drain_changes(seen, "else", first) == {("ns", "qwen"), ("ns", "other")}
    # the cluster deleted: what it listed
    assert drain_changes(seen, "pool", None) == {("ns", "other")}
    assert "pool" not in seen
    # hostile or absent records read as no drain
    assert drain_changes(seen, "x", {"status": {"drain": {"groups": "junk"}}}) == set()
    assert drain_changes(seen, "x", {"status": None}) == set()


def test_a_cluster_status_write_re_plans_no_workload() -> None:
    # review: every event of a cluster poked the full lane of each workload on it; a drain writes
    # the cluster's status every few seconds, so every workload there was re-planned each time
    seen: dict[str, Any] = {}
    cluster = {**_cluster(_group("qwen", 0)), "spec": {"default": True}}
    cluster["metadata"]["creationTimestamp"] = "2026-12-06T12:00:00Z"
    assert placement_changed(seen, "pool", cluster)  # first seen
    progressed = {**cluster, "status": {**_cluster(_group("qwen", 0, state="Ready"))["status"]}}
    assert not placement_changed(seen, "pool", progressed)
    assert placement_changed(seen, "pool", {**progressed, "spec": {"default": False}})
    applied = {**progressed, "spec": {"default": False}, "status": {"applied": {"gpuResource": "x"}}}
    assert placement_changed(seen, "pool", applied)
    assert not placement_changed(seen, "pool", applied)
    assert placement_changed(seen, "pool", None)  # deleted
    assert "pool" not in seen

"""The workload controller's status lane (``controllers/workload.py`` ``prepare_status``) and the
writes both lanes share, on in-memory indexes and a recording client: a readiness change is
written by a status-only pass (urgent), a plan with actions is left to the full lane (which is
poked; a status-only change is not), and a status planned from older observed state never
overwrites a newer one."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf
import pytest

from sparkrun_operator.api.meta import utcnow
from sparkrun_operator.api.workload import InferenceWorkloadSpec, InferenceWorkloadStatus
from sparkrun_operator.controllers import workload as controller
from sparkrun_operator.controllers.lane import Pending
from sparkrun_operator.controllers.memo import Memo
from sparkrun_operator.plan.workload import Observation, ObservedJobSet, ObservedPod, plan
from sparkrun_operator.render import keys
from tests.unit.controllers.recording_memo import patches_of, recording_memo

KEY = ("ns", "qwen")
SERVICE = {
    "spec": {
        "selector": {keys.LABEL_WORKLOAD: "qwen", keys.LABEL_ROLE: "leader"},
        "ports": [{"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"}],
        "publishNotReadyAddresses": False,
    }
}


def _body(status: dict[str, Any] | None = None, version: str = "1") -> dict[str, Any]:
    return {
        "metadata": {
            "name": "qwen",
            "namespace": "ns",
            "uid": "uid-w",
            "generation": 1,
            "resourceVersion": version,
            "creationTimestamp": "2026-09-01T12:00:00Z",
        },
        "spec": {"model": {"name": "Qwen/Qwen3-0.6B"}},
        "status": status or {},
    }


def _indices(*, ready: bool, service: bool = True) -> dict[str, Any]:
    spec = InferenceWorkloadSpec.model_validate({"model": {"name": "Qwen/Qwen3-0.6B"}})
    probe = Observation(
        name="qwen",
        namespace="ns",
        uid="uid-w",
        generation=1,
        spec=spec,
        status=InferenceWorkloadStatus(),
        now=utcnow(),
    )
    revision = plan(probe).revision
    assert revision is not None
    js = ObservedJobSet(name=f"qwen-0-{revision[:5]}", uid="u", replica=0, revision=revision)
    pod = ObservedPod(
        name=f"{js.name}-leader-0-0-x",
        jobset=js.name,
        role="leader",
        replica=0,
        revision=revision,
        phase="Running",
        ready=ready,
        ip="10.0.0.7",
        node="gpu-0",
    )
    return {
        "iw_jobsets": {KEY: [js]},
        "iw_pods": {KEY: [pod]},
        "iw_services": {KEY: [SERVICE]} if service else {},
    }


def _prepare(ctx: Memo, body: dict[str, Any], indices: dict[str, Any], writes: Any) -> Pending | None:
    return controller.prepare_status(
        ctx,
        body=body,  # type: ignore[arg-type]
        indices=indices,
        expectations=controller.Expectations(),
        writes=writes,
    )


async def _refresh(ctx: Memo, body: dict[str, Any], indices: dict[str, Any], writes: Any) -> bool:
    pending = _prepare(ctx, body, indices, writes)
    return pending is not None and await pending.write()


def _full_lane(ctx: Memo) -> asyncio.Event:
    full = ctx.triggers.register(("iw", *KEY))
    full.clear()
    return full


def _sent(ctx: Memo) -> list[dict[str, Any]]:
    return [patch["status"] for _, patch in patches_of(ctx)]


async def test_a_readiness_change_is_written_by_the_status_lane() -> None:
    ctx = recording_memo()
    full = _full_lane(ctx)
    writes = controller.Writes()
    assert await _refresh(ctx, _body(), _indices(ready=False), writes)
    assert _sent(ctx)[-1]["readyReplicas"] == 0
    first = _sent(ctx)[-1]
    # the leader turns Ready: urgent (written at once, first in the gate)
    pending = _prepare(ctx, _body(first, version="2"), _indices(ready=True), writes)
    assert pending is not None
    assert pending.urgent
    assert await _refresh(ctx, _body(version="2"), _indices(ready=True), writes)
    status = _sent(ctx)[-1]
    assert (status["readyReplicas"], status["phase"]) == (1, "Running")
    assert status["endpoints"] == [{"replica": 0, "url": "http://10.0.0.7:8000", "ready": True}]
    # a poke before the watch shows that write (the object is still the one it was planned
    # from): compared with the write, nothing differs, nothing is sent or taken for readiness
    assert _prepare(ctx, _body(version="2"), _indices(ready=True), writes) is None
    # the watch shows the write: nothing differs, nothing is sent
    assert not await _refresh(ctx, _body(status, version="3"), _indices(ready=True), writes)
    assert len(_sent(ctx)) == 2
    assert writes.ready == "True"
    # a status-only change needs no full pass
    assert not full.is_set()
    await ctx.http.aclose()


async def test_a_progress_only_change_is_not_urgent() -> None:
    ctx = recording_memo()
    writes = controller.Writes()
    indices = _indices(ready=False)
    assert await _refresh(ctx, _body(), indices, writes)
    status = _sent(ctx)[-1]
    # the leader's startup timeline (a progress report) is all that differs
    stale = {**status, "startup": [e for e in status["startup"] if e["stage"] != "scheduled"]}
    assert stale != status
    pending = _prepare(ctx, _body(stale, version="2"), indices, writes)
    assert pending is not None
    assert not pending.urgent
    await ctx.http.aclose()


async def test_a_plan_with_actions_is_left_to_the_full_lane() -> None:
    ctx = recording_memo()
    full = _full_lane(ctx)
    assert _prepare(ctx, _body(), _indices(ready=True, service=False), controller.Writes()) is None
    assert full.is_set()  # the Service is missing: the full lane is poked to apply it
    body = _body()
    body["metadata"]["deletionTimestamp"] = "2026-09-01T12:01:00Z"
    assert not await _refresh(ctx, body, _indices(ready=True), controller.Writes())
    assert _sent(ctx) == []
    await ctx.http.aclose()


async def test_an_older_observation_does_not_overwrite_a_newer_status() -> None:
    ctx = recording_memo()
    writes = controller.Writes()
    old = InferenceWorkloadStatus(phase="Pending")
    new = InferenceWorkloadStatus(phase="Running", ready_replicas=1)
    assert await writes.write(ctx, body=_body(), status=new, observed_at=2.0)
    assert not await writes.write(ctx, body=_body(version="2"), status=old, observed_at=1.0)
    # what only the older pass knows (refused actions) is written all the same
    assert await writes.write(ctx, body=_body(version="2"), status=old, observed_at=1.0, force=True)
    assert [s["phase"] for s in _sent(ctx)] == ["Running", "Pending"]
    await ctx.http.aclose()


async def test_a_full_pass_writes_once_then_records_the_request_and_emits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The full lane's pass on the one controller shape (``reconciler.run_pass``): with nothing
    to act on it writes the planned status once, in a write slot, records the generation it
    answered, moves the Ready gauge and asks for no early pass; a deleted workload does nothing."""
    ctx = recording_memo()
    posted: list[str] = []
    monkeypatch.setattr(kopf, "event", lambda body, *, type, reason, message="": posted.append(reason))
    writes = controller.Writes()

    async def full(body: dict[str, Any]) -> float | None:
        return await controller.reconcile(
            ctx,
            body=body,  # type: ignore[arg-type]
            indices=_indices(ready=True),
            expectations=controller.Expectations(),
            writes=writes,
            logger=logging.getLogger("test"),
        )

    assert await full(_body()) is None
    [status] = _sent(ctx)
    assert (status["phase"], status["readyReplicas"]) == ("Running", 1)
    assert ctx.reconciled[KEY] == (1, None)
    ready = ctx.metrics.registry.get_sample_value(
        "sparkrun_operator_objects", {"kind": "InferenceWorkload", "ready": "True"}
    )
    assert (writes.ready, ready) == ("True", 1)
    assert posted == []
    deleted = _body(version="2")
    deleted["metadata"]["deletionTimestamp"] = "2026-09-01T12:01:00Z"
    assert await full(deleted) is None
    assert len(_sent(ctx)) == 1
    await ctx.http.aclose()

"""The lease lane's judgement against hostile or racing Lease writes (ADR 0049, review of issue 29).

One wake of the lane (``controllers/ownership.judge_once``) on a stand-in context: the watch's
Lease cache, the observer's clock and a recording client. A Lease that goes missing (deleted,
unlabelled so the watch drops it, or rewritten as someone else's) must lapse a full TTL after it
went, never at once; a renew that reached the apiserver but not yet the watch must stop a
``deleteOnExit`` delete; the delete carries the workload's UID and resourceVersion.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from dataclasses import dataclass, field
from typing import Any

import kopf
from kopf._core.engines.posting import event_queue_loop_var, event_queue_var, settings_var

from sparkrun_operator.api.ownership import lease_name
from sparkrun_operator.controllers.ownership import judge_once
from sparkrun_operator.controllers.triggers import Triggers
from sparkrun_operator.ops.leases import RecordClock
from sparkrun_operator.ops.ownership import lease_doc

NOW = dt.datetime(2026, 12, 6, 12, 0, tzinfo=dt.UTC)
LOG = logging.getLogger(__name__)


def _workload(delete_on_exit: bool) -> dict[str, Any]:
    return {
        "apiVersion": "sparkrun.dev/v1alpha1",
        "kind": "InferenceWorkload",
        "metadata": {"name": "wl", "namespace": "ns", "uid": "uid-1", "resourceVersion": "77"},
        "spec": {"lease": {"ttlSeconds": 30, "deleteOnExit": delete_on_exit}},
    }


def _lease(rv: str, holder: str | None = "alice") -> dict[str, Any]:
    doc = lease_doc(
        _workload(True), holder=holder, session=None, ttl=30, now=NOW, acquired=None, transitions=0
    )
    doc["metadata"]["resourceVersion"] = rv
    return doc


@dataclass
class _Watch:
    now: list[float]
    cached: dict[str, Any] | None = None
    verdicts: dict[Any, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.clock = RecordClock(clock=lambda: self.now[0])

    def synced(self, namespace: str) -> bool:
        return True

    def lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.cached if name == lease_name("wl") else None


@dataclass
class _Kube:
    """Answers a GET of the Lease with ``fresh`` (the apiserver's current one); records writes."""

    fresh: dict[str, Any] | None = None
    deletes: list[dict[str, Any]] = field(default_factory=list)
    patches: list[Any] = field(default_factory=list)
    #: The workload as the apiserver has it now (its resourceVersion moves on status writes).
    workload: dict[str, Any] = field(default_factory=lambda: _workload(True))

    async def get(self, resource: Any, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        if resource.plural == "inferenceworkloads":
            return self.workload
        assert resource.plural == "leases"
        return self.fresh

    async def delete(self, resource: Any, name: str, namespace: str | None = None, **kw: Any) -> bool:
        self.deletes.append({"name": name, **kw})
        return True

    async def merge_patch(self, resource: Any, name: str, patch: Any, namespace: str | None = None) -> Any:
        self.patches.append(patch)
        return {}


@dataclass
class _Ctx:
    ownership: _Watch
    kube: _Kube
    triggers: Triggers = field(default_factory=Triggers)


def _run(ctx: _Ctx, body: dict[str, Any], watched_since: float) -> float | None:
    async def go() -> float | None:
        settings_var.set(kopf.OperatorSettings())
        event_queue_var.set(asyncio.Queue())
        event_queue_loop_var.set(asyncio.get_running_loop())
        return await judge_once(ctx, body, watched_since=watched_since, logger=LOG)  # type: ignore[arg-type]

    return asyncio.run(go())


def test_a_lease_that_goes_missing_lapses_a_full_ttl_after_never_at_once() -> None:
    now = [0.0]
    watch = _Watch(now=now, cached=_lease("5"))
    ctx = _Ctx(ownership=watch, kube=_Kube())
    body = _workload(delete_on_exit=True)
    assert _run(ctx, body, 0.0) is not None
    for missing in (None, {**_lease("6"), "metadata": {**_lease("6")["metadata"], "ownerReferences": []}}):
        now[0] += 1_000.0  # long after the lane started, while the holder renewed
        watch.cached = _lease(str(now[0]))
        _run(ctx, body, 0.0)
        now[0] += 1.0
        watch.cached = missing  # deleted or unlabelled (the watch drops it), or made another's
        wait = _run(ctx, body, 0.0)
        assert ctx.kube.deletes == []
        assert watch.verdicts[("ns", "wl")].state == "Unclaimed"
        assert wait is not None
        assert wait > 29.0
    now[0] += 31.0
    _run(ctx, body, 0.0)
    assert [d["name"] for d in ctx.kube.deletes] == ["wl"]  # a full TTL after it went: it lapses


def test_a_renew_the_watch_has_not_delivered_stops_the_delete() -> None:
    now = [0.0]
    watch = _Watch(now=now, cached=_lease("5"))
    kube = _Kube(fresh=_lease("6"))  # the holder renewed; the watch still shows rv 5
    ctx = _Ctx(ownership=watch, kube=kube)
    body = _workload(delete_on_exit=True)
    _run(ctx, body, 0.0)
    now[0] = 31.0
    wait = _run(ctx, body, 0.0)
    assert kube.deletes == []
    assert wait is not None
    kube.fresh = _lease("5")  # no renew after all: the apiserver agrees with the watch
    kube.workload = _workload(False)  # but deleteOnExit was just turned off
    assert _run(ctx, body, 0.0) is not None
    assert kube.deletes == []
    kube.workload = _workload(True)
    _run(ctx, body, 0.0)
    assert kube.deletes == [
        {"name": "wl", "propagation": "Background", "uid": "uid-1", "resource_version": "77"}
    ]


def test_an_unreadable_status_lease_is_no_previous_verdict() -> None:
    # review: status.lease was validated unguarded: one that does not read (anyone who may
    # write the status can make one) raised on every wake and the lease was never judged
    now = [0.0]
    watch = _Watch(now=now, cached=_lease("5"))
    ctx = _Ctx(ownership=watch, kube=_Kube())
    body = {**_workload(delete_on_exit=False), "status": {"lease": {"state": "Held", "ttlSeconds": "x"}}}
    wait = _run(ctx, body, 0.0)
    assert wait is not None
    assert watch.verdicts[("ns", "wl")].state == "Held"
    now[0] = 31.0
    assert _run(ctx, body, 0.0) is None
    assert watch.verdicts[("ns", "wl")].state == "Lapsed"
    assert ctx.kube.patches == [{"metadata": {"labels": {"sparkrun.dev/orphaned": "true"}}}]


def test_a_holder_written_with_kubectl_reaches_no_terminal_as_control_characters() -> None:
    """A tenant writes holderIdentity directly (its Lease RBAC): escape sequences and bidi
    overrides must not reach ``kubectl describe`` (the condition), Events or the listing."""
    from sparkrun_operator.api.ownership import LeaseSpec
    from sparkrun_operator.controllers.ownership import abandoned_message
    from sparkrun_operator.ops.ownership import info
    from sparkrun_operator.plan.workload.ownership import judge

    hostile = "mallory\x1b]0;owned\x07\u202eevil\u200b\n"
    lease = _lease("5", holder=hostile)
    verdict = judge(
        LeaseSpec(ttl_seconds=30, delete_on_exit=True),
        workload="wl",
        lease=lease,
        own=True,
        record_seen=0.0,
        watched_since=0.0,
        now=31.0,
        wall=NOW,
        previous=None,
    )
    held = info(_workload(True), lease, held=True)
    for text in (verdict.status.holder or "", abandoned_message(verdict.status, lease), held.owner or ""):
        assert text.isprintable(), repr(text)
        assert "mallory" in text


def test_a_renew_time_at_the_end_of_the_calendar_does_not_break_the_listing() -> None:
    """renewTime is the writer's: a tenant may write any valid time (year 9999 is one)."""
    from sparkrun_operator.ops.ownership import info

    lease = _lease("5")
    lease["spec"]["renewTime"] = "9999-12-31T23:59:59.000000Z"
    listed = info(_workload(False), lease, held=True)
    assert listed.renewed == "9999-12-31T23:59:59.000000Z"
    assert listed.expires_at is None

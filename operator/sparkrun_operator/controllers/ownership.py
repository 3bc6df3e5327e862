"""The lease lane (ADR 0049): when an ephemeral workload's ownership lease lapses, act.

One kopf daemon (``iw-lease``) per workload with ``spec.lease``, beside its reconcile lanes and
independent of them. It wakes on an event of its ownership Lease (the label-selected watch of
``controllers/ownership_watch.py``: a renew wakes this lane only, never a reconcile), on an event
of the workload, and at the instant the lease could lapse (a deadline, no polling). Each wake:

- judges the lease (``plan/workload/ownership.judge``) on the operator's own monotonic clock:
  a Lease record unchanged for ``spec.lease.ttlSeconds`` lapsed; an unclaimed lease counts from
  when this daemon started (an operator restart or a takeover gives a full TTL: it never
  deletes early); only a Lease of the derived name owned by the workload's UID counts;
- when the verdict changed (state or holder), stores it for the planner and pokes the status
  lane, which writes ``status.lease`` and the ``Owned`` condition (a renew writes nothing);
- lapsed with ``deleteOnExit``: posts the Event ``Abandoned`` and deletes the workload (UID
  precondition); lapsed without: labels it ``sparkrun.dev/orphaned=true``; owned again: removes
  the label. The delete is made only when the apiserver's Lease still has the record judged
  (a renew the watch has not delivered wins) and at the workload's UID and resourceVersion.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from typing import Any, Final, cast

import kopf

from sparkrun_operator.api.meta import parse_time
from sparkrun_operator.api.ownership import LAPSED, LeaseStatus, lease_name
from sparkrun_operator.api.resources import INFERENCE_WORKLOAD
from sparkrun_operator.controllers.loop import poked
from sparkrun_operator.controllers.memo import Memo
from sparkrun_operator.controllers.ownership_watch import lane_key
from sparkrun_operator.controllers.workload_pokes import status_key
from sparkrun_operator.k8s import errors
from sparkrun_operator.k8s.resources import LEASES, resource_of
from sparkrun_operator.ops.ownership import judged, spec_of
from sparkrun_operator.plan.workload.ownership import judge, observed, trusted
from sparkrun_operator.render import keys

__all__ = ["abandoned_message", "register"]

WORKLOAD_ID: Final = (INFERENCE_WORKLOAD.group, INFERENCE_WORKLOAD.version, INFERENCE_WORKLOAD.plural)
WORKLOADS: Final = resource_of(INFERENCE_WORKLOAD)
REASON_ABANDONED: Final = "Abandoned"
#: Past the deadline by this much before judging again (the clock's deadline is exact; the
#: verdict must see the TTL passed).
SLACK: Final = 0.05
#: A lane whose watch has not listed yet, or whose write failed, looks again after this.
RETRY_SECONDS: Final = 2.0


def _span(seconds: float) -> str:
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


def abandoned_message(verdict: LeaseStatus, lease: Mapping[str, Any] | None) -> str:
    """The ``Abandoned`` Event's message: that it was abandoned, who held it and for how long
    (acquireTime to the last renewTime, both the holder's clock)."""
    spec = (lease or {}).get("spec") or {}
    renewed = parse_time(spec.get("renewTime"))
    if verdict.holder and verdict.acquired is not None and renewed is not None:
        held = f"held by {verdict.holder} for {_span((renewed - verdict.acquired).total_seconds())}"
    elif verdict.holder:
        held = f"held by {verdict.holder}"
    else:
        held = "never claimed"
    return (
        f"abandoned: ownership lease {verdict.lease} not renewed for {verdict.ttl_seconds}s ({held}); "
        "deleteOnExit: deleting the workload"
    )


async def _label(ctx: Memo, meta: Mapping[str, Any], orphaned: bool) -> None:
    labels = meta.get("labels") or {}
    if (labels.get(keys.LABEL_ORPHANED) == "true") == orphaned:
        return
    patch = {"metadata": {"labels": {keys.LABEL_ORPHANED: "true" if orphaned else None}}}
    await ctx.kube.merge_patch(WORKLOADS, str(meta["name"]), patch, str(meta["namespace"]))


async def _unleased(ctx: Memo, body: Mapping[str, Any], logger: logging.Logger | Any) -> None:
    """When the lane stops because ``spec.lease`` went away (the workload is permanent again),
    the orphan label goes too; never for a workload being deleted."""
    meta = body.get("metadata") or {}
    if spec_of(body) is not None or meta.get("deletionTimestamp"):
        return
    try:
        await _label(ctx, meta, orphaned=False)
    except errors.KubeError as error:
        logger.warning("lease lane: the orphan label stays: %s", error)


async def judge_once(
    ctx: Memo, body: Mapping[str, Any], *, watched_since: float, logger: logging.Logger | Any
) -> float | None:
    """One wake of the lane: judge, report, act; seconds until the lease could lapse (``None``:
    nothing to time: lapsed, gone, or no spec.lease)."""
    meta = body.get("metadata") or {}
    namespace, name = str(meta["namespace"]), str(meta["name"])
    spec = spec_of(body)
    if spec is None or meta.get("deletionTimestamp"):
        return None
    watch = ctx.ownership
    if not watch.synced(namespace):
        return RETRY_SECONDS
    lease = watch.lease(namespace, lease_name(name))
    uid = str(meta.get("uid") or "")
    own = trusted(lease, workload=name, uid=uid)
    # NB: a Lease gone missing (deleted, unlabelled, made another's) is timed from when it went
    record = observed(lease, own=own)
    seen = watch.clock.seen((namespace, lease_name(name)), record)
    key = (namespace, name)
    # NB: status.lease is the operator's, but anyone who may edit the status could break it:
    # unreadable, it is no previous verdict (never an error on every wake)
    previous = watch.verdicts.get(key)
    if previous is None:
        previous = judged(body)
    verdict = judge(
        spec,
        workload=name,
        lease=lease,
        own=own,
        record_seen=seen,
        watched_since=watched_since,
        now=watch.clock.clock(),
        wall=dt.datetime.now(dt.UTC).replace(microsecond=0),
        previous=previous,
    )
    if watch.verdicts.get(key) != verdict.status:
        watch.verdicts[key] = verdict.status
        ctx.triggers.poke(status_key(namespace, name))
    lapsed = verdict.status.state == LAPSED
    try:
        if lapsed and spec.delete_on_exit:
            # NB: a renew the watch has not delivered yet must win: the apiserver's Lease decides
            fresh = await ctx.kube.get(LEASES, lease_name(name), namespace)
            if observed(fresh, own=trusted(fresh, workload=name, uid=uid)) != record:
                return RETRY_SECONDS
            # NB: at the UID and resourceVersion of the workload as read now: a spec.lease
            # changed meanwhile (TTL, deleteOnExit) wins
            current = await ctx.kube.get(WORKLOADS, name, namespace)
            if current is None:
                return None
            now_meta = current.get("metadata") or {}
            if now_meta.get("uid") != uid or spec_of(current) != spec or now_meta.get("deletionTimestamp"):
                return RETRY_SECONDS
            version = str(now_meta.get("resourceVersion") or "") or None
            await ctx.kube.delete(
                WORKLOADS,
                name,
                namespace,
                propagation="Background",
                uid=uid or None,
                resource_version=version,
            )
            message = abandoned_message(verdict.status, lease)
            kopf.event(cast(kopf.Body, body), type="Normal", reason=REASON_ABANDONED, message=message)
            logger.info("%s", message)
            return None
        await _label(ctx, meta, orphaned=lapsed)
    except errors.KubeError as error:
        logger.warning("lease lane: %s", error)
        return RETRY_SECONDS
    return verdict.remaining + SLACK if verdict.remaining is not None else None


def register(registry: kopf.OperatorRegistry) -> None:
    """The lease watch (started with the operator) and the ``iw-lease`` daemon."""

    @kopf.on.startup(id="ownership-watch-start", registry=registry)
    async def start(*, memo: Any, **_: Any) -> None:
        ctx: Memo = memo.ctx
        ctx.ownership.start(ctx.kube, ctx.config.served_namespaces, ctx.triggers)
        await ctx.ownership.run()

    @kopf.on.cleanup(id="ownership-watch-stop", registry=registry)
    async def stop(*, memo: Any, **_: Any) -> None:
        await memo.ctx.ownership.stop()

    def leased(spec: Mapping[str, Any], **_: Any) -> bool:
        return isinstance(spec.get("lease"), Mapping)

    @kopf.on.event(*WORKLOAD_ID, id="iw-lease-events", when=leased, registry=registry)
    async def workload_event(*, namespace: str | None, name: str | None, memo: Any, **_: Any) -> None:
        if namespace and name:
            memo.ctx.triggers.poke(lane_key(namespace, name))

    # NB: a stop (spec.lease removed) first only signals the lane, which then removes the orphan
    # label; kopf's default cancels at once, cutting that write short (the label stayed)
    @kopf.daemon(
        *WORKLOAD_ID,
        id="iw-lease",
        when=leased,
        cancellation_backoff=5.0,
        cancellation_timeout=10.0,
        registry=registry,
    )
    async def iw_lease(
        *,
        namespace: str | None,
        name: str,
        body: kopf.Body,
        memo: Any,
        stopped: kopf.DaemonStopped,
        logger: logging.Logger | logging.LoggerAdapter[Any],
        **_: Any,
    ) -> None:
        ctx: Memo = memo.ctx
        assert namespace is not None  # a namespaced kind
        key = lane_key(namespace, name)
        trigger = ctx.triggers.register(key)
        watched_since = ctx.ownership.clock.clock()
        try:
            while not stopped:
                trigger.clear()
                wait = await judge_once(ctx, body, watched_since=watched_since, logger=logger)
                await poked(trigger, stopped, wait)
        finally:
            ctx.triggers.unregister(key)
            ctx.ownership.verdicts.pop((namespace, name), None)
            ctx.ownership.clock.forget((namespace, lease_name(name)))
            await _unleased(ctx, body, logger)

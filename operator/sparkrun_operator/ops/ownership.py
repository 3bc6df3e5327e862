"""Ownership leases (ADR 0049): claim, renew, release and list them.

The ownership Lease of a workload (``api/ownership.py``) is written by its client: the daemon API
(``plugins.sparkrun-k8s.workloads.lease`` / ``release``, inline queries as the authenticated
principal) or ``sparkrun-k8s lease`` with the user's own credentials. A claim is a
compare-and-swap: it succeeds when the Lease is absent, has no holder, is the caller's, or is not
live; every write carries the ``resourceVersion`` it read as a precondition, so two claims that
race cannot both win (the loser gets 409 ``lease_held``). Release clears the holder and keeps
the Lease (the TTL then runs as unclaimed; a new claim succeeds at once).

Liveness never compares the renewer's clock with the reader's: ``ops/leases.py``'s
:class:`~sparkrun_operator.ops.leases.RecordClock` (the executor observer's) notes, on this
process's monotonic clock, when it first saw each Lease record (holder, renewTime,
resourceVersion); a record unchanged for the TTL is not live. A process seeing a Lease for the
first time gives it a full TTL, so a restarted reader is conservative (refuses a claim, never
deletes early).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from sparkrun_operator.api.meta import lease_record, parse_time
from sparkrun_operator.api.ownership import (
    HELD,
    LAPSED,
    UNCLAIMED,
    LeaseClaimResult,
    LeaseInfo,
    LeaseReleaseResult,
    LeaseSpec,
    LeasesResult,
    LeaseStatus,
    holder_identity,
    lease_name,
    shown_holder,
)
from sparkrun_operator.api.resources import INFERENCE_WORKLOAD
from sparkrun_operator.k8s import errors
from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.k8s.resources import LEASES
from sparkrun_operator.ops import kube
from sparkrun_operator.ops.errors import Conflict, Invalid
from sparkrun_operator.ops.leases import RecordClock, micro_time
from sparkrun_operator.plan.workload.ownership import trusted
from sparkrun_operator.render import keys

__all__ = [
    "CLOCK",
    "claim",
    "info",
    "judged",
    "lease_doc",
    "listing",
    "release",
    "spec_of",
]

#: The process's clock of Lease records (the daemon API's claims judge liveness with it).
CLOCK = RecordClock()


def spec_of(workload: Mapping[str, Any]) -> LeaseSpec | None:
    """The workload's ``spec.lease`` (``None``: not an ephemeral workload, or unreadable)."""
    raw = (workload.get("spec") or {}).get("lease")
    if not isinstance(raw, dict):
        return None
    try:
        return LeaseSpec.model_validate(raw)
    except ValueError:
        return None


def lease_doc(
    workload: Mapping[str, Any],
    *,
    holder: str | None,
    session: str | None,
    ttl: int,
    now: dt.datetime,
    acquired: str | None,
    transitions: int,
    resource_version: str | None = None,
) -> dict[str, Any]:
    """The ownership Lease of ``workload`` held by ``holder`` (``None``: released)."""
    meta = workload.get("metadata") or {}
    name = str(meta["name"])
    metadata: dict[str, Any] = {
        "name": lease_name(name),
        "namespace": str(meta["namespace"]),
        "labels": {keys.LABEL_OWNERSHIP: "true"},
        # NB: no blockOwnerDeletion: that needs the right to set finalizers on the workload.
        "ownerReferences": [
            {
                "apiVersion": INFERENCE_WORKLOAD.api_version,
                "kind": INFERENCE_WORKLOAD.kind,
                "name": name,
                "uid": str(meta["uid"]),
            }
        ],
    }
    if session is not None and holder is not None:
        metadata["annotations"] = {keys.ANNOTATION_LEASE_SESSION: session}
    if resource_version is not None:
        metadata["resourceVersion"] = resource_version
    spec: dict[str, Any] = {
        "leaseDurationSeconds": ttl,
        "renewTime": micro_time(now),
        "leaseTransitions": transitions,
    }
    if holder is not None:
        spec["holderIdentity"] = holder
        spec["acquireTime"] = acquired or micro_time(now)
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata, "spec": spec}


def _lease_held(workload: str, owner: str) -> Conflict:
    return Conflict(
        f"InferenceWorkload {workload}: its lease is held by {owner}",
        attrs={"reason": "lease_held", "owner": owner},
    )


def judged(workload: Mapping[str, Any]) -> LeaseStatus | None:
    """The operator's last verdict on ``workload``'s lease (``status.lease``; ``None`` when
    absent or unreadable)."""
    raw = (workload.get("status") or {}).get("lease")
    try:
        return LeaseStatus.model_validate(raw) if isinstance(raw, dict) else None
    except ValueError:
        return None


def _live(lease: Mapping[str, Any], workload: Mapping[str, Any], ttl: int, clock: RecordClock) -> bool:
    """Whether ``lease``'s holder is live: on this process's clock, and unless the operator
    already judged it lapsed (a reader that has just started would otherwise wait a full TTL)."""
    verdict = judged(workload)
    if (
        verdict is not None
        and verdict.state == LAPSED
        and verdict.holder == shown_holder((lease.get("spec") or {}).get("holderIdentity"))
    ):
        return False
    meta = lease.get("metadata") or {}
    return clock.alive((meta.get("namespace"), meta.get("name")), lease_record(lease), ttl)


def _ours(workload: Mapping[str, Any]) -> tuple[str, str, LeaseSpec]:
    meta = workload.get("metadata") or {}
    name = str(meta["name"])
    spec = spec_of(workload)
    if spec is None:
        raise Conflict(
            f"InferenceWorkload {name} has no spec.lease: set spec.lease (ttlSeconds, deleteOnExit) "
            "to make it an ephemeral workload",
            attrs={"reason": "lease_not_enabled"},
        )
    if meta.get("deletionTimestamp"):
        raise Conflict(f"InferenceWorkload {name} is being deleted", attrs={"reason": "deleting"})
    return name, str(meta["namespace"]), spec


def _checked(lease: Mapping[str, Any], workload: Mapping[str, Any], name: str) -> None:
    if not trusted(lease, workload=name, uid=str((workload.get("metadata") or {}).get("uid") or "")):
        raise Conflict(
            f"Lease {lease_name(name)} exists but is not owned by InferenceWorkload {name}: not renewed",
            attrs={"reason": "lease_squatted"},
        )


async def claim(
    rest: Kube,
    workload: Mapping[str, Any],
    *,
    principal: str,
    session: str | None,
    ttl_seconds: int | None,
    now: dt.datetime,
    clock: RecordClock = CLOCK,
) -> LeaseClaimResult:
    """Claim (or, as its holder, renew) ``workload``'s ownership lease for ``principal``."""
    name, namespace, spec = _ours(workload)
    if ttl_seconds is not None and ttl_seconds != spec.ttl_seconds:
        raise Invalid(
            f"ttl_seconds {ttl_seconds} differs from spec.lease.ttlSeconds {spec.ttl_seconds}: "
            "the spec is the one source; change it there"
        )
    holder = holder_identity(principal, session)
    lease = await rest.get(LEASES, lease_name(name), namespace)
    try:
        if lease is None:
            doc = lease_doc(
                workload,
                holder=holder,
                session=session,
                ttl=spec.ttl_seconds,
                now=now,
                acquired=None,
                transitions=0,
            )
            written = await rest.create(LEASES, doc, namespace)
            return _claimed(workload, written, claimed=True)
        _checked(lease, workload, name)
        current = str((lease.get("spec") or {}).get("holderIdentity") or "")
        if current and current != holder and _live(lease, workload, spec.ttl_seconds, clock):
            raise _lease_held(name, shown_holder(current) or "")
        lease_spec = lease.get("spec") or {}
        same = current == holder
        doc = lease_doc(
            workload,
            holder=holder,
            session=session,
            ttl=spec.ttl_seconds,
            now=now,
            acquired=(str(lease_spec.get("acquireTime") or "") or None) if same else None,
            transitions=int(lease_spec.get("leaseTransitions") or 0) + (0 if same else 1),
            resource_version=str((lease.get("metadata") or {}).get("resourceVersion") or ""),
        )
        written = await rest.replace(LEASES, lease_name(name), doc, namespace)
        return _claimed(workload, written, claimed=not same)
    except (errors.KubeConflict, errors.KubeAlreadyExists) as error:
        # NB: another claim wrote between our read and our write: it won.
        raise Conflict(
            f"InferenceWorkload {name}: another claim won the race; read and retry",
            attrs={"reason": "lease_held"},
        ) from error


async def release(
    rest: Kube, workload: Mapping[str, Any], *, principal: str, session: str | None, now: dt.datetime
) -> LeaseReleaseResult:
    """Drop ``principal``'s claim (orderly detach): the Lease stays, without a holder; nothing
    else is touched. Not the holder (or no Lease): nothing written, ``released`` false."""
    name, namespace, spec = _ours(workload)
    lease = await rest.get(LEASES, lease_name(name), namespace)
    if lease is None:
        return LeaseReleaseResult(workload=name, released=False)
    _checked(lease, workload, name)
    lease_spec = lease.get("spec") or {}
    if str(lease_spec.get("holderIdentity") or "") != holder_identity(principal, session):
        return LeaseReleaseResult(workload=name, released=False)
    doc = lease_doc(
        workload,
        holder=None,
        session=None,
        ttl=spec.ttl_seconds,
        now=now,
        acquired=None,
        transitions=int(lease_spec.get("leaseTransitions") or 0),
        resource_version=str((lease.get("metadata") or {}).get("resourceVersion") or ""),
    )
    try:
        await rest.replace(LEASES, lease_name(name), doc, namespace)
    except errors.KubeConflict as error:
        raise Conflict(
            f"InferenceWorkload {name}: the lease changed meanwhile; read and retry",
            attrs={"reason": "lease_held"},
        ) from error
    return LeaseReleaseResult(workload=name, released=True)


def _expires(renewed: str | None, ttl: int) -> str | None:
    at = parse_time(renewed)
    if at is None:
        return None
    try:
        # NB: the writer's time: one near the calendar's end (year 9999) overflows
        return micro_time(at + dt.timedelta(seconds=ttl))
    except OverflowError:
        return None


def info(workload: Mapping[str, Any], lease: Mapping[str, Any] | None, *, held: bool = False) -> LeaseInfo:
    """The :class:`~..api.ownership.LeaseInfo` of ``workload``. The state is the operator's
    judgement (``status.lease``); ``held``: the caller has just written the Lease (Held)."""
    meta = workload.get("metadata") or {}
    name = str(meta.get("name") or "")
    spec = spec_of(workload) or LeaseSpec()
    usable = (
        lease if lease is not None and trusted(lease, workload=name, uid=str(meta.get("uid") or "")) else None
    )
    lease_spec = (usable or {}).get("spec") or {}
    holder = shown_holder(lease_spec.get("holderIdentity"))
    verdict = judged(workload)
    state = verdict.state if verdict is not None else UNCLAIMED
    if held:
        state = HELD
    renewed = str(lease_spec.get("renewTime") or "")[:64] or None
    fields: dict[str, Any] = {
        "workload": name,
        "namespace": str(meta.get("namespace") or ""),
        "owner": holder if state == HELD else None,
        "state": state,
        "ttl_seconds": spec.ttl_seconds,
        "delete_on_exit": spec.delete_on_exit,
        "renewed": renewed,
        "expires_at": _expires(renewed, spec.ttl_seconds),
        "orphaned": (meta.get("labels") or {}).get(keys.LABEL_ORPHANED) == "true",
    }
    return LeaseInfo(**fields)


async def listing(rest: Kube, namespace: str, owned: bool | None, *, cached: bool = False) -> LeasesResult:
    """The ephemeral workloads of ``namespace`` (those with ``spec.lease``) and their leases, by
    name; ``owned``: only the held ones (``True``) or only the others (``False``: orphans and
    unclaimed). ``cached``: from the apiserver's watch cache (``Kube.list``)."""
    workloads = await rest.list(kube.WORKLOADS, namespace, cached=cached)
    found = await rest.list(LEASES, namespace, label_selector=keys.LABEL_OWNERSHIP, cached=cached)
    by_name = {str((x.get("metadata") or {}).get("name") or ""): x for x in found}
    out = []
    for workload in sorted(workloads, key=lambda w: str((w.get("metadata") or {}).get("name") or "")):
        if spec_of(workload) is None:
            continue
        entry = info(workload, by_name.get(lease_name(str(workload["metadata"]["name"]))))
        if owned is None or (entry.state == HELD) == owned:
            out.append(entry)
    return LeasesResult(leases=out)


def _claimed(workload: Mapping[str, Any], lease: Mapping[str, Any], *, claimed: bool) -> LeaseClaimResult:
    return LeaseClaimResult(claimed=claimed, **info(workload, lease, held=True).model_dump())

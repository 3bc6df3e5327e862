"""The ownership lease of an ephemeral workload (``spec.lease``, ADR 0049): judged, and reported.

:func:`judge` decides, from the workload's ownership Lease and the observer's clock (time comes
in: ``now`` and the instants the observer first saw the Lease's current record, or the workload),
whether the lease is Held, Unclaimed or Lapsed, and how long until it could lapse. Only a Lease
that is named for the workload and owned by its UID counts: one that merely has the name (a
squatter's) is ignored and reported. The TTL is the spec's, never the Lease's
``leaseDurationSeconds`` (a client cannot stretch its own lease).

:func:`report` folds the verdict (``Observation.ownership``, the operator's lease lane writes
it) into ``status.lease`` and the ``Owned`` condition. Messages carry no running times, so the
status only changes on a transition, never on a renew.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sparkrun_operator.api import conditions as c
from sparkrun_operator.api.meta import lease_record, parse_time
from sparkrun_operator.api.ownership import (
    HELD,
    LAPSED,
    UNCLAIMED,
    LeaseSpec,
    LeaseStatus,
    lease_name,
    shown_holder,
)
from sparkrun_operator.api.workload import InferenceWorkloadStatus
from sparkrun_operator.plan.workload.model import Conditions, Observation

__all__ = ["ABSENT", "Verdict", "judge", "observed", "report", "trusted"]


@dataclass(frozen=True)
class Verdict:
    """The lease as judged now: the status to report and seconds until it could lapse
    (``None``: lapsed already, or nothing left to time)."""

    status: LeaseStatus
    remaining: float | None


def trusted(lease: Mapping[str, Any] | None, *, workload: str, uid: str) -> bool:
    """Whether ``lease`` is the workload's ownership Lease: its derived name and an owner
    reference to the workload's UID (anyone who may create Leases could make one of that name)."""
    if lease is None or not uid:
        return False
    meta = lease.get("metadata") or {}
    if meta.get("name") != lease_name(workload):
        return False
    owners = meta.get("ownerReferences") or []
    return any(
        isinstance(o, dict) and o.get("uid") == uid and o.get("kind") == "InferenceWorkload" for o in owners
    )


#: The record of "no trusted Lease" (a real Lease always has a resourceVersion).
ABSENT: tuple[str, str, str] = ("", "", "")


def observed(lease: Mapping[str, Any] | None, *, own: bool) -> tuple[str, str, str]:
    """The record the observer times: ``lease``'s when it is the workload's own (``own``:
    :func:`trusted`; ``api/meta.py`` ``lease_record``: what changes on every claim, renew or
    release), else :data:`ABSENT`, so that a Lease going missing is itself a change timed from
    when seen."""
    return lease_record(lease) if own and lease is not None else ABSENT


def judge(
    spec: LeaseSpec,
    *,
    workload: str,
    lease: Mapping[str, Any] | None,
    own: bool,
    record_seen: float,
    watched_since: float,
    now: float,
    wall: dt.datetime,
    previous: LeaseStatus | None,
) -> Verdict:
    """The verdict at ``now`` (the observer's monotonic clock). ``own``: ``lease`` is the
    workload's own (:func:`trusted`); ``record_seen``: when the observer first saw its current
    record (:func:`observed`); ``watched_since``: when it first saw the workload with
    ``spec.lease`` (an unclaimed lease counts from there: a restarted operator gives a full TTL
    before anything lapses). Without a trusted Lease, ``record_seen`` is when the observer first
    saw it missing (:data:`ABSENT`): a Lease deleted, unlabelled or rewritten as another's lapses
    a full TTL after that, never at once."""
    squatted = lease is not None and not own
    holder: str | None = None
    acquired: dt.datetime | None = None
    start = max(record_seen, watched_since)
    if own and lease is not None:
        lease_spec = lease.get("spec") or {}
        holder = shown_holder(lease_spec.get("holderIdentity"))
        acquired = parse_time(lease_spec.get("acquireTime")) if holder else None
    remaining = spec.ttl_seconds - (now - start)
    state = LAPSED if remaining <= 0 else HELD if holder else UNCLAIMED
    if state == LAPSED and previous is not None and previous.state == LAPSED:
        holder = holder or previous.holder  # who held it last, for the orphan's message
    same = previous is not None and previous.state == state and previous.holder == holder
    since = previous.since if same and previous is not None else wall
    status = LeaseStatus(
        state=state,
        holder=holder,
        acquired=acquired,
        since=since,
        ttl_seconds=spec.ttl_seconds,
        delete_on_exit=spec.delete_on_exit,
        lease=lease_name(workload),
        squatted=squatted,
    )
    return Verdict(status=status, remaining=remaining if remaining > 0 else None)


def report(obs: Observation, cond: Conditions, status: InferenceWorkloadStatus) -> None:
    """``status.lease`` and the ``Owned`` condition from ``obs.ownership`` (the previous ones
    while this operator has not judged the lease yet); neither without ``spec.lease``."""
    if obs.spec.lease is None:
        return
    verdict = obs.ownership
    if verdict is None:
        status.lease = obs.status.lease
        previous = next((x for x in obs.status.conditions if x.type == c.OWNED), None)
        if previous is not None:
            cond.set(c.OWNED, previous.status == "True", previous.reason, previous.message)
        return
    status.lease = verdict
    cond.set(c.OWNED, *_condition(verdict))


def _condition(lease: LeaseStatus) -> tuple[bool, str, str]:
    squat = (
        f"; Lease {lease.lease} exists but is not owned by this workload: ignored" if lease.squatted else ""
    )
    if lease.state == HELD:
        return True, c.REASON_LEASE_HELD, f"held by {lease.holder}{squat}"
    if lease.state == UNCLAIMED:
        return (
            False,
            c.REASON_LEASE_UNCLAIMED,
            f"no holder: lapses {lease.ttl_seconds}s after the last change unless claimed{squat}",
        )
    who = f" (last held by {lease.holder})" if lease.holder else ""
    fate = "deleting it (deleteOnExit)" if lease.delete_on_exit else "orphaned"
    return False, c.REASON_LEASE_EXPIRED, f"not renewed for {lease.ttl_seconds}s{who}: {fate}{squat}"

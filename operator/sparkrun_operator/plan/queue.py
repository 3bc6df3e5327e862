"""Kueue's queues, as read (issue 32): :class:`QueueRead`, the last read of one LocalQueue
(made by ``controllers/kueue.py``), and an InferenceCluster's ``status.queue`` with its
``QueueReady`` condition from those reads. Pure. A workload's ``status.queue`` is the workload
planner's (``plan/workload/queue.py``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from sparkrun_operator.api import conditions as c
from sparkrun_operator.api.cluster import InferenceClusterStatus
from sparkrun_operator.api.meta import Condition, set_condition
from sparkrun_operator.api.queue import MAX_CLUSTER_QUEUE_NAMESPACES, ClusterQueueStatus, LocalQueueState


@dataclass(frozen=True, kw_only=True)
class QueueRead:
    """What the operator last read of one LocalQueue (``controllers/kueue.py``)."""

    namespace: str
    name: str
    #: Kueue's LocalQueue CRD is installed.
    installed: bool = True
    #: The LocalQueue exists (``None``: not known, e.g. the read failed).
    exists: bool | None = None
    cluster_queue: str | None = None
    #: ``status.pendingWorkloads`` / ``admittedWorkloads`` of the LocalQueue.
    pending: int = 0
    admitted: int = 0
    #: JobSet UID -> (position in the LocalQueue, position in the ClusterQueue), as Kueue counts.
    positions: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    #: The positions read cover every pending workload of the LocalQueue (fewer than the limit).
    complete: bool = True
    #: Why the positions (or the LocalQueue) could not be read (``None``: they were).
    problem: str | None = None


#: The versions of Kueue's API this operator reads and writes, preferred first.
VERSIONS: Final = ("v1beta2", "v1beta1")


def served_version(crd: Mapping[str, Any] | None) -> str | None:
    """The version of Kueue's API to use, from a Kueue CRD (``None``: not installed, or
    no version this operator reads is served)."""
    if crd is None:
        return None
    served = {
        str(v.get("name"))
        for v in ((crd.get("spec") or {}).get("versions") or [])
        if isinstance(v, dict) and v.get("served")
    }
    return next((v for v in VERSIONS if v in served), None)


def cluster_queue(
    status: InferenceClusterStatus,
    *,
    queue: str | None,
    namespaces: Iterable[str],
    reads: Mapping[tuple[str, str], QueueRead],
    previous: Iterable[Condition],
    generation: int,
    now: dt.datetime,
) -> InferenceClusterStatus:
    """``status`` with ``queue`` (the cluster's ``spec.queueName``) as Kueue sees it in each of
    ``namespaces`` (where workloads on the cluster run) and ``QueueReady``; unchanged without
    a queue name."""
    if queue is None:
        return status
    shown = sorted(set(namespaces))[:MAX_CLUSTER_QUEUE_NAMESPACES]
    found = [reads[(ns, queue)] for ns in shown if (ns, queue) in reads]
    states = [
        LocalQueueState(
            namespace=r.namespace,
            exists=bool(r.exists),
            cluster_queue=r.cluster_queue,
            pending=r.pending,
            admitted=r.admitted,
        )
        for r in found
        if r.installed
    ]
    installed = all(r.installed for r in found) if found else None
    ok, reason, message = _verdict(queue, shown, found, states, installed)
    conditions = [cond.model_copy() for cond in previous if cond.type == c.QUEUE_READY]
    set_condition(
        conditions,
        type=c.QUEUE_READY,
        status=ok,
        reason=reason,
        message=message,
        observed_generation=generation,
        now=now,
    )
    return status.model_copy(
        update={
            "queue": ClusterQueueStatus(name=queue, kueue_installed=installed, namespaces=states),
            "conditions": [*status.conditions, *conditions],
        }
    )


def _verdict(
    queue: str,
    namespaces: list[str],
    found: list[QueueRead],
    states: list[LocalQueueState],
    installed: bool | None,
) -> tuple[Literal["True", "False", "Unknown"], str, str]:
    if not namespaces:
        return (
            "Unknown",
            c.REASON_QUEUE_UNUSED,
            f"no workload runs on the cluster yet: LocalQueue {queue} is checked in each namespace "
            "one runs in",
        )
    if installed is None:
        return "Unknown", c.REASON_QUEUE_UNKNOWN, f"LocalQueue {queue} not read yet"
    if not installed:
        return (
            "False",
            c.REASON_KUEUE_NOT_INSTALLED,
            f"workloads on the cluster are queued in {queue}, but Kueue is not installed (no "
            "localqueues.kueue.x-k8s.io CRD): their JobSets stay suspended",
        )
    missing = [s.namespace for s in states if not s.exists]
    if missing:
        listed = ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else "")
        return (
            "False",
            c.REASON_QUEUE_NOT_FOUND,
            f"LocalQueue {queue} does not exist in {len(missing)} namespace(s) with workloads on the cluster "
            f"({listed}): their JobSets stay suspended; create it there (plugins.k8s.setup_kueue)",
        )
    unknown = [r for r in found if r.exists is None]
    if unknown or len(found) < len(namespaces):
        detail = f": {unknown[0].problem}" if unknown and unknown[0].problem else ""
        return (
            "Unknown",
            c.REASON_QUEUE_UNKNOWN,
            f"LocalQueue {queue} not read in every namespace yet{detail}",
        )
    cqs = sorted({s.cluster_queue for s in states if s.cluster_queue})
    return (
        "True",
        c.REASON_QUEUE_EXISTS,
        f"LocalQueue {queue} exists in {len(states)} namespace(s)"
        + (f", feeding ClusterQueue {', '.join(cqs)}" if cqs else "")
        + f": {sum(s.pending for s in states)} pending, {sum(s.admitted for s in states)} admitted",
    )

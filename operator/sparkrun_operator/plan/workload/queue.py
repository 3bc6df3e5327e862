"""Stage 5a, Kueue: ``status.queue`` and the ``Admitted`` condition of a workload whose JobSets
carry a queue name (issue 32; ``docs/concepts.md`` "Kueue").

Pure. The JobSets say what Kueue decided (it unsuspends a JobSet it admits); the last read of
the LocalQueue (``plan/queue.py`` ``QueueRead``, made by ``controllers/kueue.py`` from the
LocalQueue object and Kueue's visibility API, one read per LocalQueue for every workload waiting in it) says
where a waiting one stands. The message names the workload's own position only (never the
queue's counts), so that a workload's status changes when its own place does.
"""

from __future__ import annotations

from collections.abc import Sequence

from sparkrun_operator.api import conditions as c
from sparkrun_operator.api.clip import clip
from sparkrun_operator.api.queue import POSITION_LIMIT, WorkloadQueueStatus
from sparkrun_operator.api.workload import InferenceWorkloadStatus
from sparkrun_operator.plan.queue import QueueRead
from sparkrun_operator.plan.workload.model import (
    Conditions,
    Observation,
    ObservedJobSet,
    plural,
    slot_of,
)

#: The reasons of ``Admitted=False`` that leave a workload waiting on Kueue (Ready says so too).
WAITING_REASONS = frozenset(
    {c.REASON_QUEUED_BY_KUEUE, c.REASON_QUEUE_NOT_FOUND, c.REASON_KUEUE_NOT_INSTALLED, c.REASON_QUEUE_UNKNOWN}
)


def report(
    *,
    obs: Observation,
    cond: Conditions,
    status: InferenceWorkloadStatus,
    counted: Sequence[ObservedJobSet],
    queue: str | None,
) -> str | None:
    """Set ``status.queue`` and ``Admitted`` when the workload uses ``queue`` (the serving
    inputs' queue name); the message when its JobSets wait on Kueue (``None``: they do not)."""
    if queue is None:
        return None
    read = obs.queue if obs.queue is not None and obs.queue.name == queue else None
    cq = read.cluster_queue if read is not None else None
    if obs.spec.state == "Stopped":
        status.queue = WorkloadQueueStatus(
            name=queue, cluster_queue=cq, message="state is Stopped: nothing queued"
        )
        cond.set(
            c.ADMITTED, False, c.REASON_STOPPED, "state is Stopped: the JobSets are deleted, nothing queued"
        )
        return None
    waiting = sorted((js for js in counted if js.suspended), key=slot_of)
    if not counted:
        status.queue = WorkloadQueueStatus(name=queue, cluster_queue=cq, message="no JobSet yet")
        return None
    if not waiting:
        where = f"LocalQueue {queue}" + (f" (ClusterQueue {cq})" if cq else "")
        message = f"admitted by Kueue through {where}"
        status.queue = WorkloadQueueStatus(name=queue, cluster_queue=cq, admitted=True, message=message)
        cond.set(c.ADMITTED, True, c.REASON_ADMITTED_BY_KUEUE, message)
        return None
    reason, message, lq_pos, cq_pos = _waiting(obs, queue, read, waiting)
    message = clip(message, 1024)
    status.queue = WorkloadQueueStatus(
        name=queue,
        cluster_queue=cq,
        waiting=len(waiting),
        position_in_local_queue=lq_pos,
        position_in_cluster_queue=cq_pos,
        message=message,
    )
    cond.set(c.ADMITTED, False, reason, message)
    return message


def _waiting(
    obs: Observation, queue: str, read: QueueRead | None, waiting: Sequence[ObservedJobSet]
) -> tuple[str, str, int | None, int | None]:
    """Reason, message and positions of a workload with ``waiting`` JobSets."""
    held = f"{plural(len(waiting), 'JobSet')} of {plural(len(obs.jobsets), 'JobSet')} not admitted"
    if read is None:
        return c.REASON_QUEUE_UNKNOWN, f"{held}: queued in LocalQueue {queue}, not read yet", None, None
    if not read.installed:
        message = (
            f"{held}: the JobSets carry the queue name {queue!r} but Kueue is not installed (no "
            "localqueues.kueue.x-k8s.io CRD), so nothing admits them: install Kueue or remove the queue name"
        )
        return c.REASON_KUEUE_NOT_INSTALLED, message, None, None
    if read.exists is False:
        message = (
            f"{held}: LocalQueue {queue} does not exist in namespace {obs.namespace}, so Kueue admits "
            "nothing from it: create it (plugins.k8s.setup_kueue) or correct the queue name"
        )
        return c.REASON_QUEUE_NOT_FOUND, message, None, None
    where = f"LocalQueue {queue}" + (f" (ClusterQueue {read.cluster_queue})" if read.cluster_queue else "")
    found = next((read.positions[js.uid] for js in waiting if js.uid in read.positions), None)
    if found is not None:
        lq_pos, cq_pos = found
        ahead = "next in line" if lq_pos == 0 else f"{plural(lq_pos, 'workload')} ahead"
        message = (
            f"{held}: queued by Kueue in {where}, {ahead} (position {lq_pos} in the LocalQueue, "
            f"{cq_pos} in the ClusterQueue)"
        )
        return c.REASON_QUEUED_BY_KUEUE, message, lq_pos, cq_pos
    if read.problem is not None:
        detail = f"position unknown: {read.problem}"
    elif not read.complete:
        detail = f"behind the first {POSITION_LIMIT} pending workloads"
    else:
        detail = "not in Kueue's pending list yet (Kueue makes its Workload first)"
    return c.REASON_QUEUED_BY_KUEUE, f"{held}: queued by Kueue in {where}, {detail}", None, None

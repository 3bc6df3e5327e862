"""Kueue's queues as the operator reads them (issue 32; ``docs/concepts.md`` "Kueue").

:class:`QueueWatch` (``Memo.queues``) keeps the last read of each LocalQueue that a workload's
JobSets are queued in (admitted or waiting) or that an InferenceCluster's
``queueName`` names in a namespace where its workloads run. One task (:meth:`QueueWatch.run`)
reads them every :data:`POLL_SECONDS`, and at once when a queue is first asked for:

- which version of Kueue's API is served: the ``localqueues.kueue.x-k8s.io`` CRD (v1beta2,
  else v1beta1; no CRD: Kueue is not installed);
- per LocalQueue, the object (its ClusterQueue, pending and admitted counts) and Kueue's
  visibility API, ``.../localqueues/<name>/pendingworkloads?limit=`` :data:`POSITION_LIMIT`
  (an aggregated API served by Kueue), whose items carry their Workload's ownerReferences:
  the JobSet's UID gives each waiting JobSet its position, with no read of Workload objects.

The reads are one pair per LocalQueue per round whatever the number of workloads waiting in it
(a thousand queued workloads cost two GETs every ten seconds), at most :data:`READS_AT_ONCE`
at once, through the project's one client. Queue names are the tenants' (each workload's
``scheduling.queueName``): a round reads at most :data:`MAX_QUEUES_PER_NAMESPACE` LocalQueues of
one namespace and :data:`MAX_QUEUES` in all, shared between namespaces (:func:`select_queues`);
a queue left out is reported as not read, with why (Kueue still admits from it).
The planner gets a read through ``observation()`` (no API call in a pass); a workload's status
lane is poked only when its own part of a read changed (its positions, the queue's existence),
a cluster's when its LocalQueues changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

from sparkrun_operator.api.clip import clip
from sparkrun_operator.api.queue import POSITION_LIMIT
from sparkrun_operator.api.workload import InferenceWorkloadSpec
from sparkrun_operator.k8s import errors
from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.k8s.resources import CRDS, KUEUE_GROUP, Resource
from sparkrun_operator.plan.queue import QueueRead, served_version
from sparkrun_operator.plan.workload.model import ObservedCluster, ObservedJobSet

__all__ = [
    "MAX_QUEUES",
    "MAX_QUEUES_PER_NAMESPACE",
    "POLL_SECONDS",
    "QueueWatch",
    "parse_positions",
    "read_queue",
    "select_queues",
]

log = logging.getLogger("sparkrun.operator.kueue")

#: Seconds between two rounds of reads.
POLL_SECONDS: Final = 10.0
#: LocalQueues read at once.
READS_AT_ONCE: Final = 4
#: A round that a new queue started waits this long, so that a burst of workloads shares it.
SETTLE_SECONDS: Final = 0.5
#: Kueue's visibility API group (an aggregated API).
VISIBILITY_GROUP: Final = "visibility.kueue.x-k8s.io"
#: The most characters of an error kept in a read's problem.
PROBLEM_MAX: Final = 300
#: LocalQueues read in one round: of one namespace, and in all.
MAX_QUEUES_PER_NAMESPACE: Final = 16
MAX_QUEUES: Final = 512

Key = tuple[str, str]


def select_queues(wanted: Iterable[Key]) -> tuple[list[Key], list[Key]]:
    """The LocalQueues a round reads and those it leaves out (both sorted): the first
    :data:`MAX_QUEUES_PER_NAMESPACE` of each namespace by name, then at most :data:`MAX_QUEUES`
    taken one per namespace in turn, so that one namespace's many queue names never crowd out
    another's."""
    by_namespace: dict[str, list[str]] = {}
    for namespace, name in wanted:
        by_namespace.setdefault(namespace, []).append(name)
    lanes = [
        [(ns, name) for name in sorted(names)[:MAX_QUEUES_PER_NAMESPACE]]
        for ns, names in sorted(by_namespace.items())
    ]
    read: list[Key] = []
    for turn in range(MAX_QUEUES_PER_NAMESPACE):
        for lane in lanes:
            if turn < len(lane) and len(read) < MAX_QUEUES:
                read.append(lane[turn])
    chosen = set(read)
    skipped = sorted(
        (ns, name) for ns, names in by_namespace.items() for name in names if (ns, name) not in chosen
    )
    return sorted(read), skipped


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10**7 else 0


def parse_positions(summary: Any) -> tuple[dict[str, tuple[int, int]], int]:
    """JobSet UID -> (position in the LocalQueue, in the ClusterQueue) from a
    ``PendingWorkloadsSummary``, and how many items it had (at most :data:`POSITION_LIMIT` read)."""
    items = summary.get("items") if isinstance(summary, dict) else None
    if not isinstance(items, list):
        return {}, 0
    positions: dict[str, tuple[int, int]] = {}
    for item in items[:POSITION_LIMIT]:
        if not isinstance(item, dict):
            continue
        meta = item.get("metadata") or {}
        refs = meta.get("ownerReferences") if isinstance(meta, dict) else None
        for ref in refs if isinstance(refs, list) else []:
            if (
                isinstance(ref, dict)
                and ref.get("kind") == "JobSet"
                and str(ref.get("apiVersion") or "").startswith("jobset.x-k8s.io/")
                and isinstance(ref.get("uid"), str)
            ):
                uid = ref["uid"][:64]
                positions.setdefault(
                    uid, (_int(item.get("positionInLocalQueue")), _int(item.get("positionInClusterQueue")))
                )
    return positions, min(len(items), POSITION_LIMIT)


def _problem(what: str, error: errors.KubeError) -> str:
    return clip(f"{what}: {error.status or ''} {error.message}".replace("  ", " "), PROBLEM_MAX)


async def read_queue(kube: Kube, queue: Key, version: str | None) -> QueueRead:
    """One LocalQueue: the object, then its pending workloads' positions (``version``: Kueue's
    API version served, ``None``: Kueue not installed)."""
    namespace, name = queue
    if version is None:
        return QueueRead(namespace=namespace, name=name, installed=False)
    local_queues = Resource(KUEUE_GROUP, version, "localqueues", True, "LocalQueue")
    try:
        found = await kube.get(local_queues, name, namespace)
    except errors.KubeError as error:
        return QueueRead(
            namespace=namespace, name=name, problem=_problem("reading the LocalQueue failed", error)
        )
    if found is None:
        return QueueRead(namespace=namespace, name=name, exists=False)
    spec = found.get("spec") or {}
    status = found.get("status") or {}
    cq = spec.get("clusterQueue")
    base = QueueRead(
        namespace=namespace,
        name=name,
        exists=True,
        cluster_queue=clip(cq, 253) if isinstance(cq, str) and cq else None,
        pending=_int(status.get("pendingWorkloads")),
        admitted=_int(status.get("admittedWorkloads")),
    )
    path = f"{local_queues.path(namespace, name)}/pendingworkloads".replace(
        f"/apis/{KUEUE_GROUP}/", f"/apis/{VISIBILITY_GROUP}/", 1
    )
    try:
        summary = await kube.request("GET", path, query={"limit": POSITION_LIMIT})
    except errors.KubeError as error:
        problem = _problem("Kueue's visibility API answered", error)
        return dataclasses.replace(base, problem=problem, complete=False)
    positions, count = parse_positions(summary)
    return dataclasses.replace(base, positions=positions, complete=count < POSITION_LIMIT)


@dataclass(frozen=True)
class _Waiting:
    """A workload's interest: the LocalQueue its JobSets wait in and their UIDs."""

    queue: Key
    uids: tuple[str, ...]


def _own(read: QueueRead | None, uids: Iterable[str]) -> tuple[Any, ...] | None:
    """The part of ``read`` a workload's status shows (its own positions, not the counts)."""
    if read is None:
        return None
    positions = tuple(read.positions.get(uid) for uid in uids)
    return (read.installed, read.exists, read.cluster_queue, read.problem, read.complete, positions)


class QueueWatch:
    """The last read of each LocalQueue asked for, and who asked (see the module docstring)."""

    def __init__(self) -> None:
        self.reads: dict[Key, QueueRead] = {}
        self.workloads: dict[Key, _Waiting] = {}
        self.clusters: dict[str, frozenset[Key]] = {}
        self._wake = asyncio.Event()

    def workload(self, key: Key, queue: Key | None, waiting: Iterable[str]) -> QueueRead | None:
        """The last read of ``queue`` for the workload ``key`` (``None``: none yet), whose JobSets
        are in it, ``waiting`` (their UIDs) still suspended (``queue`` None: none is in a queue,
        no more reads for it)."""
        uids = tuple(sorted(waiting))
        if queue is None:
            self.workloads.pop(key, None)
        else:
            interest = _Waiting(queue, uids)
            if self.workloads.get(key) != interest:
                self.workloads[key] = interest
                if queue not in self.reads:
                    self._wake.set()
        return self.reads.get(queue) if queue is not None else None

    def of_workload(
        self,
        key: Key,
        *,
        spec: InferenceWorkloadSpec,
        cluster: ObservedCluster | None,
        jobsets: Iterable[ObservedJobSet],
    ) -> QueueRead | None:
        """:meth:`workload` for the workload ``key``: its queue (its own ``scheduling.queueName``,
        else its cluster's) while it has JobSets and is not Stopped, and those Kueue holds
        suspended."""
        name = spec.scheduling.queue_name or (cluster.queue_name if cluster is not None else None)
        live = [js for js in jobsets if not js.deleting]
        if not name or not live or spec.state == "Stopped":
            return self.workload(key, None, ())
        return self.workload(key, (key[0], name), [js.uid for js in live if js.suspended])

    def cluster(self, name: str, queues: Iterable[Key]) -> dict[Key, QueueRead]:
        """The last reads of an InferenceCluster's LocalQueues (one per namespace it is used in)."""
        wanted = frozenset(queues)
        if not wanted:
            self.clusters.pop(name, None)
        elif self.clusters.get(name) != wanted:
            self.clusters[name] = wanted
            if any(q not in self.reads for q in wanted):
                self._wake.set()
        return {q: self.reads[q] for q in wanted if q in self.reads}

    def forget(self, key: Key) -> None:
        """The workload ``key`` is gone (its daemon stopped)."""
        self.workloads.pop(key, None)

    def forget_cluster(self, name: str) -> None:
        self.clusters.pop(name, None)

    @staticmethod
    def unread(queue: Key) -> QueueRead:
        """What a queue :func:`select_queues` left out shows: not read, and why."""
        namespace, name = queue
        return QueueRead(
            namespace=namespace,
            name=name,
            problem=f"not read: namespace {namespace} uses more than {MAX_QUEUES_PER_NAMESPACE} LocalQueues "
            f"(or the operator more than {MAX_QUEUES} in all), so the operator reads only the first by "
            "name; Kueue still admits from it",
        )

    async def run(
        self,
        kube: Kube,
        *,
        poke_workload: Callable[[Key], object],
        poke_cluster: Callable[[str], object],
        interval: float = POLL_SECONDS,
    ) -> None:
        """Read every queue asked for each ``interval`` (and soon after a new one), until cancelled."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), interval)
            if self._wake.is_set():
                self._wake.clear()
                await asyncio.sleep(SETTLE_SECONDS)
            try:
                await self.refresh(kube, poke_workload=poke_workload, poke_cluster=poke_cluster)
            except errors.KubeError as error:
                log.warning("reading Kueue's queues failed: %s", error)

    async def refresh(
        self, kube: Kube, *, poke_workload: Callable[[Key], object], poke_cluster: Callable[[str], object]
    ) -> None:
        """One round: read every queue asked for; poke whom a change concerns."""
        wanted = {w.queue for w in self.workloads.values()}
        for queues in self.clusters.values():
            wanted |= queues
        for stale in [q for q in self.reads if q not in wanted]:
            del self.reads[stale]
        if not wanted:
            return
        version = served_version(await kube.get(CRDS, f"localqueues.{KUEUE_GROUP}"))
        gate = asyncio.Semaphore(READS_AT_ONCE)

        async def one(queue: Key) -> QueueRead:
            async with gate:
                return await read_queue(kube, queue, version)

        chosen, skipped = select_queues(wanted)
        fresh = [*await asyncio.gather(*(one(q) for q in chosen)), *(self.unread(q) for q in skipped)]
        before = dict(self.reads)
        changed = {(r.namespace, r.name) for r in fresh if before.get((r.namespace, r.name)) != r}
        self.reads.update({(r.namespace, r.name): r for r in fresh})
        for key, waiting in list(self.workloads.items()):
            old, new = before.get(waiting.queue), self.reads.get(waiting.queue)
            if waiting.queue in changed and _own(old, waiting.uids) != _own(new, waiting.uids):
                poke_workload(key)
        for name, queues in list(self.clusters.items()):
            if queues & changed:
                poke_cluster(name)

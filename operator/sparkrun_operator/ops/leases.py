"""Executor liveness: each operator process that runs jobs holds a renewed ``Lease``.

A job in an active state names its executor (``status.executor``). The executor's Lease
(``coordination.k8s.io/v1``, label ``sparkrun.dev/executor``) lives in the operator's own
namespace (the release namespace: ``--executor-namespace``), one per executor whatever
namespaces its jobs are in, and is renewed every few seconds while it runs; an executor whose
Lease has expired is dead. ``GET /v1/reservations`` reports each
claim's owner liveness from these Leases, and ``POST /v1/reservations/{owner}/reconcile``
marks a dead owner's jobs ``lost`` (never reruns them).

Liveness never compares the writer's clock with the reader's (a ``renewTime`` is another
machine's wall clock): like client-go's leader election, a :class:`RecordClock` notes, on its
own monotonic clock, when it first saw each Lease record (its holder, ``renewTime`` and
``resourceVersion``: ``api/meta.py`` ``lease_record``); the executor is dead once the record
has not changed for ``leaseDurationSeconds`` of the observer's time. Any clock skew between the
executor and the observer is therefore irrelevant; the price is that a process seeing a Lease
for the first time gives it one full duration before calling it dead. Ownership leases
(``ops/ownership.py``, ADR 0049) are judged with the same clock.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import os
import time
from collections.abc import Callable, Hashable, Mapping
from typing import Any, Final

from sparkrun_operator.api.daemonjob import DaemonJobStatus
from sparkrun_operator.api.meta import lease_record
from sparkrun_operator.k8s import errors
from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.k8s.daemonjobs import DaemonJobs
from sparkrun_operator.k8s.resources import LEASES
from sparkrun_operator.ops import jobs
from sparkrun_operator.ops.errors import DaemonError
from sparkrun_operator.render import keys

__all__ = [
    "LEASES",
    "LEASE_LABEL",
    "OBSERVER",
    "LeaseObserver",
    "RecordClock",
    "executor_liveness",
    "lease_name",
    "mark_lost",
    "micro_time",
    "pod_owner",
    "release",
    "renew",
]

LEASE_LABEL = keys.LABEL_EXECUTOR
LEASE_SECONDS = 30
#: The most Lease records one :class:`RecordClock` remembers (oldest forgotten first).
MAX_RECORDS: Final = 20_000


def lease_name(executor_id: str) -> str:
    return "sparkrun-executor-" + hashlib.sha256(executor_id.encode()).hexdigest()[:16]


def micro_time(value: dt.datetime) -> str:
    """``value`` as a Lease's times are written (``metav1.MicroTime``: UTC, microseconds)."""
    return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def pod_owner(namespace: str, environ: Mapping[str, str] = os.environ) -> dict[str, str] | None:
    """The operator's own Pod as the owner of its Lease in ``namespace`` (``POD_NAME``, ``POD_UID``
    and ``POD_NAMESPACE`` from the downward API; the chart sets them), or ``None`` when unknown or
    in another namespace (an owner reference cannot cross namespaces). With the Pod as owner the
    garbage collector deletes the Lease when the Pod goes, even when the graceful release could
    not run or was refused (``helm uninstall`` removes the Role while the Pod is terminating)."""
    name, uid = environ.get("POD_NAME", ""), environ.get("POD_UID", "")
    if not name or not uid or environ.get("POD_NAMESPACE") != namespace:
        return None
    return {"name": name, "uid": uid}


async def renew(
    rest: Kube,
    namespace: str,
    executor_id: str,
    *,
    now: dt.datetime | None = None,
    duration: int = LEASE_SECONDS,
    owner: Mapping[str, str] | None = None,
) -> None:
    """Create or renew this executor's Lease (valid ``duration`` seconds), owned by ``owner``
    (a Pod of ``namespace``: :func:`pod_owner`) when given."""
    stamp = micro_time(now or dt.datetime.now(dt.UTC))
    metadata: dict[str, Any] = {
        "name": lease_name(executor_id),
        "namespace": namespace,
        "labels": {LEASE_LABEL: "true"},
    }
    if owner is not None:
        # NB: no blockOwnerDeletion: that needs the right to set finalizers on Pods.
        metadata["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": owner["name"], "uid": owner["uid"]}
        ]
    await rest.apply(
        LEASES,
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": {
                "holderIdentity": executor_id,
                "leaseDurationSeconds": duration,
                "renewTime": stamp,
            },
        },
        namespace=namespace,
    )


async def release(rest: Kube, namespace: str, executor_id: str) -> None:
    """Delete this executor's Lease (a graceful stop): other executors see it gone at once and
    take its unfinished jobs over without waiting for the Lease to expire."""
    with contextlib.suppress(errors.KubeNotFound):
        await rest.delete(LEASES, lease_name(executor_id), namespace, propagation="Background")


class RecordClock:
    """When this process first saw each Lease's current record, on its own monotonic clock (see
    the module docstring): ``key`` -> (the record last seen, when first seen). Bounded by
    ``limit`` (the oldest record is forgotten first)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, limit: int = MAX_RECORDS) -> None:
        self.clock = clock
        self.limit = limit
        self._seen: dict[Hashable, tuple[tuple[str, str, str], float]] = {}

    def seen(self, key: Hashable, record: tuple[str, str, str], now: float | None = None) -> float:
        """When ``record`` was first seen for ``key`` (``now``, else this clock's now, if it is
        new or changed)."""
        found = self._seen.get(key)
        if found is not None and found[0] == record:
            return found[1]
        self._seen.pop(key, None)
        if len(self._seen) >= self.limit:
            del self._seen[next(iter(self._seen))]
        at = self.clock() if now is None else now
        self._seen[key] = (record, at)
        return at

    def forget(self, key: Hashable) -> None:
        self._seen.pop(key, None)

    def alive(self, key: Hashable, record: tuple[str, str, str], ttl: float) -> bool:
        """Whether ``record`` has been current for less than ``ttl`` seconds of this clock."""
        return self.clock() - self.seen(key, record) < ttl


class LeaseObserver(RecordClock):
    """Executor liveness judged by this process's own monotonic clock (see the module docstring);
    keys are ``(namespace, lease name)``."""

    def judge(self, namespace: str, leases: list[dict[str, Any]]) -> dict[str, bool]:
        """``{holder: alive}`` for the Leases of ``namespace`` listed just now."""
        now = self.clock()
        out: dict[str, bool] = {}
        present: set[tuple[str, str]] = set()
        for lease in leases:
            meta, spec = lease.get("metadata") or {}, lease.get("spec") or {}
            holder = spec.get("holderIdentity")
            if not holder:
                continue
            key = (namespace, str(meta.get("name") or holder))
            present.add(key)
            record = lease_record(lease)
            duration = int(spec.get("leaseDurationSeconds") or LEASE_SECONDS)
            alive = bool(record[1]) and now - self.seen(key, record, now) < duration
            out[str(holder)] = out.get(str(holder), False) or alive
        for key in [k for k in self._seen if isinstance(k, tuple) and k[0] == namespace and k not in present]:
            self.forget(key)  # the Lease is gone: forget it (bounded by the Leases that exist)
        return out


#: The process's observer (leases are judged by the time this process has watched them).
OBSERVER = LeaseObserver()


async def executor_liveness(
    rest: Kube, namespace: str, *, observer: LeaseObserver | None = None
) -> dict[str, bool]:
    """``{executor id: alive}`` for every executor Lease in ``namespace``."""
    leases = await rest.list(LEASES, namespace, label_selector=LEASE_LABEL)
    return (observer or OBSERVER).judge(namespace, leases)


async def mark_lost(daemonjobs: DaemonJobs, obj: dict[str, Any]) -> dict[str, Any]:
    """Record that ``obj``'s executor died: state ``lost`` with a WorkerLost error."""
    from sparkrun_operator.ops.runner import LOST_MESSAGE

    def mutate(status: DaemonJobStatus, current: dict[str, Any]) -> None:
        created = dt.datetime.fromisoformat(
            str(current["metadata"]["creationTimestamp"]).replace("Z", "+00:00")
        )
        jobs.finish(
            status,
            "lost",
            now=dt.datetime.now(dt.UTC),
            created=created,
            error=DaemonError(LOST_MESSAGE, type_name="WorkerLost"),
        )

    return await daemonjobs.update_status(obj, mutate, fresh=True)

"""Executor liveness: each operator process that runs jobs holds a renewed ``Lease``.

A job in an active state names its executor (``status.executor``). The executor's Lease
(``coordination.k8s.io/v1``, label ``sparkrun.dev/executor``) lives in the operator's own
namespace (the release namespace: ``--executor-namespace``), one per executor whatever
namespaces its jobs are in, and is renewed every few seconds while it runs; an executor whose
Lease has expired is dead. ``GET /v1/reservations`` reports each
claim's owner liveness from these Leases, and ``POST /v1/reservations/{owner}/reconcile``
marks a dead owner's jobs ``lost`` (never reruns them).

Liveness never compares the writer's clock with the reader's (a ``renewTime`` is another
machine's wall clock): like client-go's leader election, a :class:`LeaseObserver` notes, on its
own monotonic clock, when it first saw each Lease record (its ``renewTime`` and
``resourceVersion``); the executor is dead once the record has not changed for
``leaseDurationSeconds`` of the observer's time. Any clock skew between the executor and the
observer is therefore irrelevant; the price is that a process seeing a Lease for the first time
gives it one full duration before calling it dead.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from sparkrun_operator.api.daemonjob import DaemonJobStatus
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
    "executor_liveness",
    "lease_name",
    "mark_lost",
    "pod_owner",
    "release",
    "renew",
]

LEASE_LABEL = keys.LABEL_EXECUTOR
LEASE_SECONDS = 30


def lease_name(executor_id: str) -> str:
    return "sparkrun-executor-" + hashlib.sha256(executor_id.encode()).hexdigest()[:16]


def _micro(value: dt.datetime) -> str:
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
    stamp = _micro(now or dt.datetime.now(dt.UTC))
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


class LeaseObserver:
    """Executor liveness judged by this process's own monotonic clock (see the module docstring)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        #: ``(namespace, lease name)`` -> (the record last seen, when this process first saw it).
        self._seen: dict[tuple[str, str], tuple[tuple[str, str, str], float]] = {}

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
            # NB: resourceVersions are opaque: compared for equality, never ordered.
            record = (str(holder), str(spec.get("renewTime") or ""), str(meta.get("resourceVersion") or ""))
            seen = self._seen.get(key)
            if seen is None or seen[0] != record:
                seen = self._seen[key] = (record, now)
            duration = int(spec.get("leaseDurationSeconds") or LEASE_SECONDS)
            alive = bool(record[1]) and now - seen[1] < duration
            out[str(holder)] = out.get(str(holder), False) or alive
        for key in [k for k in self._seen if k[0] == namespace and k not in present]:
            del self._seen[key]  # the Lease is gone: forget it (bounded by the Leases that exist)
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

"""Executor liveness: each operator process that runs jobs holds a renewed ``Lease``.

A job in an active state names its executor (``status.executor``). The executor's Lease
(``coordination.k8s.io/v1``, label ``sparkrun.dev/executor``) is renewed every few seconds while
it runs; an executor whose Lease has expired is dead. ``GET /v1/reservations`` reports each
claim's owner liveness from these Leases, and ``POST /v1/reservations/{owner}/reconcile``
marks a dead owner's jobs ``lost`` (never reruns them).
"""

from __future__ import annotations

import datetime as dt
import hashlib
from typing import Any

from sparkrun_operator.api.daemonjob import DaemonJobStatus
from sparkrun_operator.k8s.client import LEASES, Kube
from sparkrun_operator.k8s.daemonjobs import DaemonJobs
from sparkrun_operator.ops import jobs
from sparkrun_operator.ops.errors import DaemonError
from sparkrun_operator.render import keys

__all__ = ["LEASES", "LEASE_LABEL", "executor_liveness", "lease_name", "mark_lost", "renew"]

LEASE_LABEL = keys.LABEL_EXECUTOR
LEASE_SECONDS = 30


def lease_name(executor_id: str) -> str:
    return "sparkrun-executor-" + hashlib.sha256(executor_id.encode()).hexdigest()[:16]


def _micro(value: dt.datetime) -> str:
    return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


async def renew(
    rest: Kube,
    namespace: str,
    executor_id: str,
    *,
    now: dt.datetime | None = None,
    duration: int = LEASE_SECONDS,
) -> None:
    """Create or renew this executor's Lease (valid ``duration`` seconds)."""
    stamp = _micro(now or dt.datetime.now(dt.UTC))
    await rest.apply(
        LEASES,
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": lease_name(executor_id),
                "namespace": namespace,
                "labels": {LEASE_LABEL: "true"},
            },
            "spec": {
                "holderIdentity": executor_id,
                "leaseDurationSeconds": LEASE_SECONDS,
                "renewTime": stamp,
            },
        },
        namespace=namespace,
    )


async def executor_liveness(rest: Kube, namespace: str, *, now: dt.datetime | None = None) -> dict[str, bool]:
    """``{executor id: alive}`` for every executor Lease in ``namespace``."""
    current = now or dt.datetime.now(dt.UTC)
    out: dict[str, bool] = {}
    for lease in await rest.list(LEASES, namespace, label_selector=LEASE_LABEL):
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity")
        renewed = spec.get("renewTime")
        if not holder:
            continue
        alive = False
        if renewed:
            stamp = dt.datetime.fromisoformat(str(renewed).replace("Z", "+00:00"))
            alive = (
                stamp + dt.timedelta(seconds=int(spec.get("leaseDurationSeconds") or LEASE_SECONDS)) > current
            )
        out[holder] = alive
    return out


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

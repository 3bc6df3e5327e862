"""Drain and replace, carried out (ADR 0049): the cluster controller's I/O around ``plan/drain.py``.

- :func:`observe_groups`: the serving groups, from the ``iw_jobsets`` and ``iw_pods`` indexes
  (no API reads), with how many other groups of each workload are ready, of the workloads
  :func:`drain_scope` names: those placed on this cluster (a node shared by two clusters is not
  drained twice at once, and pods that merely carry a group's labels are no group);
- :func:`evict`: the one eviction a pass asks for, through the Eviction API
  (``pods/eviction`` create, which honours PodDisruptionBudgets; the operator needs no right to
  patch nodes or delete pods for it), and its outcome folded into the status the pass writes.

Nothing is kept in memory: the status (``status.drain``) is the drain's whole state, so an
operator restarted mid-drain carries on where the status says.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Collection, Mapping
from typing import Any

from sparkrun_operator.api.clip import clip
from sparkrun_operator.api.drain import ClusterDrainStatus
from sparkrun_operator.k8s import errors
from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.plan.drain import (
    TERMINAL_PHASES,
    Eviction,
    EvictionOutcome,
    ObservedGroup,
    after_eviction,
)
from sparkrun_operator.plan.workload.model import ObservedPod
from sparkrun_operator.render import keys as keys_

log = logging.getLogger("sparkrun.operator.drain")


def drain_scope(
    cluster: str,
    dependencies: Mapping[tuple[str, str], tuple[str | None, str | None, str | None]],
    previous: ClusterDrainStatus | None,
) -> set[tuple[str, str]]:
    """``(namespace, workload)`` of the workloads whose groups ``cluster`` drains: those the
    workload controller placed on it (``Memo.dependencies``: the cluster each workload resolved
    to, the default one included), and those whose move its ``status.drain`` has not finished
    (a workload moved to another cluster mid-drain, or not seen yet after an operator restart)."""
    mine = {key for key, deps in list(dependencies.items()) if deps[2] == cluster}
    if previous is not None:
        mine.update((g.namespace, g.workload) for g in previous.groups if g.state != "Ready")
    return mine


def observe_groups(
    jobsets_index: Mapping[Any, Any] | None,
    pods_index: Mapping[Any, Any] | None,
    *,
    workloads: Collection[tuple[str, str]] | None = None,
) -> list[ObservedGroup]:
    """Every serving group (a workload's replica: its JobSet and the pods of it that are not
    terminal) of the served namespaces, from the indexes; only those of ``workloads`` when
    given. A group is listed while its JobSet exists, pods or not (a restarting group has none
    for a moment; one that is gone is not listed); ``other_ready`` counts the workload's other
    replicas whose leader is Ready."""
    # NB: a cluster's scope is its own workloads: looked up one by one, never a walk of every
    # workload the indexes hold
    keys = set(workloads) if workloads is not None else set(jobsets_index or ()) | set(pods_index or ())
    groups: list[ObservedGroup] = []
    for key in sorted(keys):
        namespace, workload = key
        jobsets: dict[int, set[str]] = {}
        for js in list((jobsets_index or {}).get(key, ())):
            if js.replica is not None and not js.deleting:
                jobsets.setdefault(js.replica, set()).add(js.name)
        pods: dict[int, list[ObservedPod]] = {}
        for pod in list((pods_index or {}).get(key, ())):
            if pod.replica is not None and pod.phase not in TERMINAL_PHASES:
                pods.setdefault(pod.replica, []).append(pod)
                jobsets.setdefault(pod.replica, set()).add(pod.jobset)
        ready = {
            replica
            for replica, found in pods.items()
            if any(p.role == keys_.ROLE_LEADER and p.ready and not p.deleting for p in found)
        }
        for replica, names in sorted(jobsets.items()):
            groups.append(
                ObservedGroup(
                    namespace=str(namespace),
                    workload=str(workload),
                    replica=replica,
                    jobset=max(names),
                    pods=tuple(pods.get(replica, ())),
                    other_ready=len(ready - {replica}),
                )
            )
    return groups


def _eviction_body(namespace: str, pod: str) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod, "namespace": namespace},
    }


async def evict(
    kube: Kube, status: ClusterDrainStatus, eviction: Eviction, *, now: dt.datetime
) -> ClusterDrainStatus:
    """Evict ``eviction.pod`` and return ``status`` with the outcome. A refusal (429: a
    PodDisruptionBudget; 403/409 likewise) blocks the group; any other API error is raised (the
    pass fails and runs again: the status still asks for the eviction)."""
    path = f"/api/v1/namespaces/{eviction.namespace}/pods/{eviction.pod}/eviction"
    outcome: EvictionOutcome
    detail = ""
    try:
        await kube.request("POST", path, body=_eviction_body(eviction.namespace, eviction.pod))
        outcome = "evicted"
    except errors.KubeNotFound:
        outcome = "gone"
    except (errors.KubeTooManyRequests, errors.KubeForbidden, errors.KubeConflict) as error:
        outcome = "refused"
        detail = clip(str(error), 512)
    log.info("drain: eviction of %s/%s: %s %s", eviction.namespace, eviction.pod, outcome, detail)
    return after_eviction(status, eviction, outcome, detail=detail, now=now)

"""InferenceCluster controller: member nodes and their GPU pods -> the cluster's status.

A per-cluster daemon (``ic-reconcile``) recomputes the status with ``plan/cluster.py`` from the
node and GPU-pod indexes whenever a Node, a GPU-requesting pod or another InferenceCluster
changes (bursts coalesce), and at least every drift interval; it writes only when the status
changed. The cluster has no children, so it needs no other action.

The status also holds the apply-on-request fields in use (``status.applied``) and a changed
``spec.gpuResource`` waiting for ``spec.approve`` (``status.drift``, ``UpToDate``; ADR 0046):
workloads are placed with ``status.applied`` (``plan/observe.py``), and a status write is a
cluster event, which pokes the workloads on the cluster once an approved value is applied.

Drain and replace (``spec.drain``, ADR 0049): the same pass plans ``status.drain`` with
``plan/drain.py`` from the serving groups (``iw_jobsets``, ``iw_pods``) and makes the one eviction
it asks for (:mod:`.drain`) before the status write; it looks again every few seconds while a
drain runs.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import kopf

from sparkrun_operator.api.cluster import InferenceClusterSpec, InferenceClusterStatus
from sparkrun_operator.api.meta import utcnow
from sparkrun_operator.api.resources import INFERENCE_CLUSTER
from sparkrun_operator.controllers import drain, indexes
from sparkrun_operator.controllers.loop import run_loop
from sparkrun_operator.controllers.memo import Memo
from sparkrun_operator.controllers.reconciler import Event, Outcome, post, run_pass, writes_status
from sparkrun_operator.controllers.status import current_status
from sparkrun_operator.k8s.resources import resource_of
from sparkrun_operator.plan import observe
from sparkrun_operator.plan.cluster import ClusterRef, ObservedGpuPod, ObservedNode, members, plan_status
from sparkrun_operator.plan.drain import DrainPlan, ObservedGroup, plan_drain, transitions
from sparkrun_operator.plan.queue import QueueRead, cluster_queue

CLUSTERS = resource_of(INFERENCE_CLUSTER)
CLUSTER_ID = indexes.CLUSTER_ID


def lane_key(name: str) -> tuple[str, str]:
    """The trigger of a cluster's daemon."""
    return ("ic", name)


def _all(index: Mapping[Any, Any] | None) -> list[Any]:
    if index is None:
        return []
    return [value for key in list(index) for value in index[key]]


@dataclass(frozen=True)
class Observed:
    """What :func:`plan` looks at: the cluster, the nodes, the GPU pods and the other clusters."""

    name: str
    spec: InferenceClusterSpec
    generation: int
    previous: InferenceClusterStatus
    nodes: list[ObservedNode]
    pods: list[ObservedGpuPod]
    clusters: list[ClusterRef]
    #: The serving groups of the served namespaces (only with ``spec.drain``).
    groups: list[ObservedGroup]
    #: With ``spec.queueName``: the namespaces of the workloads on the cluster, and the last
    #: reads of the LocalQueue of that name in each (``controllers/kueue.py``; issue 32).
    queue_namespaces: tuple[str, ...] = ()
    queue_reads: Mapping[tuple[str, str], QueueRead] = field(default_factory=dict)


def observe_cluster(
    body: kopf.Body,
    indices: Mapping[str, Any],
    dependencies: Mapping[tuple[str, str], tuple[str | None, str | None, str | None]] | None = None,
) -> Observed | None:
    """The cluster and its world from the indexes (no API reads); ``None`` while it is deleted.
    ``dependencies`` (``Memo.dependencies``) says which workloads are on the cluster: only
    their groups are drained."""
    meta = body.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return None
    name = str(meta["name"])
    spec = InferenceClusterSpec.model_validate(body.get("spec") or {})
    previous = current_status(body, InferenceClusterStatus)
    nodes: list[ObservedNode] = _all(indices.get("iw_nodes"))
    pods: list[ObservedGpuPod] = _all(indices.get("iw_gpu_pods"))
    refs: list[ClusterRef] = []
    for raw in _all(indices.get("iw_clusters")):
        parsed = observe.cluster_from(raw)
        if parsed is not None and parsed[1].name != name:
            refs.append(parsed[1])
    groups: list[ObservedGroup] = []
    if spec.drain is not None:
        mine = drain.drain_scope(name, dependencies or {}, previous.drain)
        groups = drain.observe_groups(indices.get("iw_jobsets"), indices.get("iw_pods"), workloads=mine)
    return Observed(
        name=name,
        spec=spec,
        generation=int(meta.get("generation") or 0),
        previous=previous,
        nodes=nodes,
        pods=pods,
        clusters=refs,
        groups=groups,
    )


def with_queue(ctx: Memo, found: Observed) -> Observed:
    """``found`` with the namespaces of the workloads on it (``Memo.dependencies``) and the last
    reads of its ``queueName`` there (asked of ``Memo.queues``, which reads them next round)."""
    queue = found.spec.queue_name
    assert queue is not None
    namespaces = sorted({ns for (ns, _), dep in list(ctx.dependencies.items()) if dep[2] == found.name})
    reads = ctx.queues.cluster(found.name, [(ns, queue) for ns in namespaces])
    return replace(found, queue_namespaces=tuple(namespaces), queue_reads=reads)


@dataclass(frozen=True)
class ClusterPlan:
    """The cluster's status and the drain's next step."""

    status: InferenceClusterStatus
    drain: DrainPlan
    now: dt.datetime


def plan(observed: Observed) -> ClusterPlan:
    """The cluster's status (``plan/cluster.py``) with its drain (``plan/drain.py``)."""
    now = utcnow()
    status = plan_status(
        name=observed.name,
        spec=observed.spec,
        generation=observed.generation,
        previous=observed.previous,
        nodes=observed.nodes,
        pods=observed.pods,
        clusters=observed.clusters,
        now=now,
    )
    drained = plan_drain(
        spec=observed.spec.drain,
        previous=observed.previous.drain,
        members=members(observed.spec, observed.nodes),
        groups=observed.groups,
        now=now,
    )
    status = cluster_queue(
        status,
        queue=observed.spec.queue_name,
        namespaces=observed.queue_namespaces,
        reads=observed.queue_reads,
        previous=observed.previous.conditions,
        generation=observed.generation,
        now=now,
    )
    return ClusterPlan(status=status.model_copy(update={"drain": drained.status}), drain=drained, now=now)


def executes(ctx: Memo) -> Callable[[Observed, ClusterPlan], Awaitable[Outcome[InferenceClusterStatus]]]:
    """The execute step: the drain's one eviction, if any, its outcome folded into the status."""

    async def execute(observed: Observed, planned: ClusterPlan) -> Outcome[InferenceClusterStatus]:
        status = planned.status
        step = planned.drain
        if step.evict is not None and status.drain is not None:
            moved = await drain.evict(ctx.kube, status.drain, step.evict, now=planned.now)
            status = status.model_copy(update={"drain": moved})
        events = tuple(
            Event(type=kind, reason=reason, message=message)
            for kind, reason, message in transitions(observed.previous.drain, status.drain)
        )
        return Outcome(status=status, events=events, requeue=step.requeue_after)

    return execute


async def reconcile(ctx: Memo, *, body: kopf.Body, indices: Mapping[str, Any]) -> float | None:
    """One pass for one cluster (:func:`.reconciler.run_pass`); asks for an early requeue only
    while a drain runs."""
    name = str((body.get("metadata") or {}).get("name"))

    async def observed() -> Observed | None:
        found = observe_cluster(body, indices, ctx.dependencies)
        if found is None or found.spec.queue_name is None:
            ctx.queues.forget_cluster(name)
            return found
        return with_queue(ctx, found)

    def emit(outcome: Outcome[InferenceClusterStatus], wrote: bool) -> None:
        conditions = outcome.status.conditions
        ready = next((cond.status for cond in conditions if cond.type == "Ready"), "Unknown")
        ctx.metrics.observe_ready("InferenceCluster", name, ready)
        if wrote:
            post(body, outcome.events)

    return await run_pass(
        observe=observed,
        plan=plan,
        execute=executes(ctx),
        write_status=writes_status(ctx, CLUSTERS, body),
        emit_events=emit,
    )


def register(registry: kopf.OperatorRegistry, *, drift_seconds: float) -> None:
    """Register the cluster controller's handlers on ``registry`` (indexes are shared)."""

    def poke_all(ctx: Memo) -> None:
        ctx.triggers.poke_group("ic")

    @kopf.on.event("", "v1", "nodes", id="ic-node-changed", registry=registry)
    async def ic_node_changed(*, memo: Any, **_: Any) -> None:
        poke_all(memo.ctx)

    @kopf.on.event("", "v1", "pods", id="ic-pod-changed", registry=registry)
    async def ic_pod_changed(*, body: kopf.Body, memo: Any, **_: Any) -> None:
        if observe.gpu_pod_from(body) is not None:
            poke_all(memo.ctx)

    @kopf.on.event(*CLUSTER_ID, id="ic-changed", registry=registry)
    async def ic_changed(*, memo: Any, **_: Any) -> None:
        poke_all(memo.ctx)  # the single-default rule involves every cluster

    @kopf.timer(
        *CLUSTER_ID, id="ic-drift", interval=drift_seconds, initial_delay=drift_seconds, registry=registry
    )
    async def ic_drift(*, name: str, memo: Any, **_: Any) -> None:
        memo.ctx.triggers.poke(lane_key(name))

    @kopf.daemon(*CLUSTER_ID, id="ic-reconcile", cancellation_timeout=10.0, registry=registry)
    async def ic_reconcile(
        *,
        name: str,
        body: kopf.Body,
        memo: Any,
        stopped: kopf.DaemonStopped,
        logger: logging.Logger | logging.LoggerAdapter[Any],
        **kwargs: Any,
    ) -> None:
        ctx: Memo = memo.ctx
        indices = indexes.pick(kwargs)

        async def one_pass() -> float | None:
            return await reconcile(ctx, body=body, indices=indices)

        try:
            await run_loop(
                ctx,
                key=lane_key(name),
                kind="InferenceCluster",
                stopped=stopped,
                logger=logger,
                reconcile=one_pass,
            )
        finally:
            ctx.metrics.observe_ready("InferenceCluster", name, None)
            ctx.queues.forget_cluster(name)

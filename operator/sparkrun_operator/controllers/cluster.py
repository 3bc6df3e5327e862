"""InferenceCluster controller: member nodes and their GPU pods -> the cluster's status.

A per-cluster daemon (``ic-reconcile``) recomputes the status with ``plan/cluster.py`` from the
node and GPU-pod indexes whenever a Node, a GPU-requesting pod or another InferenceCluster
changes (bursts coalesce), and at least every drift interval; it writes only when the status
changed. The cluster has no children, so it needs no other action.

The status also holds the apply-on-request fields in use (``status.applied``) and a changed
``spec.gpuResource`` waiting for ``spec.approve`` (``status.drift``, ``UpToDate``; ADR 0046):
workloads are placed with ``status.applied`` (``plan/observe.py``), and a status write is a
cluster event, which pokes the workloads on the cluster once an approved value is applied.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import kopf

from sparkrun_operator.api.cluster import InferenceClusterSpec, InferenceClusterStatus
from sparkrun_operator.api.meta import utcnow
from sparkrun_operator.api.resources import INFERENCE_CLUSTER
from sparkrun_operator.controllers import indexes
from sparkrun_operator.controllers.loop import run_loop
from sparkrun_operator.controllers.memo import Memo
from sparkrun_operator.controllers.reconciler import Outcome, nothing_to_execute, run_pass, writes_status
from sparkrun_operator.controllers.status import current_status
from sparkrun_operator.k8s.resources import resource_of
from sparkrun_operator.plan import observe
from sparkrun_operator.plan.cluster import ClusterRef, ObservedGpuPod, ObservedNode, plan_status

CLUSTERS = resource_of(INFERENCE_CLUSTER)
CLUSTER_ID = indexes.CLUSTER_ID


def _key(name: str) -> tuple[str, str]:
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


def observe_cluster(body: kopf.Body, indices: Mapping[str, Any]) -> Observed | None:
    """The cluster and its world from the indexes (no API reads); ``None`` while it is deleted."""
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
    return Observed(
        name=name,
        spec=spec,
        generation=int(meta.get("generation") or 0),
        previous=previous,
        nodes=nodes,
        pods=pods,
        clusters=refs,
    )


def plan(observed: Observed) -> InferenceClusterStatus:
    """The cluster's status (``plan/cluster.py``): the whole plan of a kind without children."""
    return plan_status(
        name=observed.name,
        spec=observed.spec,
        generation=observed.generation,
        previous=observed.previous,
        nodes=observed.nodes,
        pods=observed.pods,
        clusters=observed.clusters,
        now=utcnow(),
    )


async def reconcile(ctx: Memo, *, body: kopf.Body, indices: Mapping[str, Any]) -> float | None:
    """One pass for one cluster (:func:`.reconciler.run_pass`, nothing to execute); never asks
    for an early requeue."""
    name = str((body.get("metadata") or {}).get("name"))

    async def observed() -> Observed | None:
        return observe_cluster(body, indices)

    def emit(outcome: Outcome[InferenceClusterStatus], wrote: bool) -> None:
        conditions = outcome.status.conditions
        ready = next((cond.status for cond in conditions if cond.type == "Ready"), "Unknown")
        ctx.metrics.observe_ready("InferenceCluster", name, ready)

    return await run_pass(
        observe=observed,
        plan=plan,
        execute=nothing_to_execute,
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
        memo.ctx.triggers.poke(_key(name))

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
                key=_key(name),
                kind="InferenceCluster",
                stopped=stopped,
                logger=logger,
                reconcile=one_pass,
            )
        finally:
            ctx.metrics.observe_ready("InferenceCluster", name, None)

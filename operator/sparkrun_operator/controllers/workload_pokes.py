"""Which events wake an InferenceWorkload's lanes (the workload controller's pokes).

- the workload itself: a new generation, a requested reconcile (``workloads.reconcile``'s
  annotation) or a deletion pokes its full lane; a change of the names it claims re-plans the
  rivals that rank after it (:func:`poke_rivals`, plan/names.py). The names are
  ``status.model`` (plan/served.py), written by the workload's own planner, so the event of
  that status write is the one that pokes: a spec or Recipe change moves them one pass later;
- its JobSets and pods poke its status lane (a pod's failure is recorded first, with its
  redacted log lines: ``controllers/failurelog.py``), which plans at once and pokes the full lane only
  when the plan has something for it (ADR 0030); a rollout gate's InferenceBenchmark pokes the
  full lane;
- its ControllerRevisions (serving revisions, ADR 0046) poke its full lane;
- the Recipe, ModelCache and InferenceCluster it uses (``ctx.dependencies``) poke its full lane
  (a cluster: when what the plan reads of it changed, its spec or ``status.applied``); a change
  of its groups' entry in a cluster's ``status.drain`` pokes its status lane (the
  status copies it: plan/drain.py);
- a Node event pokes the full lane of the workloads whose last pass found no node with the GPU
  memory they need (``ctx.memory_waiting``; plan/fit.py): a bigger node, or a label, clears it;
- the ``iw-drift`` timer pokes every workload's full lane periodically.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kopf

from sparkrun_operator.api import conditions as c
from sparkrun_operator.api.drain import MAX_GROUPS
from sparkrun_operator.api.workload import InferenceWorkloadStatus
from sparkrun_operator.controllers import indexes
from sparkrun_operator.controllers.indexes import (
    BENCHMARK_ID,
    CACHE_ID,
    CLUSTER_ID,
    GATES,
    JOBSET_ID,
    OURS,
    RECIPE_ID,
    REVISION_ID,
)
from sparkrun_operator.controllers.memo import Memo
from sparkrun_operator.plan import observe
from sparkrun_operator.render import keys


def full_key(namespace: str, name: str) -> tuple[str, str, str]:
    """The trigger of a workload's full lane."""
    return ("iw", namespace, name)


def status_key(namespace: str, name: str) -> tuple[str, str, str]:
    """The trigger of a workload's status lane."""
    return ("iw-status", namespace, name)


def requested(meta: Mapping[str, Any]) -> tuple[int, str | None]:
    """The generation and the ``reconcile-requested`` annotation: a pass is due when either moved."""
    annotations = meta.get("annotations") or {}
    return int(meta.get("generation") or 0), annotations.get(keys.ANNOTATION_RECONCILE_REQUESTED)


def register(
    registry: kopf.OperatorRegistry,
    *,
    workload_id: tuple[str, str, str],
    drift_seconds: float,
    network_policies: bool = False,
) -> None:
    """Register the pokes of the workload controller on ``registry`` (with ``network_policies``,
    its engines' NetworkPolicies are watched too)."""
    _register_own_pokes(registry, workload_id=workload_id, drift_seconds=drift_seconds)
    if network_policies:
        _register_policy_pokes(registry)
    _register_dependency_pokes(registry)


def _register_policy_pokes(registry: kopf.OperatorRegistry) -> None:
    """A change to a workload's engine NetworkPolicy (deleted, or edited by someone else) is put
    right by the next full pass at once: while it is missing no policy selects the engines, so
    they accept every connection; the drift timer alone would leave that for minutes."""

    @kopf.on.event(
        "networking.k8s.io", "v1", "networkpolicies", id="iw-policy-changed", labels=OURS, registry=registry
    )
    async def iw_policy_changed(*, body: kopf.Body, memo: Any, **_: Any) -> None:
        key = observe.workload_key(body)
        if key:
            memo.ctx.triggers.poke(full_key(*key))


def _register_own_pokes(
    registry: kopf.OperatorRegistry, *, workload_id: tuple[str, str, str], drift_seconds: float
) -> None:
    """Pokes from the workload itself, its JobSets and pods, and the drift timer."""

    @kopf.on.event(*workload_id, id="iw-changed", registry=registry)
    async def iw_changed(
        *, namespace: str | None, name: str, body: kopf.Body, type: str | None, memo: Any, **kwargs: Any
    ) -> None:
        ctx: Memo = memo.ctx
        meta = body.get("metadata") or {}
        poke_rivals(ctx, (namespace or "", name), None if type == "DELETED" else body, kwargs.get("iw_names"))
        if type == "DELETED":
            ctx.memory_waiting.discard((namespace or "", name))
            ctx.failures.drop((namespace or "", name))
        # NB: the operator's own status writes come back as events too; a pass for those
        # would find nothing to do. Only a new generation (a spec change), a requested
        # reconcile (``workloads.reconcile``'s annotation) or a deletion counts.
        if meta.get("deletionTimestamp") or ctx.reconciled.get((namespace or "", name)) != requested(meta):
            ctx.triggers.poke(full_key(namespace or "", name))

    def _child_changed(ctx: Memo, body: kopf.Body) -> None:
        key = observe.workload_key(body)
        if key:
            # the status lane plans at once: it writes the status, and pokes the full lane
            # when the plan has anything else to do
            ctx.triggers.poke(status_key(*key))

    @kopf.on.event(*JOBSET_ID, id="iw-jobset-changed", labels=OURS, registry=registry)
    async def iw_jobset_changed(*, body: kopf.Body, memo: Any, **_: Any) -> None:
        _child_changed(memo.ctx, body)

    @kopf.on.event(*BENCHMARK_ID, id="iw-gate-changed", labels=GATES, registry=registry)
    async def iw_gate_changed(*, body: kopf.Body, memo: Any, **_: Any) -> None:
        key = observe.gate_key(body)
        if key:
            memo.ctx.triggers.poke(full_key(*key))

    @kopf.on.event(*REVISION_ID, id="iw-revision-changed", labels=OURS, registry=registry)
    async def iw_revision_changed(*, body: kopf.Body, memo: Any, **_: Any) -> None:
        # a serving revision made, pruned or edited (ADR 0046): the full lane plans from it
        key = observe.workload_key(body)
        if key:
            memo.ctx.triggers.poke(full_key(*key))

    @kopf.on.event("", "v1", "pods", id="iw-pod-changed", labels=OURS, registry=registry)
    async def iw_pod_changed(*, body: kopf.Body, memo: Any, **_: Any) -> None:
        ctx: Memo = memo.ctx
        # NB: before the group restart deletes the pod: the pass this pokes reads the record;
        # a workload known is one a full pass has looked at (``dependencies``)
        ctx.failures.record(body, known=ctx.dependencies.__contains__)
        _child_changed(ctx, body)

    @kopf.timer(
        *workload_id, id="iw-drift", interval=drift_seconds, initial_delay=drift_seconds, registry=registry
    )
    async def iw_drift(*, namespace: str | None, name: str, memo: Any, **_: Any) -> None:
        memo.ctx.triggers.poke(full_key(namespace or "", name))


def poke_rivals(ctx: Memo, key: tuple[str, str], body: kopf.Body | None, index: Any) -> None:
    """When the names a workload claims change (or it goes), re-plan every workload sharing an
    old or new name with it that ranks after it: their ``Routable`` condition may change
    (plan/names.py). An older rival's cannot: it keeps a name against any newer claim, and the
    winner its condition names is older than both."""
    claim = indexes.claim_of(body) if body is not None else None
    before = ctx.claims.get(key)
    if claim == before:
        return
    if claim is None:
        ctx.claims.pop(key, None)
    else:
        ctx.claims[key] = claim
    # NB: the full lane only (debounced and gated, so a burst coalesces): the status lane
    # plans at once on every poke (ADR 0030).
    # NB: creation stamps have one-second resolution, so workloads created in one burst tie on
    # time and rank by namespace and name; a new workload is newer than nearly every rival, so
    # a burst of N no longer pokes N^2 times.
    for old_or_new in (before, claim):
        if old_or_new is None:
            continue
        mine = old_or_new.rank()
        for rival in indexes.rivals(index, old_or_new):
            if rival.rank() > mine and (rival.namespace, rival.name) != key:
                ctx.triggers.poke(full_key(rival.namespace, rival.name))


def record_memory_wait(ctx: Memo, key: tuple[str, str], status: InferenceWorkloadStatus) -> None:
    """Remember whether a full pass left the workload waiting for a node with more GPU memory
    (``Scheduled=False``, ``InsufficientGPUMemory``), so that a Node event re-plans it."""
    reason = c.REASON_INSUFFICIENT_GPU_MEMORY
    waiting = any(
        cond.type == c.SCHEDULED and cond.status == "False" and cond.reason == reason
        for cond in status.conditions
    )
    if waiting:
        ctx.memory_waiting.add(key)
    else:
        ctx.memory_waiting.discard(key)


def node_changed(marks: dict[str, int], event: str | None, body: Mapping[str, Any]) -> bool:
    """Whether a Node event changed what the memory fit and the candidate nodes read (labels,
    GPU capacity, readiness, cordon), or a node came or went; ``marks`` keeps a hash of that per
    node (one int a node). Kubelets rewrite a Node's status every few minutes (heartbeats,
    images): at hundreds of nodes, an event a second that must not re-plan every waiting workload."""
    name = str((body.get("metadata") or {}).get("name") or "")
    if event == "DELETED":
        return marks.pop(name, None) is not None
    node = observe.node_from(body)
    if node is None:
        return False
    mark = hash(
        (
            tuple(sorted(node.labels.items())),
            tuple(sorted(node.capacity.items())),
            tuple(sorted(node.allocatable.items())),
            node.ready,
            node.unschedulable,
        )
    )
    if marks.get(name) == mark:
        return False
    marks[name] = mark
    return True


def _register_dependency_pokes(registry: kopf.OperatorRegistry) -> None:
    """Pokes of the workloads that use a changed Recipe, ModelCache or InferenceCluster, and of
    the workloads waiting for GPU memory on any Node change (a node joins, or is labelled)."""

    marks: dict[str, int] = {}

    @kopf.on.event("", "v1", "nodes", id="iw-node-changed", registry=registry)
    async def iw_node_changed(*, type: str | None, body: kopf.Body, memo: Any, **_: Any) -> None:
        ctx: Memo = memo.ctx
        if not node_changed(marks, type, body) or not ctx.memory_waiting:
            return
        for ns, wl in list(ctx.memory_waiting):
            ctx.triggers.poke(full_key(ns, wl))

    def _poke_dependents(ctx: Memo, *, namespace: str | None, slot: int, name: str) -> None:
        for (ns, wl), deps in list(ctx.dependencies.items()):
            if (namespace is None or ns == namespace) and deps[slot] == name:
                ctx.triggers.poke(full_key(ns, wl))

    @kopf.on.event(*RECIPE_ID, id="iw-recipe-changed", registry=registry)
    async def iw_recipe_changed(*, namespace: str | None, name: str, memo: Any, **_: Any) -> None:
        _poke_dependents(memo.ctx, namespace=namespace, slot=0, name=name)

    @kopf.on.event(*CACHE_ID, id="iw-cache-changed", registry=registry)
    async def iw_cache_changed(*, namespace: str | None, name: str, memo: Any, **_: Any) -> None:
        _poke_dependents(memo.ctx, namespace=namespace, slot=1, name=name)

    #: Each cluster's drain entries as its last event showed them (:func:`drain_changes`).
    drains: dict[str, dict[tuple[str, str], DrainEntry]] = {}
    #: What the workloads read of each cluster, as its last event showed it (:func:`placement_changed`).
    placements: dict[str, Placement] = {}

    @kopf.on.event(*CLUSTER_ID, id="iw-cluster-changed", registry=registry)
    async def iw_cluster_changed(
        *, name: str, body: kopf.Body, type: str | None, memo: Any, **_: Any
    ) -> None:
        ctx: Memo = memo.ctx
        current = None if type == "DELETED" else body
        # NB: only what the workloads read (spec, status.applied): the cluster's status writes
        # (a drain's progress every few seconds) would otherwise re-plan all of them each time.
        # A (new) default cluster concerns every workload naming none.
        if placement_changed(placements, name, current):
            for (ns, wl), deps in list(ctx.dependencies.items()):
                if deps[2] in (name, None):
                    ctx.triggers.poke(full_key(ns, wl))
        # The workloads whose groups' entry in the cluster's status.drain changed copy it into
        # their status (plan/drain.py): a status-only change, for the status lane.
        for ns, wl in drain_changes(drains, name, current):
            ctx.triggers.poke(status_key(ns, wl))


#: What a workload's plan reads of a cluster (``plan/observe.py`` ``cluster_from`` and the
#: capacity check): its spec, ``status.applied`` and creation time.
Placement = tuple[Any, Any, Any]


def placement_changed(seen: dict[str, Placement], cluster: str, body: Any | None) -> bool:
    """Whether ``cluster``'s event changed what the workloads read of it (``seen`` keeps each
    cluster's :data:`Placement`; ``body`` ``None``: the cluster is gone, a change). The rest of
    its status (the drain, conditions, drift) is not read by their plans."""
    before = seen.pop(cluster, None)
    if body is None:
        return True
    meta = body.get("metadata") if isinstance(body, Mapping) else None
    status = body.get("status") if isinstance(body, Mapping) else None
    now = (
        body.get("spec"),
        status.get("applied") if isinstance(status, Mapping) else None,
        meta.get("creationTimestamp") if isinstance(meta, Mapping) else None,
    )
    seen[cluster] = now
    return before != now


#: A workload's entry in a cluster's ``status.drain``: the drain's request and state, and the
#: workload's groups there (raw), what its ``status.drain`` copies.
DrainEntry = tuple[Any, Any, list[Any]]


def drain_entries(body: Any) -> dict[tuple[str, str], DrainEntry]:
    """Each workload's :data:`DrainEntry` in a cluster's raw ``status.drain``, keyed
    ``(namespace, workload)`` (bounded plain reads: no parse on every cluster event)."""
    status = body.get("status") if isinstance(body, Mapping) else None
    drain = status.get("drain") if isinstance(status, Mapping) else None
    if not isinstance(drain, Mapping):
        return {}
    groups = drain.get("groups")
    found: dict[tuple[str, str], DrainEntry] = {}
    for group in groups[:MAX_GROUPS] if isinstance(groups, list) else []:
        if isinstance(group, Mapping) and group.get("namespace") and group.get("workload"):
            key = (str(group["namespace"]), str(group["workload"]))
            found.setdefault(key, (drain.get("request"), drain.get("state"), []))[2].append(group)
    return found


def drain_changes(
    seen: dict[str, dict[tuple[str, str], DrainEntry]], cluster: str, body: Any | None
) -> set[tuple[str, str]]:
    """``(namespace, workload)`` of the workloads whose entry in ``cluster``'s drain changed since
    its last event (``seen`` keeps each cluster's entries; ``body`` ``None``: the cluster is gone),
    listed in it before or now: only their copies change."""
    now = drain_entries(body) if body is not None else {}
    before = seen.pop(cluster, {})
    if now:
        seen[cluster] = now
    return {key for key in before.keys() | now.keys() if before.get(key) != now.get(key)}

"""InferenceWorkload controller: parse -> observe -> plan -> act -> one status write -> events.

Handlers (all registered on an explicit kopf registry, with explicit ids):

- indexes (kopf's in-memory caches, updated from watches before any handler runs) of the
  workloads' JobSets, pods and Services, and of Recipes, ModelCaches, InferenceClusters, Nodes
  and GPU-requesting pods: a reconcile reads no object from the API;
- ``on.event`` of the workload, its JobSets and pods, and of the Recipes / ModelCaches /
  InferenceClusters it uses: poke the workload's daemon;
- ``timer`` ``iw-drift``: poke every workload periodically (drift repair even without events);
- ``daemon`` ``iw-reconcile``: the per-workload loop (:func:`common.run_loop`) running
  :func:`reconcile`.

The planner (``plan/workload.py``) decides; this module only gathers what it looks at, carries
out its actions (server-side apply, suspend patches, deletes with UID preconditions, engine
sleep/wake calls) and writes the status it computed. Nothing is stored outside the status.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf

from sparkrun_operator.api import conditions as c
from sparkrun_operator.api.cluster import InferenceClusterSpec
from sparkrun_operator.api.meta import set_condition, utcnow
from sparkrun_operator.api.recipe import RecipeSpec
from sparkrun_operator.api.resources import INFERENCE_WORKLOAD
from sparkrun_operator.api.workload import InferenceWorkloadSpec, InferenceWorkloadStatus
from sparkrun_operator.controllers import common, indexes
from sparkrun_operator.controllers.context import Context
from sparkrun_operator.controllers.indexes import CACHE_ID, CLUSTER_ID, JOBSET_ID, OURS, RECIPE_ID
from sparkrun_operator.k8s import errors
from sparkrun_operator.k8s.client import JOBSETS, SERVICES, Resource, resource_of
from sparkrun_operator.plan import cluster as cluster_plan
from sparkrun_operator.plan import observe
from sparkrun_operator.plan.workload import (
    NodeCapacity,
    Observation,
    ObservedCluster,
    ObservedJobSet,
    ObservedPod,
    ObservedRecipe,
    Plan,
    plan,
)
from sparkrun_operator.render import keys

WORKLOADS: Resource = resource_of(INFERENCE_WORKLOAD)
WORKLOAD_ID = (INFERENCE_WORKLOAD.group, INFERENCE_WORKLOAD.version, INFERENCE_WORKLOAD.plural)

log = logging.getLogger("sparkrun.operator.workload")


def _key(namespace: str, name: str) -> tuple[str, str, str]:
    return ("iw", namespace, name)


# -- expectations: do not act again before the watch shows our last writes ----------------


@dataclass
class Expectations:
    """Names created and UIDs deleted by the last pass, until the indexes reflect them."""

    created: set[str] = field(default_factory=set)
    deleted: set[str] = field(default_factory=set)
    service: bool = False
    since: float = 0.0
    status: common.StatusMemory = field(default_factory=common.StatusMemory)

    def record(self, p: Plan) -> None:
        self.created = {d["metadata"]["name"] for d in p.apply if d.get("kind") == "JobSet"}
        self.deleted = {d.uid for d in p.delete}
        self.service = any(d.get("kind") == "Service" for d in p.apply)
        self.since = time.monotonic()

    def met(self, jobsets: Iterable[ObservedJobSet], *, service_seen: bool, patience: float) -> bool:
        if not self.created and not self.deleted and not self.service:
            return True
        seen = {js.name for js in jobsets}
        gone = {js.uid for js in jobsets if not js.deleting}
        if self.created <= seen and not (self.deleted & gone) and (service_seen or not self.service):
            self.created, self.deleted, self.service = set(), set(), False
            return True
        return time.monotonic() - self.since > patience


# -- observation ----------------------------------------------------------------------------


def _store(index: Mapping[Any, Any] | None, key: Any) -> list[Any]:
    if index is None or key not in index:
        return []
    return list(index[key])


def _capacity(
    *,
    cluster: ObservedCluster | None,
    cluster_raw: Mapping[str, Any] | None,
    nodes: Iterable[Any],
    gpu_pods: Mapping[Any, Any] | None,
    gpu_resource: str,
) -> tuple[NodeCapacity, ...]:
    candidates = list(nodes)
    if cluster is not None and cluster_raw is not None:
        parsed = InferenceClusterSpec.model_validate(cluster_raw.get("spec") or {})
        candidates = cluster_plan.members(parsed, candidates)
    else:
        candidates = [n for n in candidates if n.allocatable.get(gpu_resource, 0) > 0]
    out: list[NodeCapacity] = []
    for node in candidates:
        pods = _store(gpu_pods, node.name)
        status = cluster_plan.node_status(node, gpu_resource=gpu_resource, pods=pods)
        out.append(
            NodeCapacity(
                name=node.name,
                ready=status.ready,
                schedulable=status.schedulable,
                allocatable=status.gpus.allocatable,
                free=status.gpus.free,
            )
        )
    return tuple(out)


def observation(
    *,
    ctx: Context,
    body: Mapping[str, Any],
    indices: Mapping[str, Any],
    now: dt.datetime,
    asleep: Mapping[str, bool],
) -> Observation:
    """What the planner looks at, from the workload body and the kopf indexes (no API calls)."""
    meta = body.get("metadata") or {}
    name = str(meta["name"])
    namespace = str(meta["namespace"])
    spec = InferenceWorkloadSpec.model_validate(body.get("spec") or {})
    try:
        status = InferenceWorkloadStatus.model_validate(body.get("status") or {})
    except ValueError:
        status = InferenceWorkloadStatus()  # a hand-edited status: start over

    recipe = None
    if spec.recipe is not None:
        raw = _store(indices.get("iw_recipes"), (namespace, spec.recipe.name))
        recipe_spec = None
        if raw:
            try:
                recipe_spec = RecipeSpec.model_validate(raw[0])
            except ValueError:
                recipe_spec = None
        recipe = ObservedRecipe(name=spec.recipe.name, exists=bool(raw), spec=recipe_spec)

    cache = None
    if spec.model is not None and spec.model.cache_ref is not None:
        cache_name = spec.model.cache_ref.name
        raw = _store(indices.get("iw_caches"), (namespace, cache_name))
        cache = observe.cache_from(raw[0] if raw else None, name=cache_name)

    clusters = indices.get("iw_clusters")
    cluster: ObservedCluster | None = None
    cluster_raw: Mapping[str, Any] | None = None
    if spec.cluster:
        raw = _store(clusters, spec.cluster)
        parsed = observe.cluster_from(raw[0]) if raw else None
        cluster = parsed[0] if parsed else ObservedCluster(name=spec.cluster, exists=False)
        cluster_raw = raw[0] if raw else None
    elif clusters is not None:
        refs = []
        for cluster_name in list(clusters):
            for raw_cluster in clusters[cluster_name]:
                parsed = observe.cluster_from(raw_cluster)
                if parsed is not None:
                    refs.append(parsed[1])
        default = cluster_plan.default_cluster(refs)
        if default is not None:
            raw = _store(clusters, default)
            parsed = observe.cluster_from(raw[0]) if raw else None
            if parsed is not None:
                cluster, cluster_raw = parsed[0], raw[0]

    key = (namespace, name)
    pods: list[ObservedPod] = _store(indices.get("iw_pods"), key)
    jobsets = [observe.with_readiness(js, pods) for js in _store(indices.get("iw_jobsets"), key)]
    services = _store(indices.get("iw_services"), key)

    capacity = None
    unscheduled = not pods or any(p.node is None and not p.deleting for p in pods)
    if unscheduled and indices.get("iw_nodes") is not None:
        nodes = [n for name_ in list(indices["iw_nodes"]) for n in indices["iw_nodes"][name_]]
        capacity = _capacity(
            cluster=cluster if cluster is not None and cluster.exists else None,
            cluster_raw=cluster_raw,
            nodes=nodes,
            gpu_pods=indices.get("iw_gpu_pods"),
            gpu_resource=cluster.gpu_resource if cluster is not None else "nvidia.com/gpu",
        )
    ctx.dependencies[key] = (
        spec.recipe.name if spec.recipe else None,
        cache.name if cache else None,
        cluster.name if cluster else spec.cluster,
    )
    return Observation(
        name=name,
        namespace=namespace,
        uid=str(meta.get("uid") or ""),
        generation=int(meta.get("generation") or 0),
        spec=spec,
        status=status,
        now=now,
        created=observe.parse_time(meta.get("creationTimestamp")),
        recipe=recipe,
        cache=cache,
        cluster=cluster,
        capacity=capacity,
        jobsets=tuple(jobsets),
        pods=tuple(pods),
        service=services[0] if services else None,
        asleep=asleep,
        options=ctx.config.render,
    )


async def probe_sleep(ctx: Context, body: Mapping[str, Any], indices: Mapping[str, Any]) -> dict[str, bool]:
    """Ask each Ready leader of a sleep-capable workload whether its engine sleeps."""
    spec = body.get("spec") or {}
    if not (spec.get("engine") or {}).get("enableSleepMode"):
        return {}
    meta = body.get("metadata") or {}
    key = (meta.get("namespace"), meta.get("name"))
    pods: list[ObservedPod] = _store(indices.get("iw_pods"), key)
    leaders = [p for p in pods if p.role == keys.ROLE_LEADER and p.ready and p.ip and not p.deleting]
    engine = common.Engine(ctx.http, timeout=ctx.config.engine_timeout)
    answers = await asyncio.gather(*(engine.is_sleeping(f"http://{p.ip}:8000") for p in leaders))
    return {p.jobset: a for p, a in zip(leaders, answers, strict=True) if a is not None}


# -- acting -----------------------------------------------------------------------------


async def execute(ctx: Context, p: Plan, *, namespace: str) -> list[str]:
    """Carry out ``p``'s actions; the messages of actions the apiserver refused (422/403)."""
    refused: list[str] = []

    async def guarded(coro: Any, what: str) -> None:
        try:
            await coro
        except errors.Conflict:
            pass  # a UID precondition failed: the object was replaced; the next pass sees it
        except (errors.Invalid, errors.Forbidden) as error:
            refused.append(f"{what}: {error.message}")

    await asyncio.gather(
        *(
            guarded(
                ctx.kube.apply(JOBSETS if doc["kind"] == "JobSet" else SERVICES, doc),
                f"{doc['kind']} {doc['metadata']['name']}",
            )
            for doc in p.apply
        )
    )
    await asyncio.gather(
        *(
            guarded(
                ctx.kube.merge_patch(JOBSETS, s.name, {"spec": {"suspend": s.suspend}}, namespace),
                f"JobSet {s.name}",
            )
            for s in p.suspend
        )
    )
    # NB: highest replica first (the planner's order), one after the other: a scale-down that
    # is interrupted leaves the lowest indices serving.
    for d in p.delete:
        await guarded(
            ctx.kube.delete(JOBSETS, d.name, namespace, uid=d.uid, propagation="Foreground"),
            f"JobSet {d.name}",
        )
    engine = common.Engine(ctx.http, timeout=ctx.config.engine_timeout)
    engine_errors = await asyncio.gather(*(engine.call(call.url, call.action) for call in p.engine))
    for message in engine_errors:
        if message:
            log.warning("%s", message)
    return refused


async def reconcile(
    ctx: Context,
    *,
    body: kopf.Body,
    indices: Mapping[str, Any],
    expectations: Expectations,
    logger: logging.Logger | logging.LoggerAdapter[logging.Logger],
) -> float | None:
    """One pass for one workload; seconds until the next pass is needed regardless of events."""
    meta = body.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return None  # ownerReferences delete the children
    namespace = str(meta["namespace"])
    name = str(meta["name"])
    key = (namespace, name)
    asleep = await probe_sleep(ctx, body, indices)
    obs = observation(ctx=ctx, body=body, indices=indices, now=utcnow(), asleep=asleep)
    p = plan(obs)
    refused = await execute(ctx, p, namespace=namespace)
    expectations.record(p)
    status = p.status
    if refused:
        message = "; ".join(refused)
        set_condition(
            status.conditions,
            type=c.READY,
            status="False",
            reason=c.REASON_INVALID_SPEC,
            message=f"the apiserver refused a child object: {message}",
            observed_generation=obs.generation,
            now=obs.now,
        )
        status.phase = "Failed"
    ctx.reconciled[key] = obs.generation
    wrote = await expectations.status.write(
        ctx, resource=WORKLOADS, name=name, namespace=namespace, current=body.get("status"), desired=status
    )
    ctx.metrics.observe_ready("InferenceWorkload", key, _ready_of(status))
    # events only after the status write succeeded (or was not needed)
    for event in p.events:
        kopf.event(body, type=event.type, reason=event.reason, message=event.message)
    for message in refused:
        kopf.event(body, type="Warning", reason="Refused", message=message)
    if wrote:
        logger.debug("status written: phase %s", status.phase)
    return p.requeue_after


def catching_up(
    ctx: Context, *, body: kopf.Body, indices: Mapping[str, Any], expectations: Expectations
) -> float | None:
    """Seconds to wait before a pass because the indexes do not show the last pass's writes yet."""
    meta = body.get("metadata") or {}
    key = (str(meta.get("namespace")), str(meta.get("name")))
    jobsets: list[ObservedJobSet] = _store(indices.get("iw_jobsets"), key)
    service_seen = bool(_store(indices.get("iw_services"), key))
    if expectations.met(jobsets, service_seen=service_seen, patience=ctx.config.expectation_seconds):
        return None
    return 1.0


def _ready_of(status: InferenceWorkloadStatus) -> str:
    found = next((cond for cond in status.conditions if cond.type == c.READY), None)
    return found.status if found is not None else "Unknown"


# -- registration ----------------------------------------------------------------------------


def register(registry: kopf.OperatorRegistry, *, drift_seconds: float) -> None:
    """Register the workload controller's indexes and handlers on ``registry``."""

    # -- pokes ----------------------------------------------------------------------------

    @kopf.on.event(*WORKLOAD_ID, id="iw-changed", registry=registry)
    async def iw_changed(*, namespace: str | None, name: str, body: kopf.Body, memo: Any, **_: Any) -> None:
        ctx: Context = memo.ctx
        meta = body.get("metadata") or {}
        # NB: the operator's own status writes come back as events too; a pass for those
        # would find nothing to do. Only a new generation (a spec change) or a deletion counts.
        if meta.get("deletionTimestamp") or ctx.reconciled.get((namespace or "", name)) != meta.get(
            "generation"
        ):
            ctx.triggers.poke(_key(namespace or "", name))

    @kopf.on.event(*JOBSET_ID, id="iw-jobset-changed", labels=OURS, registry=registry)
    async def iw_jobset_changed(*, body: kopf.Body, memo: Any, **_: Any) -> None:
        key = observe.workload_key(body)
        if key:
            memo.ctx.triggers.poke(_key(*key))

    @kopf.on.event("", "v1", "pods", id="iw-pod-changed", labels=OURS, registry=registry)
    async def iw_pod_changed(*, body: kopf.Body, memo: Any, **_: Any) -> None:
        key = observe.workload_key(body)
        if key:
            memo.ctx.triggers.poke(_key(*key))

    def _poke_dependents(ctx: Context, *, namespace: str | None, slot: int, name: str) -> None:
        for (ns, wl), deps in list(ctx.dependencies.items()):
            if (namespace is None or ns == namespace) and deps[slot] == name:
                ctx.triggers.poke(_key(ns, wl))

    @kopf.on.event(*RECIPE_ID, id="iw-recipe-changed", registry=registry)
    async def iw_recipe_changed(*, namespace: str | None, name: str, memo: Any, **_: Any) -> None:
        _poke_dependents(memo.ctx, namespace=namespace, slot=0, name=name)

    @kopf.on.event(*CACHE_ID, id="iw-cache-changed", registry=registry)
    async def iw_cache_changed(*, namespace: str | None, name: str, memo: Any, **_: Any) -> None:
        _poke_dependents(memo.ctx, namespace=namespace, slot=1, name=name)

    @kopf.on.event(*CLUSTER_ID, id="iw-cluster-changed", registry=registry)
    async def iw_cluster_changed(*, name: str, memo: Any, **_: Any) -> None:
        ctx: Context = memo.ctx
        # A (new) default cluster concerns every workload naming none.
        for (ns, wl), deps in list(ctx.dependencies.items()):
            if deps[2] in (name, None):
                ctx.triggers.poke(_key(ns, wl))

    @kopf.timer(
        *WORKLOAD_ID, id="iw-drift", interval=drift_seconds, initial_delay=drift_seconds, registry=registry
    )
    async def iw_drift(*, namespace: str | None, name: str, memo: Any, **_: Any) -> None:
        memo.ctx.triggers.poke(_key(namespace or "", name))

    @kopf.daemon(*WORKLOAD_ID, id="iw-reconcile", cancellation_timeout=10.0, registry=registry)
    async def iw_reconcile(
        *,
        namespace: str | None,
        name: str,
        body: kopf.Body,
        memo: Any,
        stopped: kopf.DaemonStopped,
        logger: logging.Logger | logging.LoggerAdapter[Any],
        **kwargs: Any,
    ) -> None:
        ctx: Context = memo.ctx
        expectations = Expectations()
        indices = indexes.pick(kwargs)
        assert namespace is not None  # a namespaced kind

        async def one_pass() -> float | None:
            return await reconcile(ctx, body=body, indices=indices, expectations=expectations, logger=logger)

        try:
            await common.run_loop(
                ctx,
                key=_key(namespace, name),
                kind="InferenceWorkload",
                stopped=stopped,
                logger=logger,
                reconcile=one_pass,
                precheck=lambda: catching_up(ctx, body=body, indices=indices, expectations=expectations),
            )
        finally:
            ctx.dependencies.pop((namespace, name), None)
            ctx.reconciled.pop((namespace, name), None)
            ctx.metrics.observe_ready("InferenceWorkload", (namespace, name), None)

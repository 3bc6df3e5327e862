"""InferenceWorkload controller: parse -> observe -> plan -> act -> one status write -> events.

Handlers (all registered on an explicit kopf registry, with explicit ids):

- indexes (kopf's in-memory caches, updated from watches before any handler runs) of the
  workloads' JobSets, pods, Services and ControllerRevisions (serving revisions, ADR 0046), and
  of Recipes, ModelCaches, InferenceClusters, Nodes and GPU-requesting pods: a reconcile reads
  no object from the API;
- ``on.event`` of the workload (a new generation, or a ``reconcile-requested`` annotation that
  ``workloads.reconcile`` set), its JobSets and pods, and of the Recipes / ModelCaches /
  InferenceClusters it uses, and the ``iw-drift`` timer: poke the workload's lanes
  (:mod:`.workload_pokes`, which also re-plans the rivals of a changed model-name claim);
- ``daemon`` ``iw-reconcile``: the per-workload full lane (:func:`run_loop` running
  :func:`reconcile`: observe, plan, act, write the status) and, beside it, the status lane
  (:func:`lane.run_status_lane` running :func:`prepare_status`): a JobSet or pod event is
  planned at once with the same pure planner from the same cached state; a status-only change
  (readiness, endpoints, readyReplicas, progress) is written by the lane, readiness first in the
  write budget both lanes share (``ctx.write_gate``), and the full lane is poked only when the
  plan has something for it to do (ADR 0030).

The planner (``plan/workload/``) decides and is the only author of the status (``finalize``
folds in what the apiserver refused); this module only gathers what it looks at, carries out
its actions (serving revisions and children server-side applied, suspend patches, deletes with UID
preconditions, served-from/until annotations, engine sleep/wake calls) and writes the status it
computed. Nothing is stored outside the status.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf

from sparkrun_operator.api import conditions as c
from sparkrun_operator.api.cluster import DEFAULT_GPU_RESOURCE
from sparkrun_operator.api.meta import utcnow
from sparkrun_operator.api.resources import INFERENCE_WORKLOAD
from sparkrun_operator.api.workload import InferenceWorkloadSpec, InferenceWorkloadStatus
from sparkrun_operator.controllers import gate, hooks, indexes, lane, resume, workload_pokes
from sparkrun_operator.controllers.cluster import lane_key
from sparkrun_operator.controllers.engine import Engine
from sparkrun_operator.controllers.loop import run_loop
from sparkrun_operator.controllers.memo import Memo
from sparkrun_operator.controllers.metrics import WorkloadFigures, workload_figures
from sparkrun_operator.controllers.reconciler import Event, Outcome, post, run_pass
from sparkrun_operator.controllers.status import StatusMemory, current_status, status_patch
from sparkrun_operator.controllers.workload_act import execute, picker_refusals
from sparkrun_operator.controllers.workload_pokes import full_key, status_key
from sparkrun_operator.k8s.errors import KubeError
from sparkrun_operator.k8s.resources import Resource, resource_of
from sparkrun_operator.plan import observe
from sparkrun_operator.plan.drain import own_first
from sparkrun_operator.plan.workload import (
    Observation,
    ObservedJobSet,
    ObservedPod,
    Plan,
    finalize,
    plan,
)
from sparkrun_operator.plan.workload.pool import refusal_condition
from sparkrun_operator.render import keys

WORKLOADS: Resource = resource_of(INFERENCE_WORKLOAD)
WORKLOAD_ID = (INFERENCE_WORKLOAD.group, INFERENCE_WORKLOAD.version, INFERENCE_WORKLOAD.plural)

log = logging.getLogger("sparkrun.operator.workload")


# -- expectations: do not act again before the watch shows our last writes ----------------


@dataclass
class Expectations:
    """Names created and UIDs deleted by the last pass, until the indexes reflect them."""

    created: set[str] = field(default_factory=set)
    deleted: set[str] = field(default_factory=set)
    #: Serving revisions (ControllerRevisions) made by the last pass.
    revisions: set[str] = field(default_factory=set)
    service: bool = False
    policy: bool = False
    #: The InferencePool and the endpoint picker's Deployment (issue 30).
    pool: bool = False
    picker: bool = False
    #: Pods the apiserver listed when the daemon started after a pause (``controllers/resume.py``).
    pods: set[str] = field(default_factory=set)
    since: float = 0.0

    def relisted(self, found: resume.Children) -> None:
        """Wait for the children the apiserver lists now: the indexes may predate a pause."""
        self.created, self.pods, self.revisions = set(found.jobsets), set(found.pods), set(found.revisions)
        self.since = time.monotonic()

    def record(self, p: Plan, unapplied: Collection[str] = ()) -> None:
        """What ``p`` made and deleted, less the kinds ``unapplied`` (refused, a name taken)."""
        self.created = {d["metadata"]["name"] for d in p.apply if d.get("kind") == "JobSet"}
        self.deleted = {d.uid for d in p.delete if d.kind != "ControllerRevision"}
        self.revisions = {d["metadata"]["name"] for d in p.revisions}
        self.service = any(d.get("kind") == "Service" for d in p.apply)
        self.policy = any(d.get("kind") == "NetworkPolicy" for d in p.apply)
        self.pool = "InferencePool" not in unapplied and any(
            d.get("kind") == "InferencePool" for d in p.apply
        )
        self.picker = "Deployment" not in unapplied and any(d.get("kind") == "Deployment" for d in p.apply)
        self.since = time.monotonic()

    def met(
        self,
        jobsets: Iterable[ObservedJobSet],
        *,
        service_seen: bool,
        patience: float,
        policy_seen: bool = True,
        revisions: Iterable[str] = (),
        pool_seen: bool = True,
        picker_seen: bool = True,
        pods: Iterable[str] = (),
    ) -> bool:
        pending = self.service or self.policy or self.pool or self.picker or bool(self.pods)
        if not (self.created or self.deleted or pending or self.revisions):
            return True
        seen = {js.name for js in jobsets}
        gone = {js.uid for js in jobsets if not js.deleting}
        if (
            self.created <= seen
            and not (self.deleted & gone)
            and (service_seen or not self.service)
            and (policy_seen or not self.policy)
            and (pool_seen or not self.pool)
            and (picker_seen or not self.picker)
            and self.revisions <= set(revisions)
            and self.pods <= set(pods)
        ):
            self.created, self.deleted, self.service, self.policy = set(), set(), False, False
            self.revisions, self.pool, self.picker, self.pods = set(), False, False, set()
            return True
        return time.monotonic() - self.since > patience


# -- observation ----------------------------------------------------------------------------


def _store(index: Mapping[Any, Any] | None, key: Any) -> list[Any]:
    if index is None or key not in index:
        return []
    return list(index[key])


def observation(
    *,
    ctx: Memo,
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
    status = current_status(body, InferenceWorkloadStatus)
    recipe, recipe_hooks = hooks.recipe_of(ctx.mods, indices, namespace, spec)
    cache = None
    if spec.model is not None and spec.model.cache_ref is not None:
        cache_name = spec.model.cache_ref.name
        raw_cache = observe.first(indices.get("iw_caches"), (namespace, cache_name))
        cache = observe.cache_from(raw_cache, name=cache_name)
    cluster, cluster_raw = observe.workload_cluster(spec.cluster, indices.get("iw_clusters"))
    key = (namespace, name)
    pods: list[ObservedPod] = _store(indices.get("iw_pods"), key)
    jobsets = [observe.with_readiness(js, pods) for js in _store(indices.get("iw_jobsets"), key)]
    capacity, nodes = None, indices.get("iw_nodes")
    if observe.needs_capacity(pods) and nodes is not None:
        capacity = observe.capacity(
            cluster=cluster,
            cluster_raw=cluster_raw,
            nodes=[n for node in list(nodes) for n in nodes[node]],
            gpu_pods=indices.get("iw_gpu_pods"),
            gpu_resource=cluster.gpu_resource if cluster is not None else DEFAULT_GPU_RESOURCE,
            count_free=observe.needs_free(pods),
        )
    return Observation(
        # NB: the planner checks the names it resolves for this workload against the other
        # workloads' claims in the index (this one's own entry there may be stale)
        holders=indexes.holders(indices.get("iw_names")),
        name_policy=ctx.config.name_policy,
        name=name,
        namespace=namespace,
        uid=str(meta.get("uid") or ""),
        generation=int(meta.get("generation") or 0),
        spec=spec,
        status=status,
        now=now,
        clock=dt.datetime.now(dt.UTC),
        created=observe.parse_time(meta.get("creationTimestamp")),
        recipe=recipe,
        hooks=recipe_hooks,
        hook_jobs=tuple(_store(indices.get("iw_hook_jobs"), key)),
        post_exec=ctx.mods.seen(namespace, pods),
        cache=cache,
        cluster=cluster,
        capacity=capacity,
        jobsets=tuple(jobsets),
        pods=tuple(pods),
        service=observe.first(indices.get("iw_services"), key),
        gates=tuple(_store(indices.get("iw_gates"), key)),
        # NB: None (history off) only where no revision index is registered at all
        revisions=(
            tuple(_store(indices.get("iw_revisions"), key))
            if indices.get("iw_revisions") is not None
            else None
        ),
        engine_policy=ctx.config.engine_policy,
        network_policy=observe.first(indices.get("iw_policies"), key),
        pool_settings=ctx.config.inference_pools,
        inference_pool=observe.first(indices.get("iw_pools"), key),
        picker=tuple(found for index in indexes.PICKER_NAMES for found in _store(indices.get(index), key)),
        pool_refused=ctx.pool_refusals.get(key),
        picker_refused=picker_refusals(ctx, key, time.monotonic()),
        asleep=asleep,
        options=ctx.config.render,
        scaling=ctx.scaling.get(key),
        failures=ctx.failures.of(key),
        ownership=ctx.ownership.verdicts.get(key) if spec.lease is not None else None,
        drain=own_first(_store(indices.get("iw_drains"), key), cluster.name if cluster else spec.cluster),
        queue=ctx.queues.of_workload(key, spec=spec, cluster=cluster, jobsets=jobsets),
    )


def _record_dependencies(ctx: Memo, obs: Observation) -> None:
    """What ``obs`` depends on (Recipe, ModelCache, cluster), for the dependency pokes."""
    spec = obs.spec
    key = (obs.namespace, obs.name)
    before = ctx.dependencies.get(key)
    ctx.dependencies[key] = (
        spec.recipe.name if spec.recipe else None,
        obs.cache.name if obs.cache else None,
        obs.cluster.name if obs.cluster else spec.cluster,
    )
    cluster = ctx.dependencies[key][2]
    if cluster is not None and (before is None or before[2] != cluster):
        ctx.triggers.poke(lane_key(cluster))  # its status lists the namespaces its workloads use


async def probe_sleep(ctx: Memo, body: Mapping[str, Any], indices: Mapping[str, Any]) -> dict[str, bool]:
    """Ask each Ready leader of a sleep-capable workload whether its engine sleeps."""
    spec = body.get("spec") or {}
    if not (spec.get("engine") or {}).get("enableSleepMode"):
        return {}
    meta = body.get("metadata") or {}
    key = (meta.get("namespace"), meta.get("name"))
    pods: list[ObservedPod] = _store(indices.get("iw_pods"), key)
    leaders = [p for p in pods if p.role == keys.ROLE_LEADER and p.ready and p.ip and not p.deleting]
    engine = Engine(ctx.http, timeout=ctx.config.engine_timeout)
    answers = await asyncio.gather(*(engine.is_sleeping(f"http://{p.ip}:8000") for p in leaders))
    return {p.jobset: a for p, a in zip(leaders, answers, strict=True) if a is not None}


@dataclass
class Writes:
    """One workload's status writes, shared by its full and status-only lanes: the last status
    written (no repeats before the watch shows it), and how recent the observation behind it
    was, so that neither lane overwrites a status planned from newer observed state."""

    memory: StatusMemory = field(default_factory=StatusMemory)
    observed_at: float = -float("inf")
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: The engines' sleep state the last full pass probed (status passes make no engine calls).
    asleep: dict[str, bool] = field(default_factory=dict)
    #: The Ready status, phase and figures of the status last written (or found current), for
    #: the gauges (``show``).
    ready: str = "Unknown"
    phase: str | None = None
    figures: WorkloadFigures | None = None

    def note(self, body: Mapping[str, Any], status: InferenceWorkloadStatus) -> None:
        """Remember what ``status`` (of ``body``) shows, for :meth:`show`."""
        self.ready = _ready_of(status)
        self.phase = status.phase
        self.figures = workload_figures(body.get("spec") or {}, status)

    def show(self, ctx: Memo, key: tuple[str, str]) -> None:
        """Set the gauges of the workload ``key`` from the status last noted (constant time)."""
        ctx.metrics.observe_ready("InferenceWorkload", key, self.ready)
        ctx.metrics.observe_phase("InferenceWorkload", key, self.phase)
        if self.figures is not None:
            ctx.metrics.observe_workload(key, self.figures, cap=ctx.config.load_metric_workloads)

    def current(self, body: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """The status as it is: the last one written while the watch has not delivered it yet
        (``body`` is still the object it was planned from), else ``body``'s."""
        memory = self.memory
        version = (body.get("metadata") or {}).get("resourceVersion")
        if memory.wire is not None and version is not None and version == memory.version:
            return memory.wire
        return body.get("status")

    async def write(
        self,
        ctx: Memo,
        *,
        body: Mapping[str, Any],
        status: InferenceWorkloadStatus,
        observed_at: float,
        force: bool = False,
    ) -> bool:
        """Write ``status`` unless a status from a newer observation was written (``force``:
        regardless, for what only this pass knows: refused actions). The caller holds a slot of
        the write budget (``ctx.write_gate``), taken before the lock."""
        meta = body.get("metadata") or {}
        async with self.lock:
            if observed_at < self.observed_at and not force:
                return False
            wrote = await self.memory.write(
                ctx,
                resource=WORKLOADS,
                name=str(meta["name"]),
                namespace=str(meta["namespace"]),
                current=body.get("status"),
                desired=status,
                version=meta.get("resourceVersion"),
            )
            self.observed_at = max(self.observed_at, observed_at)
            self.note(body, status)
            return wrote


@dataclass(frozen=True)
class Looked:
    """What a full pass observed, when (the lanes' ``Writes`` compare it), and the generation
    and reconcile request the pass answers."""

    obs: Observation
    at: float
    requested: tuple[int, str | None]


@dataclass(frozen=True, kw_only=True)
class Acted(Outcome[InferenceWorkloadStatus]):
    """A full pass's outcome, with the actions the apiserver refused (folded into the status,
    which is then written even over one planned from a newer observation) and when it observed."""

    refused: tuple[str, ...] = ()
    observed_at: float


async def reconcile(
    ctx: Memo,
    *,
    body: kopf.Body,
    indices: Mapping[str, Any],
    expectations: Expectations,
    writes: Writes,
    logger: logging.Logger | logging.LoggerAdapter[logging.Logger],
) -> float | None:
    """One full pass for one workload (:func:`.reconciler.run_pass`); seconds until the next
    pass is needed regardless of events."""
    meta = body.get("metadata") or {}

    async def look() -> Looked | None:
        if meta.get("deletionTimestamp"):
            return None  # ownerReferences delete the children
        requested = workload_pokes.requested(meta)
        writes.asleep = await probe_sleep(ctx, body, indices)
        await hooks.prefetch_for(ctx, ctx.mods, body, indices)
        await hooks.read_post_exec(ctx, ctx.mods, body, indices)
        observed_at = time.monotonic()
        obs = observation(ctx=ctx, body=body, indices=indices, now=utcnow(), asleep=writes.asleep)
        _record_dependencies(ctx, obs)
        return Looked(obs=obs, at=observed_at, requested=requested)

    async def act(looked: Looked, p: Plan) -> Acted:
        obs = looked.obs
        done = await execute(ctx, p, namespace=obs.namespace)
        expectations.record(p, done.unapplied)
        workload_pokes.record_memory_wait(ctx, (obs.namespace, obs.name), p.status)
        # NB: the pool stage's trouble never fails the workload: PoolAccepted says it
        pool = done.pool[0] if done.pool else None
        status = finalize(
            p.status, refused=done.refused, generation=obs.generation, now=obs.now, pool_refused=pool
        )
        ctx.reconciled[(obs.namespace, obs.name)] = looked.requested
        events = [Event(type=e.type, reason=e.reason, message=e.message) for e in p.events]
        events += [Event(type="Warning", reason="Refused", message=message) for message in done.refused]
        if pool is not None:
            reason, message = refusal_condition(pool)
            events.append(Event(type="Warning", reason=reason, message=message))
        return Acted(
            status=status,
            events=tuple(events),
            requeue=p.requeue_after,
            refused=tuple(done.refused),
            observed_at=looked.at,
        )

    async def write(acted: Acted) -> bool:
        priority = gate.URGENT if urgent(writes.current(body), acted.status) else gate.ACTION
        async with ctx.write_gate.slot(priority):
            return await writes.write(
                ctx, body=body, status=acted.status, observed_at=acted.observed_at, force=bool(acted.refused)
            )

    def emit(acted: Acted, wrote: bool) -> None:
        writes.show(ctx, (str(meta["namespace"]), str(meta["name"])))
        post(body, acted.events)
        if wrote:
            logger.debug("status written: phase %s", acted.status.phase)

    return await run_pass(
        observe=look,
        plan=lambda looked: plan(looked.obs),
        execute=act,
        write_status=write,
        emit_events=emit,
    )


def prepare_status(
    ctx: Memo,
    *,
    body: kopf.Body,
    indices: Mapping[str, Any],
    expectations: Expectations,
    writes: Writes,
) -> lane.Pending | None:
    """A status-only planning step (pure, no I/O): the status the planner derives from the
    cached observed state, if it differs from the current one, and whether the difference is
    urgent (readiness). It never acts: when the plan has anything for the full lane (a child
    action, a timer, an engine to probe), or the indexes do not show the last full pass's
    writes yet, it pokes the full lane; a status that depends on actions is left to it."""
    meta = body.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return None
    key = (str(meta.get("namespace")), str(meta.get("name")))
    if catching_up(ctx, body=body, indices=indices, expectations=expectations) is not None:
        ctx.triggers.poke(full_key(*key))
        return None
    observed_at = time.monotonic()
    obs = observation(ctx=ctx, body=body, indices=indices, now=utcnow(), asleep=writes.asleep)
    p = plan(obs)
    workload_pokes.record_memory_wait(ctx, key, p.status)
    # NB: the full lane is only poked when it has something to do: most child events (a pod
    # scheduled, running, Ready) only change the status, written here (ADR 0030).
    pending = not p.idle or p.annotate or p.events or p.requeue_after is not None
    if pending or obs.spec.engine.enable_sleep_mode:
        ctx.triggers.poke(full_key(*key))
    if not p.serving_idle or p.events:
        # an Event (a measured wake: Woke) is posted by the full pass, which writes the status
        # that ends it; written here, the full pass would find the wake over and post nothing.
        # NB: the pool stage's pending writes do not hold readiness back (ADR 0050)
        return None
    status = p.status
    # NB: compared with our own last write while the watch has not shown it yet: a change
    # seen meanwhile is neither taken for readiness again nor written twice.
    current = writes.current(body)
    if status_patch(current, status) is None:
        writes.note(body, status)
        return None

    async def write() -> bool:
        wrote = await writes.write(ctx, body=body, status=status, observed_at=observed_at)
        writes.show(ctx, key)
        return wrote

    return lane.Pending(urgent=urgent(current, status), write=write)


def urgent(current: Mapping[str, Any] | None, status: InferenceWorkloadStatus) -> bool:
    """Whether writing ``status`` over ``current`` changes what users wait for: Ready being
    True, the ready replicas, or the endpoints that serve (progress reports are not urgent)."""
    try:
        before = _readiness(InferenceWorkloadStatus.model_validate(dict(current or {})))
    except ValueError:
        return True
    return _readiness(status) != before


def _readiness(status: InferenceWorkloadStatus) -> tuple[Any, ...]:
    serving = sorted(e.url for e in status.endpoints if e.ready)
    return (_ready_of(status) == "True", status.ready_replicas, serving)


def catching_up(
    ctx: Memo, *, body: kopf.Body, indices: Mapping[str, Any], expectations: Expectations
) -> float | None:
    """Seconds to wait before a pass because the indexes do not show the last pass's writes yet."""
    meta = body.get("metadata") or {}
    key = (str(meta.get("namespace")), str(meta.get("name")))
    jobsets: list[ObservedJobSet] = _store(indices.get("iw_jobsets"), key)
    service_seen = bool(_store(indices.get("iw_services"), key))
    policy_seen = bool(_store(indices.get("iw_policies"), key))
    revisions = [r.name for r in _store(indices.get("iw_revisions"), key)]
    if expectations.met(
        jobsets,
        service_seen=service_seen,
        policy_seen=policy_seen,
        patience=ctx.config.expectation_seconds,
        revisions=revisions,
        pool_seen=bool(_store(indices.get("iw_pools"), key)),
        picker_seen=bool(_store(indices.get("iw_pickers"), key)),
        pods=[p.name for p in _store(indices.get("iw_pods"), key)],
    ):
        return None
    return 1.0


def _ready_of(status: InferenceWorkloadStatus) -> str:
    found = next((cond for cond in status.conditions if cond.type == c.READY), None)
    return found.status if found is not None else "Unknown"


# -- registration ----------------------------------------------------------------------------


def register(
    registry: kopf.OperatorRegistry, *, drift_seconds: float, network_policies: bool = False
) -> None:
    """Register the workload controller's handlers on ``registry`` (the indexes are elsewhere;
    ``network_policies``: the engines' NetworkPolicies are the operator's, ``--engine-network-policy``)."""
    workload_pokes.register(
        registry, workload_id=WORKLOAD_ID, drift_seconds=drift_seconds, network_policies=network_policies
    )
    hooks.register_pokes(registry, lambda ctx, ns, name: ctx.triggers.poke(full_key(ns, name)))
    _register_daemon(registry)


def _register_daemon(registry: kopf.OperatorRegistry) -> None:
    """The per-workload daemon: the full lane (:func:`reconcile`) and the status lane beside it."""

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
        ctx: Memo = memo.ctx
        expectations = Expectations()
        writes = Writes()
        indices = indexes.pick(kwargs)
        assert namespace is not None  # a namespaced kind
        if ctx.pauses.count:
            # NB: started by a resume: the indexes may not show what the pause missed yet
            with contextlib.suppress(KubeError):
                async with ctx.gate:
                    expectations.relisted(await resume.children(ctx.kube, namespace, name))

        async def one_pass() -> float | None:
            return await reconcile(
                ctx, body=body, indices=indices, expectations=expectations, writes=writes, logger=logger
            )

        def status_pass() -> lane.Pending | None:
            return prepare_status(ctx, body=body, indices=indices, expectations=expectations, writes=writes)

        status_lane = asyncio.create_task(
            lane.run_status_lane(
                ctx,
                key=status_key(namespace, name),
                kind="InferenceWorkload",
                stopped=stopped,
                logger=logger,
                prepare=status_pass,
            )
        )
        try:
            await run_loop(
                ctx,
                key=full_key(namespace, name),
                kind="InferenceWorkload",
                stopped=stopped,
                logger=logger,
                reconcile=one_pass,
                precheck=lambda: catching_up(ctx, body=body, indices=indices, expectations=expectations),
            )
        finally:
            status_lane.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await status_lane
            ctx.dependencies.pop((namespace, name), None)
            ctx.reconciled.pop((namespace, name), None)
            ctx.pool_refusals.pop((namespace, name), None)
            ctx.picker_refusals.pop((namespace, name), None)
            ctx.queues.forget((namespace, name))
            ctx.metrics.observe_ready("InferenceWorkload", (namespace, name), None)
            ctx.metrics.observe_phase("InferenceWorkload", (namespace, name), None)
            ctx.metrics.observe_workload((namespace, name), None, cap=0)

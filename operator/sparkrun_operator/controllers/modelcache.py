"""ModelCache controller: observe -> plan (``plan/modelcache.py``) -> apply -> one status write.

A per-cache daemon (``mc-reconcile``) runs a pass when the cache, its download Job or pod, its
claim or a workload naming it changes, and while a download runs at most every
``PROGRESS_SECONDS`` (the live progress is the tail of the download pod's log: the downloader's
JSON lines; ADR 0018). A pass reads the claim (and its volume), the cache's Jobs and pods, the
workloads of the namespace and one log tail: a handful of GETs per cache per pass.

Deletion: kopf stops the daemon when a deletion starts, so ``mc-changed`` (an event handler)
runs the deletion pass: it removes the ``sparkrun.dev/model-cache-in-use`` finalizer once no
workload claims the cache, or when the ``sparkrun.dev/force-delete`` annotation is set; workload
events poke it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import Any, Final

import kopf

from sparkrun_operator.api.meta import utcnow
from sparkrun_operator.api.modelcache import ModelCacheSpec, ModelCacheStatus
from sparkrun_operator.api.resources import INFERENCE_WORKLOAD, MODEL_CACHE
from sparkrun_operator.controllers.indexes import CACHE_ID
from sparkrun_operator.controllers.loop import reconcile_daemon
from sparkrun_operator.controllers.memo import Memo
from sparkrun_operator.controllers.reconciler import Outcome, run_pass, writes_status
from sparkrun_operator.controllers.status import current_status
from sparkrun_operator.k8s import errors
from sparkrun_operator.k8s.resources import CLAIMS, JOBS, PODS, VOLUMES, resource_of
from sparkrun_operator.plan import cacheobserve
from sparkrun_operator.plan.modelcache import CacheObservation, CachePlan, claims_of, plan
from sparkrun_operator.render import keys
from sparkrun_operator.render.modelcache import DownloadOptions

CACHES = resource_of(MODEL_CACHE)
WORKLOADS = resource_of(INFERENCE_WORKLOAD)
WORKLOAD_ID = (INFERENCE_WORKLOAD.group, INFERENCE_WORKLOAD.version, INFERENCE_WORKLOAD.plural)
PROGRESS_SECONDS: Final = 2.0
PENDING_SECONDS: Final = 5.0
OURS: Final = {keys.LABEL_MODEL_CACHE: kopf.PRESENT}

log = logging.getLogger("sparkrun.operator.modelcache")


def _key(namespace: str, name: str) -> tuple[str, str, str]:
    return ("mc", namespace, name)


def download_options(ctx: Memo) -> DownloadOptions:
    render = ctx.config.render
    return DownloadOptions(image=render.tools_image, mount_path=render.cache_mount_path)


async def observe(ctx: Memo, body: Mapping[str, Any]) -> CacheObservation:
    """Everything the planner looks at (reads from the API: caches are few and passes rare)."""
    meta = body.get("metadata") or {}
    name, namespace = str(meta["name"]), str(meta["namespace"])
    spec = ModelCacheSpec.model_validate(body.get("spec") or {})
    previous = current_status(body, ModelCacheStatus)
    claim_name = spec.storage.claim_name or name
    selector = f"{keys.LABEL_MODEL_CACHE}={name}"
    raw_claim, raw_jobs, raw_pods, workloads = await asyncio.gather(
        ctx.kube.get(CLAIMS, claim_name, namespace),
        ctx.kube.list(JOBS, namespace, label_selector=selector),
        ctx.kube.list(PODS, namespace, label_selector=selector),
        ctx.kube.list(WORKLOADS, namespace),
    )
    claim = None
    if raw_claim is not None:
        volume_name = (raw_claim.get("spec") or {}).get("volumeName")
        volume = await ctx.kube.get(VOLUMES, volume_name) if volume_name else None
        claim = cacheobserve.claim_from(raw_claim, volume)
    jobs = tuple(cacheobserve.job_from(j) for j in raw_jobs)
    pods = sorted(raw_pods, key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp") or ""))
    observed = []
    for i, pod in enumerate(pods):
        tail = ""
        started = (pod.get("status") or {}).get("phase") in ("Running", "Succeeded", "Failed")
        if i == len(pods) - 1 and started:
            tail = await ctx.kube.log_tail(
                namespace, str(pod["metadata"]["name"]), container=keys.CONTAINER_DOWNLOAD
            )
        observed.append(cacheobserve.pod_from(pod, tail))
    annotations = meta.get("annotations") or {}
    return CacheObservation(
        name=name,
        namespace=namespace,
        uid=str(meta.get("uid") or ""),
        generation=int(meta.get("generation") or 0),
        spec=spec,
        status=previous,
        now=utcnow(),
        deleting=bool(meta.get("deletionTimestamp")),
        force_delete=keys.ANNOTATION_FORCE_DELETE in annotations,
        has_finalizer=keys.FINALIZER_MODEL_CACHE in (meta.get("finalizers") or []),
        claim=claim,
        jobs=jobs,
        pods=tuple(observed),
        claims=claims_of(workloads, name),
        options=download_options(ctx),
    )


async def execute(ctx: Memo, p: CachePlan, body: Mapping[str, Any]) -> None:
    meta = body.get("metadata") or {}
    namespace = str(meta["namespace"])
    for doc in p.apply:
        resource = CLAIMS if doc["kind"] == "PersistentVolumeClaim" else JOBS
        # NB: AlreadyExists: made by the previous pass; the next one sees it.
        with contextlib.suppress(errors.KubeAlreadyExists):
            await ctx.kube.create(resource, doc)
    for job in p.delete_jobs:
        await ctx.kube.delete(JOBS, job.name, namespace, uid=job.uid, propagation="Background")
    if p.finalizer is not None:
        current = list(meta.get("finalizers") or [])
        wanted = (
            [*current, keys.FINALIZER_MODEL_CACHE]
            if p.finalizer == "add"
            else [f for f in current if f != keys.FINALIZER_MODEL_CACHE]
        )
        patch = {"metadata": {"finalizers": wanted, "resourceVersion": meta.get("resourceVersion")}}
        with contextlib.suppress(errors.KubeNotFound):
            await ctx.kube.merge_patch(CACHES, str(meta["name"]), patch, namespace)


def requeue_of(p: CachePlan) -> float | None:
    """Seconds to the next look while a download runs or the cache waits for its claim."""
    if p.status.phase in ("Resolving", "Downloading", "Verifying"):
        return PROGRESS_SECONDS
    if p.status.phase == "Pending" or p.apply:
        return PENDING_SECONDS
    return None


async def reconcile(ctx: Memo, body: Mapping[str, Any]) -> float | None:
    """One pass (:func:`.reconciler.run_pass`); seconds to the next look while a download runs."""

    async def observed() -> CacheObservation:
        return await observe(ctx, body)

    async def act(obs: CacheObservation, p: CachePlan) -> Outcome[ModelCacheStatus]:
        await execute(ctx, p, body)
        # NB: no status write once the finalizer is gone: the object may vanish any moment.
        gone = obs.deleting and p.finalizer == "remove"
        return Outcome(status=p.status, write=not gone, requeue=requeue_of(p))

    def emit(outcome: Outcome[ModelCacheStatus], wrote: bool) -> None:
        meta = body.get("metadata") or {}
        ready = "True" if outcome.status.phase == "Ready" else "False"
        deleting = bool(meta.get("deletionTimestamp"))
        key = f"{meta['namespace']}/{meta['name']}"
        ctx.metrics.observe_ready("ModelCache", key, None if deleting else ready)
        ctx.metrics.observe_phase("ModelCache", key, None if deleting else outcome.status.phase)

    return await run_pass(
        observe=observed,
        plan=plan,
        execute=act,
        write_status=writes_status(ctx, CACHES, body),
        emit_events=emit,
    )


def register(registry: kopf.OperatorRegistry) -> None:
    """Register the ModelCache controller's handlers on ``registry``."""

    def poke(ctx: Memo, namespace: str | None, name: str | None) -> None:
        if namespace and name:
            ctx.triggers.poke(_key(namespace, name))

    @kopf.on.event(*CACHE_ID, id="mc-changed", registry=registry)
    async def mc_changed(*, body: kopf.Body, memo: Any, logger: Any, **_: Any) -> None:
        meta = body.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            if keys.FINALIZER_MODEL_CACHE in (meta.get("finalizers") or []):
                try:
                    await reconcile(memo.ctx, body)
                except errors.KubeError as error:
                    logger.warning("deletion pass failed: %s", error)
            return
        poke(memo.ctx, meta.get("namespace"), meta.get("name"))

    @kopf.on.event("batch", "v1", "jobs", id="mc-job-changed", labels=OURS, registry=registry)
    async def mc_job_changed(*, body: kopf.Body, memo: Any, **_: Any) -> None:
        meta = body.get("metadata") or {}
        poke(memo.ctx, meta.get("namespace"), (meta.get("labels") or {}).get(keys.LABEL_MODEL_CACHE))

    @kopf.on.event("", "v1", "pods", id="mc-pod-changed", labels=OURS, registry=registry)
    async def mc_pod_changed(*, body: kopf.Body, memo: Any, **_: Any) -> None:
        meta = body.get("metadata") or {}
        poke(memo.ctx, meta.get("namespace"), (meta.get("labels") or {}).get(keys.LABEL_MODEL_CACHE))

    @kopf.on.event("", "v1", "persistentvolumeclaims", id="mc-claim-changed", registry=registry)
    async def mc_claim_changed(*, body: kopf.Body, memo: Any, **_: Any) -> None:
        meta = body.get("metadata") or {}
        ctx: Memo = memo.ctx
        namespace = meta.get("namespace")
        ctx.triggers.poke_group("mc", namespace)

    @kopf.on.event(*WORKLOAD_ID, id="mc-workload-changed", registry=registry)
    async def mc_workload_changed(*, body: kopf.Body, memo: Any, **_: Any) -> None:
        meta = body.get("metadata") or {}
        ref = (((body.get("spec") or {}).get("model") or {}).get("cacheRef") or {}).get("name")
        if not ref:
            return
        ctx: Memo = memo.ctx
        if not ctx.triggers.poke(_key(str(meta.get("namespace")), str(ref))):
            # NB: the cache may be deleting (its daemon stopped): run its deletion pass here.
            cache = await ctx.kube.get(CACHES, str(ref), meta.get("namespace"))
            if cache is not None and (cache.get("metadata") or {}).get("deletionTimestamp"):
                await reconcile(ctx, cache)

    reconcile_daemon(
        registry, CACHE_ID, handler_id="mc-reconcile", kind="ModelCache", key=_key, reconcile=reconcile
    )

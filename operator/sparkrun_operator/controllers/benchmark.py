"""InferenceBenchmark controller: observe -> plan (``plan/benchmark.py``) -> apply -> one status write.

A per-benchmark daemon (``ib-reconcile``) runs a pass when the benchmark, one of its Jobs or pods,
or the target workload changes, and every ``POLL_SECONDS`` while it is Pending or Running. A
pass reads the target workload (and, before the first result, one of its pods' node for the GPU
product, and the ModelCache it serves from: its runner mounts that read-only for the tokenizer),
the benchmark's Jobs, the log tail of a finished Job's newest pod (the runner's result
line), the raw-output ConfigMap and the namespace's benchmarks (the comparison's candidates).

Deletion cancels: the Jobs and the ConfigMap are owned by the benchmark, so the garbage collector
removes them (and the Job controller the running pod) once it is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import Any, Final

import kopf

from sparkrun_operator.api.benchmark import InferenceBenchmarkSpec, InferenceBenchmarkStatus
from sparkrun_operator.api.meta import utcnow
from sparkrun_operator.api.recipe import RecipeSpec
from sparkrun_operator.api.resources import INFERENCE_BENCHMARK, INFERENCE_WORKLOAD, MODEL_CACHE, RECIPE
from sparkrun_operator.controllers.loop import reconcile_daemon
from sparkrun_operator.controllers.memo import Memo
from sparkrun_operator.controllers.reconciler import Outcome, no_events, run_pass, writes_status
from sparkrun_operator.controllers.status import current_status
from sparkrun_operator.k8s import errors
from sparkrun_operator.k8s.resources import CONFIG_MAPS, JOBS, NODES, PODS, resource_of
from sparkrun_operator.ops import benchprofiles
from sparkrun_operator.plan import benchobserve, benchprofile
from sparkrun_operator.plan.benchmark import BenchmarkObservation, BenchmarkPlan, plan
from sparkrun_operator.plan.cluster import GPU_PRODUCT_LABEL
from sparkrun_operator.render import benchmark as render
from sparkrun_operator.render import keys

BENCHMARKS = resource_of(INFERENCE_BENCHMARK)
WORKLOADS = resource_of(INFERENCE_WORKLOAD)
RECIPES = resource_of(RECIPE)
MODEL_CACHES = resource_of(MODEL_CACHE)
BENCHMARK_ID: Final = (INFERENCE_BENCHMARK.group, INFERENCE_BENCHMARK.version, INFERENCE_BENCHMARK.plural)
WORKLOAD_ID: Final = (INFERENCE_WORKLOAD.group, INFERENCE_WORKLOAD.version, INFERENCE_WORKLOAD.plural)
OURS: Final = {keys.LABEL_BENCHMARK: kopf.PRESENT}
JOB_NAME_LABEL: Final = "batch.kubernetes.io/job-name"
LOG_LINES: Final = 8
#: What is read of a scenario pod's log: its ``started`` and ``result``/``error`` lines, each
#: holding at most 16 KiB of raw output (``runtime/benchparse.py``), up to 6 times that escaped.
LOG_BYTES: Final = 256 * 1024

log = logging.getLogger("sparkrun.operator.benchmark")


def _key(namespace: str, name: str) -> tuple[str, str, str]:
    return ("ib", namespace, name)


def bench_options(ctx: Memo) -> render.BenchOptions:
    return render.BenchOptions(
        image=ctx.config.render.tools_image, cache_mount_path=ctx.config.render.cache_mount_path
    )


async def _gpu_product(ctx: Memo, namespace: str, workload: Mapping[str, Any]) -> str | None:
    selector = (workload.get("status") or {}).get("selector")
    if not selector:
        return None
    pods = await ctx.kube.list(PODS, namespace, label_selector=str(selector), limit=5)
    node_name = next((p["spec"].get("nodeName") for p in pods if (p.get("spec") or {}).get("nodeName")), None)
    if not node_name:
        return None
    node = await ctx.kube.get(NODES, str(node_name))
    product = (((node or {}).get("metadata") or {}).get("labels") or {}).get(GPU_PRODUCT_LABEL)
    return str(product) if product else None


async def _jobs(ctx: Memo, namespace: str, name: str, done: set[str]) -> tuple[Any, ...]:
    selector = f"{keys.LABEL_BENCHMARK}={name}"
    raw_jobs, raw_pods = await asyncio.gather(
        ctx.kube.list(JOBS, namespace, label_selector=selector),
        ctx.kube.list(PODS, namespace, label_selector=selector),
    )
    out = []
    for job in raw_jobs:
        observed = benchobserve.job_from(job)
        tail = ""
        if observed.scenario not in done and (observed.succeeded or observed.failed):
            pods = [
                p
                for p in raw_pods
                if (p["metadata"].get("labels") or {}).get(JOB_NAME_LABEL) == observed.name
            ]
            pods.sort(key=lambda p: str(p["metadata"].get("creationTimestamp") or ""))
            if pods:
                tail = await ctx.kube.log_tail(
                    namespace,
                    str(pods[-1]["metadata"]["name"]),
                    container=keys.CONTAINER_BENCHMARK,
                    lines=LOG_LINES,
                    limit_bytes=LOG_BYTES,
                )
        out.append(benchobserve.job_from(job, tail) if tail else observed)
    return tuple(out)


async def _profile(
    ctx: Memo, spec: InferenceBenchmarkSpec, phase: str | None
) -> tuple[dict[str, Any] | None, tuple[str, str] | None]:
    """A registry profile's arguments, or why it cannot be used (``plan/benchprofile.py``)."""
    if benchprofile.scoped(spec.profile) is None or phase == "Succeeded":
        return None, None
    try:
        found = await benchprofiles.resolve(ctx.kube, str(spec.profile), spec.framework)
    except benchprofile.ProfileError as error:
        return None, (error.reason, str(error))
    return dict(found.args), None


async def observe(ctx: Memo, body: Mapping[str, Any]) -> BenchmarkObservation:
    meta = body.get("metadata") or {}
    name, namespace = str(meta["name"]), str(meta["namespace"])
    spec = InferenceBenchmarkSpec.model_validate(body.get("spec") or {})
    previous = current_status(body, InferenceBenchmarkStatus)
    workload = None
    gpu_product = None
    recipe = None
    cache = None
    if spec.target.workload_ref is not None:
        workload = await ctx.kube.get(WORKLOADS, spec.target.workload_ref.name, namespace)
        if workload is not None and not previous.results:
            gpu_product = await _gpu_product(ctx, namespace, workload)
        recipe_name = (((workload or {}).get("spec") or {}).get("recipe") or {}).get("name")
        if recipe_name:
            raw_recipe = await ctx.kube.get(RECIPES, str(recipe_name), namespace)
            with contextlib.suppress(ValueError):
                recipe = (
                    RecipeSpec.model_validate((raw_recipe or {}).get("spec") or {}) if raw_recipe else None
                )
        # NB: a cacheRef names a ModelCache of the workload's namespace, which is the benchmark's.
        cache_name = benchobserve.cache_name(workload, recipe)
        if cache_name:
            cache = await ctx.kube.get(MODEL_CACHES, cache_name, namespace)
    done = {r.name for r in previous.results}
    profile_args, profile_error = await _profile(ctx, spec, previous.phase)
    jobs, others, raw = await asyncio.gather(
        _jobs(ctx, namespace, name, done),
        ctx.kube.list(BENCHMARKS, namespace),
        ctx.kube.get(CONFIG_MAPS, render.raw_config_map(name), namespace),
    )
    target = benchobserve.target_from(
        spec,
        namespace,
        workload,
        gpu_product=gpu_product,
        gateway_url=ctx.config.gateway_url,
        recipe=recipe,
        cache=cache,
    )
    if previous.provenance is not None and target.provenance is not None and previous.results:
        # NB: what was measured stays what the first result measured.
        target = type(target)(**{**target.__dict__, "provenance": previous.provenance})
    return BenchmarkObservation(
        name=name,
        namespace=namespace,
        uid=str(meta.get("uid") or ""),
        generation=int(meta.get("generation") or 0),
        spec=spec,
        status=previous,
        now=utcnow(),
        target=target,
        resume=(meta.get("annotations") or {}).get(keys.ANNOTATION_BENCHMARK_RESUME),
        jobs=jobs,
        previous=benchobserve.previous_from(others),
        raw_outputs=dict((raw or {}).get("data") or {}),
        options=bench_options(ctx),
        profile_args=profile_args,
        profile_error=profile_error,
    )


async def execute(ctx: Memo, p: BenchmarkPlan, namespace: str) -> None:
    if p.raw is not None:
        await ctx.kube.apply(CONFIG_MAPS, p.raw, namespace=namespace)
    for doc in p.create:
        # NB: AlreadyExists: made by the previous pass; the next one sees it.
        with contextlib.suppress(errors.KubeAlreadyExists):
            await ctx.kube.create(JOBS, doc)
    for job in p.delete_jobs:
        with contextlib.suppress(errors.KubeNotFound):
            await ctx.kube.delete(JOBS, job.name, namespace, uid=job.uid, propagation="Background")


async def reconcile(ctx: Memo, body: Mapping[str, Any]) -> float | None:
    """One pass (:func:`.reconciler.run_pass`); seconds to the next look while the benchmark is
    Pending or Running."""

    async def observed() -> BenchmarkObservation | None:
        obs = await observe(ctx, body)
        # NB: deleted: the garbage collector removes the Jobs; nothing to plan or write.
        return None if body.get("metadata", {}).get("deletionTimestamp") else obs

    async def act(obs: BenchmarkObservation, p: BenchmarkPlan) -> Outcome[InferenceBenchmarkStatus]:
        await execute(ctx, p, obs.namespace)
        return Outcome(status=p.status, requeue=p.requeue)

    # NB: no Ready gauge and no Events: the status carries the results.
    return await run_pass(
        observe=observed,
        plan=plan,
        execute=act,
        write_status=writes_status(ctx, BENCHMARKS, body),
        emit_events=no_events,
    )


def register(registry: kopf.OperatorRegistry) -> None:
    """Register the InferenceBenchmark controller's handlers on ``registry``."""

    def poke(ctx: Memo, namespace: str | None, name: str | None) -> None:
        if namespace and name:
            ctx.triggers.poke(_key(namespace, name))

    @kopf.on.event(*BENCHMARK_ID, id="ib-changed", registry=registry)
    async def ib_changed(*, body: kopf.Body, memo: Any, **_: Any) -> None:
        meta = body.get("metadata") or {}
        poke(memo.ctx, meta.get("namespace"), meta.get("name"))

    @kopf.on.event("batch", "v1", "jobs", id="ib-job-changed", labels=OURS, registry=registry)
    async def ib_job_changed(*, body: kopf.Body, memo: Any, **_: Any) -> None:
        meta = body.get("metadata") or {}
        poke(memo.ctx, meta.get("namespace"), (meta.get("labels") or {}).get(keys.LABEL_BENCHMARK))

    @kopf.on.event(*WORKLOAD_ID, id="ib-workload-changed", registry=registry)
    async def ib_workload_changed(*, body: kopf.Body, memo: Any, **_: Any) -> None:
        namespace = (body.get("metadata") or {}).get("namespace")
        ctx: Memo = memo.ctx
        ctx.triggers.poke_group("ib", namespace)

    reconcile_daemon(
        registry,
        BENCHMARK_ID,
        handler_id="ib-reconcile",
        kind="InferenceBenchmark",
        key=_key,
        reconcile=reconcile,
    )

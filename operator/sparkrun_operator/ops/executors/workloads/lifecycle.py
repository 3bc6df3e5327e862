"""Guarded lifecycle of one workload addressed by id: ``status``, ``stop``, ``sleep``, ``wake``,
``reconcile``, and the wait for a phase they (and launch) share."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.k8s.errors import KubeInvalid
from sparkrun_operator.ops import ifmatch, kube, rollout
from sparkrun_operator.ops.errors import Conflict, DaemonError, Invalid, NotFound, OperationTimeout
from sparkrun_operator.ops.executors.recipe_lookup import find_recipe
from sparkrun_operator.ops.executors.workloads.inventory import state, workload_row
from sparkrun_operator.ops.invocation import OperationContext
from sparkrun_operator.plan import wake as wakeup
from sparkrun_operator.render import keys


async def wait_for(
    ctx: OperationContext,
    name: str,
    *,
    until: str,
    limit: float,
) -> dict[str, Any]:
    """Poll the workload until ``ready``/``sleeping``/``gone``; report phase changes."""
    deadline = time.monotonic() + limit
    last_phase = None
    seen_stages: set[str] = set()
    while True:
        found = await ctx.rest.get(kube.WORKLOADS, name, ctx.namespace)
        if until == "gone":
            if found is None:
                return {}
        elif found is None:
            raise NotFound(f"InferenceWorkload {name} disappeared")
        else:
            status = found.get("status") or {}
            phase = status.get("phase")
            if phase != last_phase:
                last_phase = phase
                await ctx.feedback(
                    f"InferenceWorkload {name}: {phase or 'Pending'}", stage="readiness", activity=phase
                )
            for event in status.get("startup") or ():
                stage = str(event.get("stage"))
                if stage not in seen_stages:
                    seen_stages.add(stage)
                    await ctx.feedback(f"startup: {stage}", stage=stage, activity="startup")
            if until == "ready" and kube.is_ready(found):
                return found
            if until == "sleeping" and any(
                c.get("type") == "Sleeping" and c.get("status") == "True"
                for c in status.get("conditions") or ()
            ):
                return found
            if phase == "Failed":
                failure = status.get("lastFailure") or {}
                reason = f"{failure.get('reason', 'Failed')} {failure.get('message', '')}".strip()
                raise DaemonError(
                    f"Workload {name} failed: {reason}",
                    type_name="WorkloadFailed",
                )
        if time.monotonic() >= deadline:
            raise OperationTimeout(
                f"InferenceWorkload {name} did not become {until} within {limit:g} seconds"
            )
        await asyncio.sleep(ctx.settings.poll_interval)


async def by_id(ctx: OperationContext, workload_id: str) -> dict[str, Any]:
    return await find(ctx.rest, ctx.namespace, workload_id)


async def find(rest: Kube, namespace: str, workload_id: str) -> dict[str, Any]:
    """The workload whose workload id or name is ``workload_id`` (the If-Match check's resolver
    too, ``ops/executors/targets.py``); ``NotFound`` when none is. A name is read with one GET:
    no name holds ``_`` or ``/`` and every workload id does (``sparkrun_<intent>_<placement>``,
    or ``namespace/name`` before the controller wrote one), so only an id lists
    (``ops/rollout.py`` ``find_workload``)."""
    try:
        return await rollout.find_workload(rest, namespace, workload_id)
    except (NotFound, Invalid):
        raise NotFound(f"Unknown workload: {workload_id}") from None


async def _names_recipe(ctx: OperationContext, reference: str, name: str | None) -> bool:
    """Whether ``reference`` (a catalog name or ``@registry/name``) names the Recipe ``name``."""
    try:
        return name is not None and (await find_recipe(ctx, reference))["metadata"]["name"] == name
    except (NotFound, Conflict):
        return False


async def guarded(ctx: OperationContext, args: Mapping[str, Any], *, owner: bool) -> dict[str, Any]:
    workload = await by_id(ctx, args["workload_id"])
    spec, status = workload.get("spec") or {}, workload.get("status") or {}
    recipe = (spec.get("recipe") or {}).get("name")
    if recipe != args["recipe"] and not await _names_recipe(ctx, args["recipe"], recipe):
        raise Conflict(f"Workload {args['workload_id']} serves recipe {recipe!r}, not {args['recipe']!r}")
    revision = status.get("recipeRevision") or ""
    if revision != args["recipe_revision"]:
        raise Conflict(
            f"Workload {args['workload_id']} is at recipe revision {revision!r}, "
            f"not {args['recipe_revision']!r}",
            attrs={"reason": "revision_mismatch"},
        )
    candidates = args.get("cluster_candidates")
    if candidates and spec.get("cluster") not in candidates:
        raise Conflict(
            f"Workload {args['workload_id']} runs on cluster {spec.get('cluster')!r}, not a candidate"
        )
    if owner and (spec.get("manager") or "") != ctx.manager:
        raise Conflict(
            f"Workload {args['workload_id']} is owned by manager {spec.get('manager') or '(none)'!r}, "
            f"not {ctx.manager!r}",
            attrs={"reason": "not_owner"},
        )
    return workload


async def status(ctx: OperationContext, args: dict[str, Any]) -> Any:
    return workload_row(await guarded(ctx, args, owner=False), ctx.manager)


async def stop(ctx: OperationContext, args: dict[str, Any]) -> Any:
    workload = await guarded(ctx, args, owner=True)
    name, uid = workload["metadata"]["name"], workload["metadata"].get("uid")
    async with ifmatch.write(ctx.rest, kube.WORKLOADS, name, ctx.namespace, ctx.if_match):
        await ctx.rest.delete(
            kube.WORKLOADS,
            name,
            ctx.namespace,
            uid=uid,
            resource_version=ctx.if_match,
            propagation="Background",
        )
    await ctx.feedback(f"Deleted InferenceWorkload {name}", stage="stop")
    await wait_for(ctx, name, until="gone", limit=120.0)
    return {"state": "offline", "workload_ids": [args["workload_id"]]}


async def sleep(ctx: OperationContext, args: dict[str, Any]) -> Any:
    workload = await guarded(ctx, args, owner=True)
    name = workload["metadata"]["name"]
    if not ((workload.get("spec") or {}).get("engine") or {}).get("enableSleepMode"):
        raise Conflict(
            f"InferenceWorkload {name} was not started with engine.enableSleepMode; it cannot sleep"
        )
    sleeping = {"spec": {"state": "Sleeping"}}
    await ifmatch.merge_patch(ctx.rest, kube.WORKLOADS, name, ctx.namespace, sleeping, ctx.if_match)
    slept = await wait_for(ctx, name, until="sleeping", limit=300.0)
    return workload_row(slept, ctx.manager)


async def wake(ctx: OperationContext, args: dict[str, Any]) -> Any:
    """Sleeping, Stopped or at the idle policy's zero replicas: serve again (the gateway's rule,
    ``plan/wake.py``: from zero, replicas back to the resume count, written once). The user's own
    ``replicas: 0`` is refused (Conflict): nothing would start it."""
    workload = await guarded(ctx, args, owner=True)
    name = workload["metadata"]["name"]
    resting = wakeup.resting_of(workload)
    if (workload.get("spec") or {}).get("replicas") == 0 and resting != "Zero":
        # NB: the user's own zero: a state alone starts nothing (the wait below would never end)
        raise Conflict(
            f"Workload {args['workload_id']} has replicas: 0 and no idle policy: nothing to wake "
            "(scale it up instead)"
        )
    if not (resting == "Zero" and await _from_zero(ctx, workload)):
        running = wakeup.STATE_RUNNING
        await ifmatch.merge_patch(ctx.rest, kube.WORKLOADS, name, ctx.namespace, running, ctx.if_match)
    woken = await wait_for(ctx, name, until="ready", limit=ctx.settings.ready_timeout)
    return workload_row(woken, ctx.manager)


async def _from_zero(ctx: OperationContext, workload: Mapping[str, Any]) -> bool:
    """Replicas back from the idle policy's zero; ``False`` when something else scaled it first
    (or, under If-Match, the workload changed: the state write that follows then refuses)."""
    name = workload["metadata"]["name"]
    tested = [] if ctx.if_match is None else [ifmatch.version_test(ctx.if_match)]
    try:
        await ctx.rest.request(
            "PATCH",
            kube.WORKLOADS.path(ctx.namespace, name),
            body=tested + wakeup.from_zero(wakeup.resume_replicas(dict(workload))),
            content_type="application/json-patch+json",
        )
    except KubeInvalid:
        return False
    return True


async def reconcile(ctx: OperationContext, args: dict[str, Any]) -> Any:
    workload = await guarded(ctx, args, owner=True)
    name = workload["metadata"]["name"]
    patched = await ctx.rest.merge_patch(
        kube.WORKLOADS,
        name,
        {"metadata": {"annotations": {keys.ANNOTATION_RECONCILE_REQUESTED: str(time.time())}}},
        ctx.namespace,
    )
    return {"workload_id": args["workload_id"], "state": state(patched), "receipts": 0}

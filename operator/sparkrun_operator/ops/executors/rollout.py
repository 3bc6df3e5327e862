"""``plugins.sparkrun-k8s.*``: the project's own operations (ADR 0048) over ``ops/rollout.py``.

``workloads.history`` is an inline query the daemon API answers (read scope);
``workloads.rollback``, ``workloads.apply_drift`` (operate) and ``clusters.apply_drift`` (admin)
are jobs the operator executes, writing as field manager ``sparkrun-daemon-api``: the daemon API's
own process has no write access to workloads or clusters (ADR 0021). The scope is the daemon's one
rule (ADR 0042), checked at submission and again before a job runs. Workloads are those of the
API's namespace, addressed by name or workload id like ``workloads.wake``; a workload another
manager launched (``spec.manager``) is refused as those operations refuse it (409 ``not_owner``),
one with no manager (applied with kubectl or GitOps) is anyone's with the scope.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sparkrun_operator.api.pluginops import PLUGIN_PREFIX
from sparkrun_operator.k8s.client import DAEMON_API_MANAGER
from sparkrun_operator.ops import ifmatch, rollout
from sparkrun_operator.ops.errors import Conflict
from sparkrun_operator.ops.invocation import Executor, OperationContext

__all__ = ["EXECUTORS"]


def _dump(model: Any) -> Any:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


async def owned(ctx: OperationContext, ref: str) -> dict[str, Any]:
    """The workload ``ref`` names (name or workload id), refused (409 ``not_owner``) when another
    manager launched it, as the other workload operations refuse it."""
    workload = await rollout.find_workload(ctx.rest, ctx.namespace, ref)
    manager = (workload.get("spec") or {}).get("manager") or ""
    if manager and manager != ctx.manager:
        raise Conflict(
            f"InferenceWorkload {workload['metadata']['name']} is owned by manager {manager!r}, "
            f"not {ctx.manager!r}",
            attrs={"reason": "not_owner"},
        )
    return workload


async def history(ctx: OperationContext, args: Mapping[str, Any]) -> Any:
    workload = await rollout.find_workload(ctx.rest, ctx.namespace, args["workload"])
    ctx.etag = ifmatch.etag(str(workload["metadata"].get("resourceVersion") or ""))  # NB: ADR 0049
    return _dump(await rollout.history_of(ctx.rest, workload))


async def rollback(ctx: OperationContext, args: Mapping[str, Any]) -> Any:
    workload = await owned(ctx, args["workload"])
    done = await rollout.rollback(
        ctx.rest.as_manager(DAEMON_API_MANAGER),
        workload,
        revision=args.get("revision"),
        clear=bool(args.get("clear")),
        if_match=ctx.if_match,
    )
    what = f"spec.rollout.revision {done.revision}" if done.revision else "spec.rollout.revision removed"
    await ctx.feedback(f"InferenceWorkload {done.workload}: {what}", stage="rollback")
    return _dump(done)


async def apply_drift(ctx: OperationContext, args: Mapping[str, Any]) -> Any:
    workload = await owned(ctx, args["workload"])
    done = await rollout.apply_drift(
        ctx.rest.as_manager(DAEMON_API_MANAGER),
        workload,
        revision=args.get("revision"),
        if_match=ctx.if_match,
    )
    await ctx.feedback(f"InferenceWorkload {done.workload}: approved {done.approved}", stage="apply_drift")
    return _dump(done)


async def apply_cluster_drift(ctx: OperationContext, args: Mapping[str, Any]) -> Any:
    cluster = await rollout.find_cluster(ctx.rest, args["cluster"])
    done = await rollout.apply_cluster_drift(
        ctx.rest.as_manager(DAEMON_API_MANAGER), cluster, revision=args.get("revision"), if_match=ctx.if_match
    )
    await ctx.feedback(f"InferenceCluster {done.cluster}: approved {done.approved}", stage="apply_drift")
    return _dump(done)


EXECUTORS: dict[str, Executor] = {
    PLUGIN_PREFIX + "workloads.history": history,
    PLUGIN_PREFIX + "workloads.rollback": rollback,
    PLUGIN_PREFIX + "workloads.apply_drift": apply_drift,
    PLUGIN_PREFIX + "clusters.apply_drift": apply_cluster_drift,
}

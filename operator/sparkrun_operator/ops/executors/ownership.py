"""``plugins.sparkrun-k8s.workloads.lease | release | leases``: ownership leases (ADR 0049).

All three are inline queries the daemon API answers synchronously (``ops/ownership.py``): a claim
or renew every ``ttlSeconds / 3`` as a DaemonJob would add a job per renew to the job history and
wait on the operator's executor. The daemon API therefore writes ownership Leases itself, in its
own namespace (its workloads are there; ``get``/``create``/``update`` on Leases of that namespace
only, never cluster-wide), as field manager ``sparkrun-daemon-api``; it still has no write on
workloads or clusters (ADR 0021). The holder is the authenticated principal (with the caller's
optional session id), never an owner the caller names.

``lease`` and ``release`` are operate scope and refuse a workload another manager launched
(409 ``not_owner``) as the other workload operations do; ``leases`` is read scope.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sparkrun_operator.api.ownership import (
    HELD,
    LeasesResult,
    check_session,
    lease_name,
)
from sparkrun_operator.api.pluginops import PLUGIN_PREFIX
from sparkrun_operator.k8s.client import DAEMON_API_MANAGER
from sparkrun_operator.k8s.resources import LEASES
from sparkrun_operator.ops import kube, ownership, rollout
from sparkrun_operator.ops.errors import Conflict, Invalid
from sparkrun_operator.ops.invocation import Executor, OperationContext
from sparkrun_operator.render import keys

__all__ = ["EXECUTORS"]


def _dump(model: Any) -> Any:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def _session(args: Mapping[str, Any]) -> str | None:
    try:
        return check_session(args.get("session"))
    except ValueError as error:
        raise Invalid(str(error)) from error


async def _owned(ctx: OperationContext, ref: str) -> dict[str, Any]:
    workload = await rollout.find_workload(ctx.rest, ctx.namespace, ref)
    manager = (workload.get("spec") or {}).get("manager") or ""
    if manager and manager != ctx.manager:
        raise Conflict(
            f"InferenceWorkload {workload['metadata']['name']} is owned by manager {manager!r}, "
            f"not {ctx.manager!r}",
            attrs={"reason": "not_owner"},
        )
    return workload


async def lease(ctx: OperationContext, args: Mapping[str, Any]) -> Any:
    session = _session(args)
    workload = await _owned(ctx, args["workload"])
    done = await ownership.claim(
        ctx.rest.as_manager(DAEMON_API_MANAGER),
        workload,
        principal=ctx.principal,
        session=session,
        ttl_seconds=args.get("ttl_seconds"),
        now=ctx.clock(),
    )
    return _dump(done)


async def release(ctx: OperationContext, args: Mapping[str, Any]) -> Any:
    session = _session(args)
    workload = await _owned(ctx, args["workload"])
    done = await ownership.release(
        ctx.rest.as_manager(DAEMON_API_MANAGER),
        workload,
        principal=ctx.principal,
        session=session,
        now=ctx.clock(),
    )
    return _dump(done)


async def leases(ctx: OperationContext, args: Mapping[str, Any]) -> Any:
    owned = args.get("owned")
    workloads = await ctx.rest.list(kube.WORKLOADS, ctx.namespace)
    found = await ctx.rest.list(LEASES, ctx.namespace, label_selector=keys.LABEL_OWNERSHIP)
    by_name = {str((x.get("metadata") or {}).get("name") or ""): x for x in found}
    out = []
    for workload in sorted(workloads, key=lambda w: str((w.get("metadata") or {}).get("name") or "")):
        if ownership.spec_of(workload) is None:
            continue
        entry = ownership.info(workload, by_name.get(lease_name(str(workload["metadata"]["name"]))))
        if owned is None or (entry.state == HELD) == bool(owned):
            out.append(entry)
    return _dump(LeasesResult(leases=out))


EXECUTORS: dict[str, Executor] = {
    PLUGIN_PREFIX + "workloads.lease": lease,
    PLUGIN_PREFIX + "workloads.release": release,
    PLUGIN_PREFIX + "workloads.leases": leases,
}

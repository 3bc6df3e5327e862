"""``plugins.sparkrun-k8s.workloads.lease | release | leases``: ownership leases (ADR 0049).

All three are inline queries the daemon API answers synchronously (``ops/ownership.py``): a claim
or renew every ``ttlSeconds / 3`` as a DaemonJob would add a job per renew to the job history and
wait on the operator's executor. The daemon API therefore writes ownership Leases itself, in its
own namespace (its workloads are there; ``get``/``create``/``update`` on Leases of that namespace
only, never cluster-wide), as field manager ``sparkrun-daemon-api``; it still has no write on
workloads or clusters (ADR 0021). The holder is the authenticated principal (with the caller's
optional session id), never an owner the caller names.

``lease`` and ``release`` are operate scope and refuse a workload another manager launched
(409 ``not_owner``) as the other workload operations do, and under If-Match one written since
the ETag the daemon API checked (412 ``revision_conflict``); ``leases`` is read scope.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sparkrun_operator.api.ownership import check_session
from sparkrun_operator.api.pluginops import PLUGIN_PREFIX
from sparkrun_operator.k8s.client import DAEMON_API_MANAGER
from sparkrun_operator.ops import ifmatch, kube, ownership
from sparkrun_operator.ops.errors import Invalid
from sparkrun_operator.ops.executors.rollout import owned
from sparkrun_operator.ops.invocation import Executor, OperationContext

__all__ = ["EXECUTORS"]


def _dump(model: Any) -> Any:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def _session(args: Mapping[str, Any]) -> str | None:
    try:
        return check_session(args.get("session"))
    except ValueError as error:
        raise Invalid(str(error)) from error


async def _target(ctx: OperationContext, ref: str) -> dict[str, Any]:
    """The workload to claim or release: one this manager launched and, under If-Match, still at
    the ETag the daemon API checked (a write since is refused: 412 ``revision_conflict``)."""
    workload = await owned(ctx, ref)
    await ifmatch.unchanged(ctx.rest, kube.WORKLOADS, workload, ctx.if_match)
    return workload


async def lease(ctx: OperationContext, args: Mapping[str, Any]) -> Any:
    session = _session(args)
    workload = await _target(ctx, args["workload"])
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
    workload = await _target(ctx, args["workload"])
    done = await ownership.release(
        ctx.rest.as_manager(DAEMON_API_MANAGER),
        workload,
        principal=ctx.principal,
        session=session,
        now=ctx.clock(),
    )
    return _dump(done)


async def leases(ctx: OperationContext, args: Mapping[str, Any]) -> Any:
    held = None if args.get("owned") is None else bool(args["owned"])
    # NB: from the watch cache, as workloads.list reads (a read-scope listing)
    return _dump(await ownership.listing(ctx.rest, ctx.namespace, held, cached=True))


EXECUTORS: dict[str, Executor] = {
    PLUGIN_PREFIX + "workloads.lease": lease,
    PLUGIN_PREFIX + "workloads.release": release,
    PLUGIN_PREFIX + "workloads.leases": leases,
}

"""``plugins.sparkrun-k8s.objects.get`` (ADR 0049): the ETag of any object a conditional operation
changes, read by the daemon API (a query, read scope) and sent as the ``ETag`` header too.

What a caller may see is what the daemon API shows it elsewhere: workloads and ModelCaches of the
API's namespace (ADR 0044: the daemon API serves one namespace), InferenceClusters (cluster-scoped,
listed by ``cluster.list``), and DaemonJobs as ``GET /v1/jobs/{id}`` shows them (ADR 0021): another
principal's job, unless the caller holds admin, is answered as an unknown one (404 ``KeyError``),
and a job whose operation's scope the caller lacks is 403.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sparkrun_operator.api.objects import ObjectGetResult
from sparkrun_operator.api.pluginops import PLUGIN_PREFIX
from sparkrun_operator.k8s.daemonjobs import DAEMON_JOBS
from sparkrun_operator.ops import authz, catalog, ifmatch, jobs, kube
from sparkrun_operator.ops.errors import Forbidden, Invalid, NotFound
from sparkrun_operator.ops.executors.modelcache.location import CACHES
from sparkrun_operator.ops.executors.workloads import lifecycle
from sparkrun_operator.ops.invocation import Executor, OperationContext
from sparkrun_operator.ops.jobstore import JOB_ID

__all__ = ["EXECUTORS", "get"]


def _named(name: str, what: str) -> str:
    """``name`` when Kubernetes could store it; else ``NotFound``: no such object can exist."""
    try:
        return kube.check_name(name, what)
    except Invalid:
        raise NotFound(f"{what} {name} not found") from None


async def _job(ctx: OperationContext, name: str) -> dict[str, Any]:
    unknown = NotFound("'Unknown job'", type_name="KeyError")
    if not JOB_ID.match(name):
        raise unknown
    reviewer = authz.reviews_in(ctx.rest, ctx.namespace)
    # NB: asked whether the job exists or not: an uncached review only for another's job would
    # time apart "another principal's keyed job" from "no such job" (docs/security.md)
    admin = await authz.is_admin(reviewer, ctx.user)
    found = await ctx.rest.get(DAEMON_JOBS, name, ctx.namespace)
    if found is None or jobs.is_tombstone(found):
        raise unknown
    spec = found.get("spec") or {}
    owner = (spec.get("principal") or {}).get("username")
    if owner != ctx.principal and not admin:
        raise unknown
    op = catalog.load().find(str(spec.get("operation") or ""))
    if ctx.user is None or not await authz.holds_scope(reviewer, ctx.user, op.scope if op else "admin"):
        raise Forbidden("Job requires its operation permission")
    return found


async def _read(ctx: OperationContext, kind: str, name: str) -> dict[str, Any]:
    if kind == "InferenceWorkload":
        return await lifecycle.find(ctx.rest, ctx.namespace, name)
    if kind == "InferenceCluster":
        return await kube.get_cluster(ctx.rest, _named(name, "InferenceCluster"))
    if kind == "ModelCache":
        found = await ctx.rest.get(CACHES, _named(name, "ModelCache"), ctx.namespace)
        if found is None:
            raise NotFound(f"ModelCache {name} not found in namespace {ctx.namespace}")
        return found
    return await _job(ctx, name)


async def get(ctx: OperationContext, args: Mapping[str, Any]) -> Any:
    kind = str(args["kind"])
    obj = await _read(ctx, kind, str(args["name"]))
    meta, status = obj.get("metadata") or {}, obj.get("status") or {}
    etag = ifmatch.etag(str(meta.get("resourceVersion") or ""))
    ctx.etag = etag
    result = ObjectGetResult(
        kind=kind,
        name=str(meta.get("name") or ""),
        namespace=meta.get("namespace"),
        uid=str(meta.get("uid") or ""),
        etag=etag,
        generation=meta.get("generation"),
        observed_generation=status.get("observedGeneration"),
    )
    return result.model_dump(mode="json", exclude_none=True)


EXECUTORS: dict[str, Executor] = {PLUGIN_PREFIX + "objects.get": get}

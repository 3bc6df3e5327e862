"""The targets of the reference operations and project jobs that take ``If-Match`` (ADR 0049):
one resolver per operation, finding the one object it changes from its arguments exactly as its
executor does, registered in :data:`sparkrun_operator.ops.ifmatch.TABLE` on import.

=================================== ================= ============================================
operation                           target            found as
=================================== ================= ============================================
workloads.stop / sleep / wake       InferenceWorkload ``workload_id``: workload id or name
cluster.update                      InferenceCluster  ``name``
cluster.default                     InferenceCluster  ``name`` (``null``, clearing the default, is
                                                      no one object: 422)
model_cache.pin                     ModelCache        the one tracking ``model``@``revision`` at
                                                      ``cache_dir`` (none or several: 422)
plugins.sparkrun-k8s.workloads.     InferenceWorkload ``workload``: name or workload id
rollback / apply_drift
plugins.sparkrun-k8s.clusters.      InferenceCluster  ``cluster``
apply_drift / drain
plugins.sparkrun-k8s.workloads.     InferenceWorkload ``workload``: name or workload id (queries:
lease / release                                       checked just before the Lease is written)
=================================== ================= ============================================

Every target's ETag is answered by ``plugins.sparkrun-k8s.objects.get`` (and a workload's by
``plugins.sparkrun-k8s.workloads.history`` too). The job routes' target, the DaemonJob itself, is
checked by the daemon API's job routes (``GET /v1/jobs/{id}`` answers its ETag).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from sparkrun_operator.api.pluginops import PLUGIN_PREFIX
from sparkrun_operator.api.resources import INFERENCE_CLUSTER, INFERENCE_WORKLOAD, MODEL_CACHE
from sparkrun_operator.ops import ifmatch, kube, rollout
from sparkrun_operator.ops.errors import Invalid, NotFound
from sparkrun_operator.ops.executors.modelcache import inventory
from sparkrun_operator.ops.executors.modelcache.location import CACHES, parse_cache_dir, stored_at
from sparkrun_operator.ops.executors.workloads import lifecycle
from sparkrun_operator.ops.ifmatch import ResolveContext, Target

__all__ = ["OBJECTS_GET", "REGISTERED", "pinned_cache"]

#: The project query that answers any target's ETag.
OBJECTS_GET: Final = PLUGIN_PREFIX + "objects.get"
_HISTORY: Final = PLUGIN_PREFIX + "workloads.history"


def _workload(obj: Mapping[str, Any]) -> Target:
    meta = obj["metadata"]
    return Target(INFERENCE_WORKLOAD.kind, kube.WORKLOADS, meta["name"], meta.get("namespace"), obj)


def _cluster(obj: Mapping[str, Any]) -> Target:
    return Target(INFERENCE_CLUSTER.kind, kube.CLUSTERS, obj["metadata"]["name"], None, obj)


async def _workload_by_id(ctx: ResolveContext, args: Mapping[str, Any]) -> Target:
    return _workload(await lifecycle.find(ctx.rest, ctx.namespace, str(args["workload_id"])))


async def _workload_by_ref(ctx: ResolveContext, args: Mapping[str, Any]) -> Target:
    return _workload(await rollout.find_workload(ctx.rest, ctx.namespace, str(args["workload"])))


async def _cluster_named(ctx: ResolveContext, name: str) -> Target:
    try:
        kube.check_name(name, "cluster")
    except Invalid:
        raise NotFound(f"Unknown cluster: {name}") from None  # NB: no object can have that name
    return _cluster(await kube.get_cluster(ctx.rest, name))


async def _updated_cluster(ctx: ResolveContext, args: Mapping[str, Any]) -> Target:
    return await _cluster_named(ctx, str(args["name"]))


async def _default_cluster(ctx: ResolveContext, args: Mapping[str, Any]) -> Target:
    name = args.get("name")
    if name is None:
        raise Invalid(
            "If-Match is not supported by cluster.default with name null: clearing the default "
            "changes every cluster that has it, not one named object",
            attrs={"operation": "cluster.default"},
        )
    return await _cluster_named(ctx, str(name))


async def _cluster_by_arg(ctx: ResolveContext, args: Mapping[str, Any]) -> Target:
    return _cluster(await rollout.find_cluster(ctx.rest, str(args["cluster"])))


def pinned_cache(caches: list[dict[str, Any]], model: str, revision: str, where: str) -> dict[str, Any]:
    """The one ModelCache of ``caches`` (those stored at the location) tracking ``model`` at
    ``revision`` (its resolved commit, or the revision its spec names); ``Invalid`` when none
    or several do: an ``If-Match`` must name one object."""
    matching = []
    for cache in caches:
        tracker = inventory.Tracker.of(cache)
        if tracker.repo == model and revision in (tracker.commit, tracker.revision):
            matching.append(cache)
    if len(matching) != 1:
        names = sorted(str(c["metadata"]["name"]) for c in matching)
        why = f"several track it ({', '.join(names[:8])})" if names else "none tracks it"
        raise Invalid(
            f"If-Match on model_cache.pin names one ModelCache tracking {model}@{revision} at {where}, "
            f"and {why}: pin by the full commit one ModelCache resolved, or send no If-Match",
            attrs={"operation": "model_cache.pin", "model_caches": names[:8]},
        )
    return matching[0]


async def _pinned_cache(ctx: ResolveContext, args: Mapping[str, Any]) -> Target:
    claim, path = parse_cache_dir(str(args["cache_dir"]))
    caches = [c for c in await ctx.rest.list(CACHES, ctx.namespace) if stored_at(c, claim, path)]
    found = pinned_cache(caches, str(args["model"]), str(args["revision"]), str(args["cache_dir"]))
    meta = found["metadata"]
    return Target(MODEL_CACHE.kind, CACHES, meta["name"], meta.get("namespace"), found)


REGISTERED: Final = (
    ("workloads.stop", INFERENCE_WORKLOAD.kind, _workload_by_id),
    ("workloads.sleep", INFERENCE_WORKLOAD.kind, _workload_by_id),
    ("workloads.wake", INFERENCE_WORKLOAD.kind, _workload_by_id),
    ("cluster.update", INFERENCE_CLUSTER.kind, _updated_cluster),
    ("cluster.default", INFERENCE_CLUSTER.kind, _default_cluster),
    ("model_cache.pin", MODEL_CACHE.kind, _pinned_cache),
    (PLUGIN_PREFIX + "workloads.rollback", INFERENCE_WORKLOAD.kind, _workload_by_ref),
    (PLUGIN_PREFIX + "workloads.apply_drift", INFERENCE_WORKLOAD.kind, _workload_by_ref),
    (PLUGIN_PREFIX + "clusters.apply_drift", INFERENCE_CLUSTER.kind, _cluster_by_arg),
    (PLUGIN_PREFIX + "clusters.drain", INFERENCE_CLUSTER.kind, _cluster_by_arg),
    # NB: queries the daemon API runs at once: the workload is checked just before the Lease is
    # written (the Lease's own write is a compare-and-swap on its resourceVersion).
    (PLUGIN_PREFIX + "workloads.lease", INFERENCE_WORKLOAD.kind, _workload_by_ref),
    (PLUGIN_PREFIX + "workloads.release", INFERENCE_WORKLOAD.kind, _workload_by_ref),
)

for _operation, _kind, _resolve in REGISTERED:
    ifmatch.register(_operation, kind=_kind, query=OBJECTS_GET, resolve=_resolve)

"""``cluster.*``, ``catalog.clusters`` and ``catalog.capacity``: daemon clusters are InferenceClusters.

- ``cluster.create`` creates an ``InferenceCluster`` named ``name`` whose member nodes are the
  ``hosts`` (Kubernetes node names); ``user`` (an SSH user, meaningless here) is kept as the
  annotation ``sparkrun.dev/ssh-user`` so the cluster reads back as it was written.
- ``cluster.update`` patches hosts/description/user; ``cluster.delete`` deletes the object
  (workloads keep running); ``cluster.default`` marks one cluster ``spec.default`` and unmarks
  the others (``null`` clears the default).
- ``cluster.observe`` / ``cluster.report`` / ``catalog.capacity`` read GPU occupancy of the
  selected nodes from the pods bound to them (no SSH: the kubelet already reports it).

Cluster definitions are returned in the daemon's ClusterDefinition shape with
``transport: "kubernetes"`` and per-node hardware from node labels and capacity, counted in the
GPU resource in use (``status.applied.gpuResource``: a changed ``spec.gpuResource`` waits for
``spec.approve``, ADR 0046).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sparkrun_operator.api.cluster import DEFAULT_GPU_RESOURCE
from sparkrun_operator.api.meta import API_VERSION
from sparkrun_operator.api.resources import INFERENCE_CLUSTER
from sparkrun_operator.k8s import errors as k8s_errors
from sparkrun_operator.ops import ifmatch, kube
from sparkrun_operator.ops.errors import Conflict, NotFound
from sparkrun_operator.ops.invocation import Executor, OperationContext
from sparkrun_operator.plan import observe as plan_observe
from sparkrun_operator.plan.cluster import GPU_PRODUCT_LABEL, ObservedNode
from sparkrun_operator.render import keys

__all__ = ["EXECUTORS", "cluster_definition"]

SSH_USER_ANNOTATION = keys.ANNOTATION_SSH_USER
MANAGED_BY = keys.MANAGED_BY_DAEMON_API


def _hardware(node: ObservedNode | None, gpu_resource: str) -> dict[str, Any]:
    accelerators = []
    if node is not None and node.capacity.get(gpu_resource, 0) > 0:
        accelerators.append(
            {
                "vendor": gpu_resource.split(".", 1)[0] or "nvidia",
                "model": node.labels.get(GPU_PRODUCT_LABEL, "unknown"),
                "count": node.capacity.get(gpu_resource, 0),
                "memory_gb": None,
                "capabilities": [],
                "max_gpu_memory_utilization": None,
                "memory_limit_source": None,
                "memory_capacity_source": None,
                "compute_capability": None,
            }
        )
    return {
        "accelerators": accelerators,
        "fingerprint": None,
        "notes": "" if node is not None else "node not found",
        "ib_info": None,
        "driver_versions": {},
        "source": "kubernetes",
    }


def cluster_definition(cluster: Mapping[str, Any], nodes: Mapping[str, ObservedNode]) -> dict[str, Any]:
    """The daemon's ClusterDefinition of an InferenceCluster."""
    meta, spec = cluster.get("metadata", {}), cluster.get("spec", {})
    hosts = kube.declared_hosts(cluster)
    gpu_resource = (
        plan_observe.applied_gpu_resource(cluster) or spec.get("gpuResource") or DEFAULT_GPU_RESOURCE
    )
    return {
        "name": meta.get("name", ""),
        "hosts": hosts,
        "description": spec.get("description") or "",
        "user": (meta.get("annotations") or {}).get(SSH_USER_ANNOTATION),
        "cache_dir": None,
        "sparkrun_cache_dir": None,
        "plugins": {},
        "transfer_mode": None,
        "transfer_interface": None,
        "topology": None,
        "fabric_interfaces": [],
        "mgmt_interface": None,
        "distribution": {
            "model": {
                "preserve_perms": True,
                "skip_fan_out": False,
                "enabled": True,
                "validation": None,
                "file_selection": None,
                "provider": None,
                "fallback": None,
            },
            "tuning": None,
        },
        "hosts_hardware": {host: _hardware(nodes.get(host), gpu_resource) for host in hosts},
        "executor": "kubernetes",
        "runtime_cache": None,
        "max_gpu_memory_utilization": None,
        "accelerator_memory_limits": {},
        "sync_source": None,
        "transport": "kubernetes",
        "provider_ref": f"{INFERENCE_CLUSTER.kind}/{meta.get('name', '')}",
        "offline": None,
    }


async def _nodes(ctx: OperationContext) -> dict[str, ObservedNode]:
    from sparkrun_operator.k8s.resources import NODES

    return {n.name: n for n in map(kube.node_view, await ctx.rest.list(NODES))}


async def create(ctx: OperationContext, args: dict[str, Any]) -> Any:
    name = kube.check_name(args["name"], "cluster")
    hosts = list(dict.fromkeys(args["hosts"]))
    meta: dict[str, Any] = {"name": name, "labels": {"app.kubernetes.io/managed-by": MANAGED_BY}}
    if args.get("user"):
        meta["annotations"] = {SSH_USER_ANNOTATION: args["user"]}
    spec: dict[str, Any] = {"nodes": {"names": hosts}}
    if args.get("description"):
        spec["description"] = args["description"]
    body = {"apiVersion": API_VERSION, "kind": INFERENCE_CLUSTER.kind, "metadata": meta, "spec": spec}
    try:
        created = await ctx.rest.create(kube.CLUSTERS, body)
    except k8s_errors.KubeError as error:
        if isinstance(error, k8s_errors.KubeAlreadyExists):
            raise Conflict(f"Cluster {name} already exists") from error
        raise
    await ctx.feedback(f"Created InferenceCluster {name}", stage="create", host=None)
    return cluster_definition(created, await _nodes(ctx))


async def update(ctx: OperationContext, args: dict[str, Any]) -> Any:
    name = args["name"]
    await kube.get_cluster(ctx.rest, name)
    patch: dict[str, Any] = {}
    if "hosts" in args:
        patch.setdefault("spec", {})["nodes"] = {
            "names": list(dict.fromkeys(args["hosts"])),
            "selector": None,
        }
    if "description" in args:
        patch.setdefault("spec", {})["description"] = args["description"] or None
    if "user" in args:
        patch["metadata"] = {"annotations": {SSH_USER_ANNOTATION: args["user"] or None}}
    if patch:
        updated = await ifmatch.merge_patch(ctx.rest, kube.CLUSTERS, name, None, patch, ctx.if_match)
    else:
        updated = await kube.get_cluster(ctx.rest, name)
        await ifmatch.unchanged(ctx.rest, kube.CLUSTERS, updated, ctx.if_match)
    return cluster_definition(updated, await _nodes(ctx))


async def delete(ctx: OperationContext, args: dict[str, Any]) -> Any:
    found = await ctx.rest.get(kube.CLUSTERS, args["name"])
    # NB: the cluster read, by its UID: a same-named one created since is not deleted (409)
    if found is None or not await ctx.rest.delete(
        kube.CLUSTERS, args["name"], uid=found["metadata"].get("uid"), propagation="Background"
    ):
        raise NotFound(f"Unknown cluster: {args['name']}")
    return None


async def set_default(ctx: OperationContext, args: dict[str, Any]) -> Any:
    name = args.get("name")
    clusters = await ctx.rest.list(kube.CLUSTERS)
    if name is not None and not any(c["metadata"]["name"] == name for c in clusters):
        raise NotFound(f"Unknown cluster: {name}")
    # NB: the named cluster first: under If-Match its write is the conditional one, and a refusal
    # must leave the others' defaults as they were
    clusters.sort(key=lambda c: c["metadata"]["name"] != name)
    if name is not None and ctx.if_match is not None:
        target = clusters[0]
        if target.get("spec", {}).get("default"):
            await ifmatch.unchanged(ctx.rest, kube.CLUSTERS, target, ctx.if_match)
        else:
            await ifmatch.merge_patch(
                ctx.rest, kube.CLUSTERS, name, None, {"spec": {"default": True}}, ctx.if_match
            )
        clusters = clusters[1:]
    for cluster in clusters:
        current = cluster["metadata"]["name"]
        wanted = current == name
        if bool(cluster.get("spec", {}).get("default")) != wanted:
            await ctx.rest.merge_patch(kube.CLUSTERS, current, {"spec": {"default": wanted}})
    return None


async def list_clusters(ctx: OperationContext, args: dict[str, Any]) -> Any:
    rows = []
    for cluster in sorted(
        await ctx.rest.list(kube.CLUSTERS, cached=True), key=lambda c: c["metadata"]["name"]
    ):
        hosts = kube.declared_hosts(cluster)
        rows.append(
            {
                "name": cluster["metadata"]["name"],
                "description": cluster.get("spec", {}).get("description") or "",
                "host_count": len(hosts),
                "hosts": hosts,
                "default": bool(cluster.get("spec", {}).get("default")),
            }
        )
    return rows


def _workload_row(pods: list[kube.GpuPod], workload: str) -> dict[str, Any]:
    ranks = sum(max(p.gpus, 1) for p in pods)
    return {
        "workload_id": workload,
        "intent_id": None,
        "recipe_name": None,
        "runtime_name": "vllm",
        "started_at": min((p.started for p in pods if p.started), default=None),
        "ranks_on_host": ranks,
        "container_ids": [f"{p.namespace}/{p.name}" for p in pods],
        "memory_used_gb": None,
        "util_fraction": None,
        "containers": [
            {
                "name": f"{p.namespace}/{p.name}",
                "role": p.role or "pod",
                "status": p.phase.lower(),
                "image": p.image,
                "executor": "kubernetes",
                "allocations": [],
            }
            for p in pods
        ],
    }


async def _observation(ctx: OperationContext, args: dict[str, Any]) -> tuple[dict[str, Any], kube.Occupancy]:
    seen = await kube.occupancy(ctx.rest, namespaces=ctx.settings.pod_namespaces)
    hosts, cluster = await kube.cluster_hosts(
        ctx.rest, hosts=args.get("hosts"), cluster=args.get("cluster"), occupancy_=seen
    )
    rows, errors = [], {}
    for host in hosts:
        node = seen.nodes.get(host)
        if node is None:
            errors[host] = "node not found"
            continue
        if not node.ready:
            errors[host] = "node is not Ready"
        pods = seen.pods_on(host)
        by_workload: dict[str, list[kube.GpuPod]] = {}
        for pod in pods:
            if pod.gpus > 0 or pod.workload:
                key = f"{pod.namespace}/{pod.workload}" if pod.workload else f"{pod.namespace}/{pod.name}"
                by_workload.setdefault(key, []).append(pod)
        used = sum(p.gpus for p in pods)
        allocatable = node.allocatable.get(DEFAULT_GPU_RESOURCE, 0)
        rows.append(
            {
                "host": host,
                "workloads": [_workload_row(group, wid) for wid, group in sorted(by_workload.items())],
                "used_slots": used,
                "free_slots": max(0, allocatable - used),
                "free_memory_gb": None,
                "gpus": [],
            }
        )
    result = {
        "hosts": rows,
        "queried_at": seen.observed_at,
        "executor": "kubernetes",
        "errors": errors,
        "coverage": [
            {
                "target": cluster,
                "status_scope": "cluster" if cluster else "hosts",
                "requested_hosts": list(args.get("hosts") or []),
                "hosts": hosts,
                "ssh_user": None,
                "ssh_kwargs": None,
            }
        ],
    }
    return result, seen


async def observe(ctx: OperationContext, args: dict[str, Any]) -> Any:
    result, _ = await _observation(ctx, args)
    return result


async def report(ctx: OperationContext, args: dict[str, Any]) -> Any:
    observed, _ = await _observation(ctx, args)
    groups: dict[str, Any] = {}
    idle = []
    for row in observed["hosts"]:
        if not row["workloads"]:
            idle.append(row["host"])
        for workload in row["workloads"]:
            group = groups.setdefault(
                workload["workload_id"],
                {"workload_id": workload["workload_id"], "hosts": [], "containers": 0},
            )
            group["hosts"].append(row["host"])
            group["containers"] += len(workload["containers"])
    return {"groups": groups, "solo_entries": [], "idle_hosts": idle}


async def capacity(ctx: OperationContext, args: dict[str, Any]) -> Any:
    observed, seen = await _observation(ctx, {"cluster": args["cluster"]})
    by_host = {row["host"]: row for row in observed["hosts"]}
    hosts, _ = await kube.cluster_hosts(ctx.rest, hosts=None, cluster=args["cluster"], occupancy_=seen)
    rows = []
    for host in hosts:
        node = seen.nodes.get(host)
        row = by_host.get(host)
        rows.append(
            {
                "host": host,
                "reachable": bool(node and node.ready),
                "free_slots": row["free_slots"] if row else None,
                "used_slots": row["used_slots"] if row else None,
                "workloads": len(row["workloads"]) if row else None,
            }
        )
    return {"cluster": args["cluster"], "observed_at": seen.observed_at, "hosts": rows, "advisory": True}


EXECUTORS: dict[str, Executor] = {
    "cluster.create": create,
    "cluster.update": update,
    "cluster.delete": delete,
    "cluster.default": set_default,
    "cluster.observe": observe,
    "cluster.report": report,
    "catalog.clusters": list_clusters,
    "catalog.capacity": capacity,
}

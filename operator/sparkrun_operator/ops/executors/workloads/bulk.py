"""``workloads.stop_matching`` and ``workloads.stop_all``: the broad selector-based controls
(no owner guard)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sparkrun_operator.k8s import errors as k8s_errors
from sparkrun_operator.ops import kube
from sparkrun_operator.ops.errors import Invalid
from sparkrun_operator.ops.executors.workloads.request import parse_overrides
from sparkrun_operator.ops.invocation import OperationContext
from sparkrun_operator.ops.settings import Settings


async def _selected(
    ctx: OperationContext, args: Mapping[str, Any]
) -> tuple[list[dict[str, Any]], list[str], kube.Occupancy]:
    """Workloads matching stop_matching/stop_all selectors, and the hosts they target."""
    seen = await kube.occupancy(ctx.rest, namespaces=ctx.settings.pod_namespaces)
    hosts: list[str] | None = None
    if args.get("hosts") or args.get("cluster"):
        hosts, _ = await kube.cluster_hosts(
            ctx.rest, hosts=args.get("hosts"), cluster=args.get("cluster"), occupancy_=seen
        )
    selected = []
    for workload in await ctx.rest.list(kube.WORKLOADS, ctx.namespace):
        meta, spec = workload["metadata"], workload.get("spec") or {}
        if args.get("workload_id") and args["workload_id"] not in (
            kube.workload_id_of(workload),
            meta["name"],
        ):
            continue
        if args.get("recipe") and (spec.get("recipe") or {}).get("name") != args["recipe"]:
            continue
        if hosts is not None:
            on = {
                p.node for p in seen.pods if p.workload == meta["name"] and p.namespace == meta["namespace"]
            }
            in_cluster = args.get("cluster") and spec.get("cluster") == args["cluster"]
            if not (on & set(hosts)) and not in_cluster:
                continue
        selected.append(workload)
    return selected, hosts or [], seen


async def _delete_all(
    ctx: OperationContext, workloads: list[dict[str, Any]], seen: kube.Occupancy
) -> tuple[int, set[str], list[str]]:
    removed, errors = 0, []
    hosts: set[str] = set()
    for workload in workloads:
        meta = workload["metadata"]
        pods = [p for p in seen.pods if p.workload == meta["name"] and p.namespace == meta["namespace"]]
        try:
            await ctx.rest.delete(
                kube.WORKLOADS, meta["name"], ctx.namespace, uid=meta.get("uid"), propagation="Background"
            )
        except k8s_errors.KubeError as error:
            errors.append(f"{meta['name']}: {error.message or error.status}")
            continue
        removed += len(pods)
        hosts.update(p.node for p in pods)
        await ctx.feedback(f"Deleted InferenceWorkload {meta['name']}", stage="stop")
    return removed, hosts, errors


def check_stop_matching(args: Mapping[str, Any], _settings: Settings | None = None) -> None:
    """A selector is required, and overrides (which narrow a recipe match) must be known ones."""
    if not any(args.get(k) for k in ("workload_id", "recipe", "hosts", "cluster")):
        raise Invalid("Provide workload_id, recipe, hosts or cluster to select the workloads to stop")
    parse_overrides(args)


async def stop_matching(ctx: OperationContext, args: dict[str, Any]) -> Any:
    check_stop_matching(args)
    selected, hosts, seen = await _selected(ctx, args)
    removed, touched, errors = await _delete_all(ctx, selected, seen)
    return {
        "workload_id": args.get("workload_id") or ",".join(kube.workload_id_of(w) for w in selected),
        "hosts_targeted": sorted(set(hosts) | touched),
        "containers_removed": removed,
        "errors": errors,
        "hosts_failed": [],
    }


async def stop_all(ctx: OperationContext, args: dict[str, Any]) -> Any:
    selected, hosts, seen = await _selected(ctx, args)
    groups = {}
    for workload in selected:
        meta = workload["metadata"]
        members = [
            [p.node, f"{p.namespace}/{p.name}"]
            for p in seen.pods
            if p.workload == meta["name"] and p.namespace == meta["namespace"]
        ]
        groups[kube.workload_id_of(workload)] = {
            "workload_id": kube.workload_id_of(workload),
            "members": members,
            "meta": {"namespace": meta["namespace"], "name": meta["name"]},
        }
    busy = {m[0] for g in groups.values() for m in g["members"]}
    discovered = {
        "groups": groups,
        "solo_entries": [],
        "errors": {h: "node not found" for h in hosts if h not in seen.nodes},
        "idle_hosts": [h for h in hosts if h not in busy],
        "pending_ops": [],
        "total_containers": sum(len(g["members"]) for g in groups.values()),
        "host_count": len(hosts),
        "container_executors": {},
        "preparing_hosts": [],
        "pending_by_host": {},
        "coverage": [
            {
                "target": args.get("cluster"),
                "status_scope": "cluster" if args.get("cluster") else "hosts",
                "requested_hosts": list(args.get("hosts") or []),
                "hosts": hosts,
                "ssh_user": None,
                "ssh_kwargs": None,
            }
        ],
    }
    if args.get("dry_run"):
        return {
            "discovered": discovered,
            "jobs_stopped": 0,
            "containers_removed": 0,
            "hosts_stopped": [],
            "hosts_failed": {},
            "discovery_errors": discovered["errors"],
            "dry_run": True,
        }
    removed, touched, errors = await _delete_all(ctx, selected, seen)
    return {
        "discovered": discovered,
        "jobs_stopped": len(selected) - len(errors),
        "containers_removed": removed,
        "hosts_stopped": sorted(touched),
        "hosts_failed": {e.split(":", 1)[0]: e for e in errors},
        "discovery_errors": discovered["errors"],
        "dry_run": False,
    }

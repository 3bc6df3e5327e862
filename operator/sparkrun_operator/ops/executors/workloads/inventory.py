"""``workloads.*`` inventory: the rows of ``list``/``inventory``/``status``, ``find_intent``,
``plugins`` and ``endpoints``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sparkrun_operator.ops import kube
from sparkrun_operator.ops.executors.endpoints import endpoint_entry, recipe_specs, served_model, sweep
from sparkrun_operator.ops.invocation import OperationContext
from sparkrun_operator.plan import wake as wakeup

INVENTORY_LIMIT = 256


def state(workload: Mapping[str, Any]) -> str:
    spec, status = workload.get("spec") or {}, workload.get("status") or {}
    desired = spec.get("state", "Running")
    if desired == "Stopped":
        return "stopped"
    if desired == "Sleeping":
        return "sleeping"
    if kube.is_ready(workload):
        return "ready"
    if spec.get("replicas") == 0:  # NB: the idle policy's zero a request wakes, else the user's own
        return "scaled_to_zero" if wakeup.resting_of(dict(workload)) == "Zero" else "stopped"
    phase = str(status.get("phase") or "Pending").lower()
    return {"running": "ready", "degraded": "degraded", "failed": "failed"}.get(phase, "starting")


def workload_row(workload: Mapping[str, Any], manager: str) -> dict[str, Any]:
    """The inventory row of a workload (inventory, status, sleep, wake, ensure_ready)."""
    spec, status = workload.get("spec") or {}, workload.get("status") or {}
    owner = spec.get("manager") or ""
    actions = ["status", "stop", "reconcile"]
    if (spec.get("engine") or {}).get("enableSleepMode"):
        actions[1:1] = ["sleep", "wake"]
    elif wakeup.idle_zero(dict(spec)):
        actions[1:1] = ["wake"]
    return {
        "workload_id": kube.workload_id_of(workload),
        "cluster_name": spec.get("cluster"),
        "recipe_revision": status.get("recipeRevision") or "",
        "owner": owner,
        "owned": owner == manager,
        "provider": "kubernetes",
        "actions": actions,
        "state": state(workload),
        "observation": "recorded",
    }


def placement_token(workload_id: str) -> str:
    parts = workload_id.split("_")
    return parts[2] if len(parts) == 3 else ""


async def list_workloads(ctx: OperationContext, args: dict[str, Any]) -> Any:
    workloads = sorted(
        await ctx.rest.list(kube.WORKLOADS, ctx.namespace, cached=True),
        key=lambda w: str(w["metadata"].get("creationTimestamp", "")),
        reverse=True,
    )
    if "limit" in args:
        workloads = workloads[: args["limit"]]
    recipes = await recipe_specs(ctx)
    rows: list[dict[str, Any]] = []
    for workload in workloads:
        meta, spec, status = workload["metadata"], workload.get("spec") or {}, workload.get("status") or {}
        workload_id = kube.workload_id_of(workload)
        found = served_model(workload, recipes)
        rows.append(
            {
                "workload_id": workload_id,
                "hosts": [],
                "started_at": kube.epoch(meta.get("creationTimestamp")),
                "metadata": {
                    "namespace": meta.get("namespace"),
                    "name": meta.get("name"),
                    "phase": status.get("phase"),
                    "state": spec.get("state", "Running"),
                    "cluster": spec.get("cluster"),
                    "manager": spec.get("manager"),
                    "model": found.model if found else (spec.get("model") or {}).get("name"),
                    "recipe_revision": status.get("recipeRevision"),
                },
                "intent_id": status.get("intentId"),
                "placement_token": placement_token(workload_id) or None,
                "recipe": (spec.get("recipe") or {}).get("name"),
                "runtime": "vllm",
            }
        )
    return rows


async def inventory(ctx: OperationContext, args: dict[str, Any]) -> Any:
    workloads = await ctx.rest.list(kube.WORKLOADS, ctx.namespace)
    rows = [workload_row(w, ctx.manager) for w in sorted(workloads, key=lambda w: w["metadata"]["name"])]
    return {
        "complete": len(rows) <= INVENTORY_LIMIT,
        "workloads": rows[:INVENTORY_LIMIT],
        "providers": [{"name": "kubernetes", "version": 1}],
    }


async def find_intent(ctx: OperationContext, args: dict[str, Any]) -> Any:
    recipes = await recipe_specs(ctx)
    for workload in await ctx.rest.list(kube.WORKLOADS, ctx.namespace):
        status = workload.get("status") or {}
        if status.get("intentId") == args["intent_id"] and kube.is_ready(workload):
            return {
                "workload_id": kube.workload_id_of(workload),
                "intent_id": args["intent_id"],
                "hosts": list(args["hosts"]),
                "endpoint": endpoint_entry(workload, recipes),
            }
    return None


async def plugins(ctx: OperationContext, args: dict[str, Any]) -> Any:
    return {
        "plugins": [
            {
                "name": "kubernetes",
                "plugin_id": "k8s",
                "enabled": True,
                "loaded": True,
                "version": "1",
                "lifecycle": True,
            }
        ]
    }


async def endpoints(ctx: OperationContext, args: dict[str, Any]) -> Any:
    workloads = await ctx.rest.list(kube.WORKLOADS, ctx.namespace)
    recipes = await recipe_specs(ctx)
    rows = []
    for workload in workloads:
        entry = endpoint_entry(workload, recipes)
        if args.get("workload_id") and args["workload_id"] not in (
            entry["workload_id"],
            workload["metadata"]["name"],
        ):
            continue
        if args.get("recipe_revision") and entry["recipe_revision"] != args["recipe_revision"]:
            continue
        if args.get("cluster_candidates") and entry["cluster_name"] not in args["cluster_candidates"]:
            continue
        rows.append(entry)
    return sweep(rows, mode="live", hosts=[])

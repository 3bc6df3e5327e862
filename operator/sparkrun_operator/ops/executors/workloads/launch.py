"""``workloads.run`` and ``workloads.ensure_ready``: create (or adopt) the InferenceWorkload and
wait for it."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from sparkrun_operator.api.meta import API_VERSION
from sparkrun_operator.api.recipe import RecipeSpec
from sparkrun_operator.api.resources import INFERENCE_WORKLOAD
from sparkrun_operator.api.workload import ENGINE_PORT
from sparkrun_operator.k8s import errors as k8s_errors
from sparkrun_operator.k8s.resources import PODS
from sparkrun_operator.ops import kube
from sparkrun_operator.ops.errors import Conflict, DaemonError, Invalid
from sparkrun_operator.ops.executors.diagnostics import collect_bundle
from sparkrun_operator.ops.executors.endpoints import endpoint_entry, recipe_specs
from sparkrun_operator.ops.executors.workloads.inventory import placement_token, workload_row
from sparkrun_operator.ops.executors.workloads.lifecycle import wait_for
from sparkrun_operator.ops.executors.workloads.request import (
    MANAGED_BY,
    cluster_for,
    plan_request,
    preview_id,
    recipe_object,
    warn_ignored,
    workload_name,
    workload_spec,
)
from sparkrun_operator.ops.invocation import OperationContext
from sparkrun_operator.render import keys, names


def _same_request(existing: Mapping[str, Any], spec: Mapping[str, Any]) -> bool:
    current = existing.get("spec") or {}
    for key, value in spec.items():
        if key == "manager":
            continue
        have = current.get(key)
        if isinstance(value, dict) and isinstance(have, dict):
            if any(have.get(k) != v for k, v in value.items()):
                return False
        elif have != value:
            return False
    return True


def _run_result(
    workload: Mapping[str, Any],
    *,
    recipe_obj: Mapping[str, Any],
    hosts: list[str],
    dry_run: bool,
    already: bool,
    ctx: OperationContext,
) -> dict[str, Any]:
    meta, status = workload.get("metadata") or {}, workload.get("status") or {}
    name = meta.get("name", "")
    workload_id = status.get("workloadId")
    intent = status.get("intentId")
    if not workload_id:
        workload_id, intent, _ = preview_id(ctx, recipe_obj, name, meta.get("uid"))
    recipe_spec = recipe_obj.get("spec") or {}
    revision = status.get("recipeRevision") or (recipe_obj.get("status") or {}).get("revision") or ""
    return {
        "workload_id": workload_id,
        "host_list": hosts,
        "placement": None,
        "executor": "kubernetes",
        "started_at": kube.epoch(meta.get("creationTimestamp")) or time.time(),
        "dry_run": dry_run,
        "is_solo": ((workload.get("spec") or {}).get("topology") or {}).get(
            "nodes", recipe_spec.get("minNodes", 1)
        )
        == 1,
        "rc": 0,
        "serve_command": f"vllm serve {recipe_spec.get('model', '')}".strip(),
        "container_image": recipe_spec.get("container") or "",
        "serve_port": ENGINE_PORT,
        "effective_cache_dir": "",
        "metadata": {
            "namespace": meta.get("namespace", ctx.namespace),
            "name": name,
            "uid": meta.get("uid"),
            "kind": INFERENCE_WORKLOAD.kind,
            "manager": (workload.get("spec") or {}).get("manager"),
            "endpoint": f"http://{names.service_name(workload=name)}.{ctx.namespace}.svc:{ENGINE_PORT}",
            "phase": status.get("phase"),
        },
        "timeline": {e.get("stage"): e.get("time") for e in status.get("startup") or ()},
        "intent_id": intent or "",
        "placement_token": placement_token(workload_id),
        "already_running": already,
        "recipe_fingerprint": revision,
        "runtime": "vllm",
        "scheduler": "kubernetes",
    }


async def launch(
    ctx: OperationContext, args: dict[str, Any], *, confirm: bool
) -> tuple[dict[str, Any], dict[str, Any], bool, list[str]]:
    """Create (or find) the workload; returns (object, recipe object, already running, hosts)."""
    recipe_obj = await recipe_object(ctx, args["recipe"])
    recipe = RecipeSpec.model_validate(recipe_obj.get("spec") or {})
    name = workload_name(args)
    problem = names.check_workload_name(workload=name, nodes=recipe.max_nodes or recipe.min_nodes)
    if problem:
        raise Invalid(problem)
    cluster = await cluster_for(ctx, args, create=False)
    spec = workload_spec(ctx, args, recipe, cluster=cluster, recipe_name=recipe_obj["metadata"]["name"])
    existing = await ctx.rest.get(kube.WORKLOADS, name, ctx.namespace)
    if existing is not None:
        if not _same_request(existing, spec):
            raise Conflict(
                f"InferenceWorkload {name} already exists with different settings; stop it first or pass "
                "workload_id_override"
            )
        await ctx.feedback(f"InferenceWorkload {name} already exists; adopting it", stage="launch")
        hosts, _ = await kube.cluster_hosts(ctx.rest, hosts=args.get("hosts"), cluster=cluster)
        return existing, recipe_obj, True, hosts
    if confirm and not await ctx.ask(
        "approval", f"Launch recipe {args['recipe']} as InferenceWorkload {name}?", default=False
    ):
        raise DaemonError("Launch declined", type_name="InterruptedError")
    cluster = await cluster_for(ctx, args, create=True)
    if cluster:
        spec["cluster"] = cluster
    body = {
        "apiVersion": API_VERSION,
        "kind": INFERENCE_WORKLOAD.kind,
        "metadata": {
            "name": name,
            "namespace": ctx.namespace,
            "labels": {"app.kubernetes.io/managed-by": MANAGED_BY},
            "annotations": {keys.LABEL_DAEMON_JOB: ctx.job_id or ""},
        },
        "spec": spec,
    }
    try:
        created = await ctx.rest.create(kube.WORKLOADS, body, ctx.namespace)
    except k8s_errors.KubeError as error:
        if isinstance(error, k8s_errors.KubeAlreadyExists):
            raise Conflict(f"InferenceWorkload {name} was created concurrently") from error
        if isinstance(error, (k8s_errors.KubeBadRequest, k8s_errors.KubeInvalid)):
            raise Invalid(f"InferenceWorkload {name} was refused: {error.message}") from error
        raise
    await ctx.feedback(f"Created InferenceWorkload {name}", stage="launch", activity="create")
    hosts, _ = await kube.cluster_hosts(ctx.rest, hosts=args.get("hosts"), cluster=cluster)
    return created, recipe_obj, False, hosts


async def run(ctx: OperationContext, args: dict[str, Any]) -> Any:
    await warn_ignored(ctx, args)
    if args.get("dry_run"):
        planned = await plan_request(ctx, args)
        preview = {
            "metadata": {"name": planned["name"], "namespace": ctx.namespace},
            "spec": planned["spec"],
            "status": {"workloadId": planned["workload_id"], "intentId": planned["intent"]},
        }
        return _run_result(
            preview,
            recipe_obj=planned["recipe_obj"],
            hosts=planned["hosts"],
            dry_run=True,
            already=False,
            ctx=ctx,
        )
    workload, recipe_obj, already, hosts = await launch(ctx, args, confirm=bool(args.get("confirm")))
    name = workload["metadata"]["name"]
    try:
        if args.get("wait_ready", True):
            workload = await wait_for(ctx, name, until="ready", limit=ctx.settings.ready_timeout)
        else:
            workload = await ctx.rest.get(kube.WORKLOADS, name, ctx.namespace) or workload
    finally:
        if args.get("collect_diagnostics"):
            await collect_bundle(ctx, {"workload_id": name})
    placed = await _placed_hosts(ctx, name)
    return _run_result(
        workload, recipe_obj=recipe_obj, hosts=placed or hosts, dry_run=False, already=already, ctx=ctx
    )


async def _placed_hosts(ctx: OperationContext, name: str) -> list[str]:
    """Nodes the workload's pods are bound to (leader first)."""
    pods = await ctx.rest.list(PODS, ctx.namespace, label_selector=f"{keys.LABEL_WORKLOAD}={name}")
    pods.sort(
        key=lambda p: (
            (p["metadata"].get("labels") or {}).get(keys.LABEL_ROLE) != keys.ROLE_LEADER,
            p["metadata"]["name"],
        )
    )
    return list(dict.fromkeys(p["spec"].get("nodeName") for p in pods if p.get("spec", {}).get("nodeName")))


async def ensure_ready(ctx: OperationContext, args: dict[str, Any]) -> Any:
    timeout = float(args.get("timeout") or ctx.settings.ready_timeout)
    recipe_obj = await recipe_object(ctx, args["recipe"])
    wanted = args.get("recipe_revision")
    name = workload_name(args)
    existing = await ctx.rest.get(kube.WORKLOADS, name, ctx.namespace)
    candidates = args.get("cluster_candidates") or []
    adopted = False
    if existing is not None:
        status = existing.get("status") or {}
        if wanted and status.get("recipeRevision") and status["recipeRevision"] != wanted:
            raise Conflict(
                f"InferenceWorkload {name} serves recipe revision {status['recipeRevision']}, not {wanted}",
                attrs={"reason": "revision_mismatch"},
            )
        if (existing.get("spec") or {}).get("state", "Running") != "Running":
            if (existing.get("spec") or {}).get("manager") != ctx.manager:
                raise Conflict(f"InferenceWorkload {name} is owned by another manager; it cannot be woken")
            await ctx.rest.merge_patch(kube.WORKLOADS, name, {"spec": {"state": "Running"}}, ctx.namespace)
            await ctx.feedback(f"Waking InferenceWorkload {name}", stage="wake")
        adopted = True
    else:
        current = (recipe_obj.get("status") or {}).get("revision")
        if wanted and current and current != wanted:
            raise Conflict(
                f"Recipe {args['recipe']} is at revision {current}, not {wanted}",
                attrs={"reason": "revision_mismatch"},
            )
        launch_args = {"recipe": args["recipe"], "overrides": args.get("overrides") or {}}
        if candidates:
            launch_args["cluster"] = candidates[0]
        existing, _, adopted, _ = await launch(ctx, launch_args, confirm=False)
    ready = await wait_for(ctx, name, until="ready", limit=timeout)
    return {
        "state": "ready",
        "workload_id": kube.workload_id_of(ready),
        "endpoint": endpoint_entry(ready, await recipe_specs(ctx), with_recipe=False),
        "adopted": adopted,
        "workload": workload_row(ready, ctx.manager),
        "observed_at": time.time(),
    }

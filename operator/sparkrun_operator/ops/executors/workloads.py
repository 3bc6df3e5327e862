"""``workloads.*``: daemon workloads are InferenceWorkloads in the API namespace.

Launch (``workloads.run``, ``workloads.ensure_ready``) creates an ``InferenceWorkload`` serving
the Recipe named by ``recipe`` (a Recipe object in the namespace), owned by the caller's manager
(``spec.manager``); the workload is named after the recipe (or ``workload_id_override``). The
daemon's placement arguments map as follows:

- ``cluster`` -> ``spec.cluster``; ``hosts`` -> an ad-hoc InferenceCluster ``hosts-<digest>``
  whose members are those nodes (created once, reused);
- ``overrides``: ``tensor_parallel``/``tp``, ``pipeline_parallel``/``pp``, ``max_model_len``,
  ``gpu_memory_utilization``, ``served_model_name``, ``enable_sleep_mode`` (other keys are
  refused: set them in the Recipe); ``solo`` -> one node;
- host-execution settings (transfer modes, cache directories, ports, executors, docker options
  ...) have no Kubernetes meaning; they are ignored with a ``warning`` event naming them;
- ``confirm: true`` asks an approval prompt before anything is created; ``wait_ready`` (default
  true) waits for the Ready condition, reporting the startup timeline as feedback events;
  ``dry_run`` creates nothing; ``collect_diagnostics`` attaches a diagnostic bundle.

The workload id is ``status.workloadId`` (``sparkrun_<intent>_<placement>``, placement token
from the object's namespace, name and uid, as the workload controller computes it). Guarded
operations (stop, sleep, wake, reconcile, status) address a workload by that id and check the
recipe name, the recipe revision and, except ``status``, that the caller's manager owns it.
``stop`` deletes the workload (UID precondition); ``sleep``/``wake`` set ``spec.state``.
``stop_matching`` and ``stop_all`` are the broad selector-based controls without owner guard.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
import time
from collections.abc import Mapping
from typing import Any

from sparkrun_operator.api.meta import API_VERSION
from sparkrun_operator.api.recipe import RecipeSpec
from sparkrun_operator.api.resources import INFERENCE_CLUSTER, INFERENCE_WORKLOAD
from sparkrun_operator.api.workload import ENGINE_PORT, InferenceWorkloadSpec
from sparkrun_operator.k8s import errors as k8s_errors
from sparkrun_operator.ops import kube
from sparkrun_operator.ops.context import Executor, OperationContext
from sparkrun_operator.ops.errors import Conflict, DaemonError, Invalid, NotFound, OperationTimeout
from sparkrun_operator.recipe import identity as recipe_identity
from sparkrun_operator.recipe.resolve import resolve
from sparkrun_operator.render import keys, names

__all__ = ["EXECUTORS", "endpoint_entry", "recipe_specs", "served_names", "workload_row"]

MANAGED_BY = keys.MANAGED_BY_DAEMON_API
INVENTORY_LIMIT = 256
_OVERRIDES = {
    "tensor_parallel": "tensor_parallel",
    "tp": "tensor_parallel",
    "pipeline_parallel": "pipeline_parallel",
    "pp": "pipeline_parallel",
    "max_model_len": "max_model_len",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "served_model_name": "served_model_name",
    "enable_sleep_mode": "enable_sleep_mode",
}
#: run/plan arguments that only steer host execution (SSH, Docker, file transfer).
_HOST_ONLY = (
    "scheduler",
    "transfer_mode",
    "cache_dir",
    "offline",
    "runtime_cache",
    "auto_port",
    "ray_port",
    "dashboard_port",
    "dashboard",
    "init_port",
    "executor",
    "executor_config",
    "rootful",
    "transfer_interface",
    "local_cache_dir",
    "sync_tuning",
    "extra_docker_opts",
    "topology",
    "preserve_model_perms",
    "skip_model_fan_out",
    "strategy_options",
    "post_launch",
)


# ---------------------------------------------------------------------------------------------
# Shapes
# ---------------------------------------------------------------------------------------------


def _state(workload: Mapping[str, Any]) -> str:
    spec, status = workload.get("spec") or {}, workload.get("status") or {}
    desired = spec.get("state", "Running")
    if desired == "Stopped":
        return "stopped"
    if desired == "Sleeping":
        return "sleeping"
    if kube.is_ready(workload):
        return "ready"
    phase = str(status.get("phase") or "Pending").lower()
    return {"running": "ready", "degraded": "degraded", "failed": "failed"}.get(phase, "starting")


def workload_row(workload: Mapping[str, Any], manager: str) -> dict[str, Any]:
    """The inventory row of a workload (inventory, status, sleep, wake, ensure_ready)."""
    spec, status = workload.get("spec") or {}, workload.get("status") or {}
    owner = spec.get("manager") or ""
    actions = ["status", "stop", "reconcile"]
    if (spec.get("engine") or {}).get("enableSleepMode"):
        actions[1:1] = ["sleep", "wake"]
    return {
        "workload_id": kube.workload_id_of(workload),
        "cluster_name": spec.get("cluster"),
        "recipe_revision": status.get("recipeRevision") or "",
        "owner": owner,
        "owned": owner == manager,
        "provider": "kubernetes",
        "actions": actions,
        "state": _state(workload),
        "observation": "recorded",
    }


def served_names(
    workload: Mapping[str, Any], recipes: Mapping[str, RecipeSpec]
) -> tuple[str, str, list[str]]:
    """``(model, served name, aliases)`` the workload's engine serves (the recipe resolved)."""
    spec = workload.get("spec") or {}
    model = spec.get("model") or {}
    recipe = recipes.get(((spec.get("recipe") or {}).get("name")) or "")
    aliases = list(model.get("aliases") or [])
    try:
        resolution = resolve(workload=InferenceWorkloadSpec.model_validate(spec), recipe=recipe)
    except ValueError:
        resolution = None
    if resolution is not None and resolution.spec is not None:
        return resolution.spec.model, resolution.spec.served_name, aliases
    name = model.get("servedName") or model.get("name") or (recipe.model if recipe else "")
    return model.get("name") or name, name, aliases


async def recipe_specs(ctx: OperationContext) -> dict[str, RecipeSpec]:
    """The namespace's Recipes by name (for resolving what workloads serve)."""
    out: dict[str, RecipeSpec] = {}
    for obj in await ctx.rest.list(kube.RECIPES, ctx.namespace, cached=True):
        try:
            out[obj["metadata"]["name"]] = RecipeSpec.model_validate(obj.get("spec") or {})
        except ValueError:
            continue
    return out


def endpoint_entry(
    workload: Mapping[str, Any], recipes: Mapping[str, RecipeSpec], *, with_recipe: bool = True
) -> dict[str, Any]:
    """A credential-free endpoint of a workload (discovery.snapshot / workloads.endpoints)."""
    meta, spec, status = (
        workload.get("metadata") or {},
        workload.get("spec") or {},
        workload.get("status") or {},
    )
    model, served, aliases = served_names(workload, recipes)
    entry: dict[str, Any] = {
        "workload_id": kube.workload_id_of(workload),
        "model": model,
        "served_model_name": served or None,
        "host": f"{names.service_name(workload=meta.get('name', ''))}.{meta.get('namespace', '')}.svc",
        "port": ENGINE_PORT,
        "healthy": kube.is_ready(workload),
        "actual_models": [served, *aliases] if served else list(aliases),
        "max_model_len": (spec.get("engine") or {}).get("maxModelLen"),
        "cluster_name": spec.get("cluster"),
        "recipe_revision": status.get("recipeRevision") or "",
        "native_protocols": ["openai"],
        "capabilities": ["text-generation"],
        "runtime": "vllm",
        "owner": spec.get("manager") or "",
    }
    if with_recipe:
        entry["recipe_name"] = (spec.get("recipe") or {}).get("name") or ""
    return entry


def _placement_token(workload_id: str) -> str:
    parts = workload_id.split("_")
    return parts[2] if len(parts) == 3 else ""


# ---------------------------------------------------------------------------------------------
# Resolution helpers
# ---------------------------------------------------------------------------------------------


async def _recipe(ctx: OperationContext, name: str) -> dict[str, Any]:
    found = await ctx.rest.get(kube.RECIPES, name, ctx.namespace)
    if found is None:
        raise NotFound(f"Unknown recipe: {name} (no Recipe {name!r} in namespace {ctx.namespace})")
    return found


def _workload_name(args: Mapping[str, Any]) -> str:
    override = args.get("workload_id_override")
    base = str(override or args["recipe"]).lower()
    slug = re.sub(r"[^a-z0-9-]+", "-", base).strip("-") or "workload"
    if not slug[0].isalpha():
        slug = "w-" + slug
    limit = names.WORKLOAD_NAME_MAX
    if len(slug) > limit:
        digest = hashlib.sha256(base.encode()).hexdigest()[:6]
        slug = slug[: limit - 7].rstrip("-") + "-" + digest
    return slug


def _overrides(args: Mapping[str, Any]) -> dict[str, Any]:
    raw = args.get("overrides") or {}
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in _OVERRIDES:
            raise Invalid(
                f"override {key!r} is not supported on Kubernetes; "
                f"supported: {', '.join(sorted(_OVERRIDES))} "
                "(set other settings in the Recipe's defaults)"
            )
        out[_OVERRIDES[key]] = value
    return out


def _int(value: Any, what: str) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError) as error:
        raise Invalid(f"override {what} must be an integer, got {value!r}") from error
    if number < 1:
        raise Invalid(f"override {what} must be at least 1")
    return number


def _spec(
    ctx: OperationContext, args: Mapping[str, Any], recipe: RecipeSpec, *, cluster: str | None
) -> dict[str, Any]:
    """The InferenceWorkload spec (wire form) for a launch request."""
    overrides = _overrides(args)
    defaults = recipe.defaults or {}
    spec: dict[str, Any] = {"recipe": {"name": args["recipe"]}, "manager": ctx.manager}
    if cluster:
        spec["cluster"] = cluster
    if any(k in overrides for k in ("tensor_parallel", "pipeline_parallel")) or args.get("solo"):
        tp = _int(overrides.get("tensor_parallel", defaults.get("tensor_parallel", 1)), "tensor_parallel")
        pp = _int(
            overrides.get("pipeline_parallel", defaults.get("pipeline_parallel", 1)), "pipeline_parallel"
        )
        nodes = 1 if args.get("solo") else recipe.min_nodes
        if (tp * pp) % nodes:
            raise Invalid(
                f"tensor_parallel x pipeline_parallel ({tp * pp}) is not a multiple of {nodes} nodes"
            )
        spec["topology"] = {
            "nodes": nodes,
            "gpusPerNode": tp * pp // nodes,
            "tensorParallel": tp,
            "pipelineParallel": pp,
        }
    engine: dict[str, Any] = {}
    if "max_model_len" in overrides:
        engine["maxModelLen"] = _int(overrides["max_model_len"], "max_model_len")
    if "gpu_memory_utilization" in overrides:
        engine["gpuMemoryUtilization"] = float(overrides["gpu_memory_utilization"])
    if overrides.get("enable_sleep_mode"):
        engine["enableSleepMode"] = True
    if engine:
        spec["engine"] = engine
    if "served_model_name" in overrides:
        spec["model"] = {"name": recipe.model, "servedName": str(overrides["served_model_name"])}
        if recipe.model_revision:
            spec["model"]["revision"] = recipe.model_revision
    try:
        InferenceWorkloadSpec.model_validate(spec)
    except ValueError as error:
        raise Invalid(f"the request does not make a valid InferenceWorkload: {error}") from error
    return spec


async def _cluster_for(ctx: OperationContext, args: Mapping[str, Any], *, create: bool) -> str | None:
    hosts = args.get("hosts")
    if not hosts:
        cluster = args.get("cluster")
        if cluster:
            await kube.get_cluster(ctx.rest, cluster)
        return cluster or None
    members = sorted(dict.fromkeys(hosts))
    name = "hosts-" + hashlib.sha256("\0".join(members).encode()).hexdigest()[:10]
    if create and await ctx.rest.get(kube.CLUSTERS, name) is None:
        body = {
            "apiVersion": API_VERSION,
            "kind": INFERENCE_CLUSTER.kind,
            "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": MANAGED_BY}},
            "spec": {
                "nodes": {"names": members},
                "description": "Hosts of a daemon API launch: " + ", ".join(members),
            },
        }
        with contextlib.suppress(k8s_errors.AlreadyExists):  # NB: already there
            await ctx.rest.create(kube.CLUSTERS, body)
        await ctx.feedback(
            f"Created InferenceCluster {name} for hosts {', '.join(members)}", stage="placement"
        )
    return name


async def _ignored(ctx: OperationContext, args: Mapping[str, Any]) -> None:
    ignored = [key for key in _HOST_ONLY if key in args and key != "post_launch"]
    if ignored:
        await ctx.emit(
            "warning",
            {
                "message": "Ignored on Kubernetes (host execution settings): " + ", ".join(ignored),
                "ignored": ignored,
            },
        )


def _preview_id(
    ctx: OperationContext, recipe: Mapping[str, Any], name: str, uid: str | None
) -> tuple[str, str, str]:
    intent = (recipe.get("status") or {}).get("intentId") or ""
    if not re.fullmatch(r"[0-9a-f]{16}", intent):
        intent = hashlib.sha256(f"{ctx.namespace}/{name}".encode()).hexdigest()[:16]
    parts = (ctx.namespace, name, uid) if uid else (ctx.namespace, name)
    token = recipe_identity.placement_token_for(*parts)
    return recipe_identity.workload_id(intent, token), intent, token


async def _wait(
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


async def _by_id(ctx: OperationContext, workload_id: str) -> dict[str, Any]:
    for workload in await ctx.rest.list(kube.WORKLOADS, ctx.namespace):
        if kube.workload_id_of(workload) == workload_id or workload["metadata"]["name"] == workload_id:
            return workload
    raise NotFound(f"Unknown workload: {workload_id}")


async def _guarded(ctx: OperationContext, args: Mapping[str, Any], *, owner: bool) -> dict[str, Any]:
    workload = await _by_id(ctx, args["workload_id"])
    spec, status = workload.get("spec") or {}, workload.get("status") or {}
    recipe = (spec.get("recipe") or {}).get("name")
    if recipe != args["recipe"]:
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


# ---------------------------------------------------------------------------------------------
# Launch
# ---------------------------------------------------------------------------------------------


async def _plan(ctx: OperationContext, args: dict[str, Any]) -> dict[str, Any]:
    recipe_obj = await _recipe(ctx, args["recipe"])
    recipe = RecipeSpec.model_validate(recipe_obj.get("spec") or {})
    cluster = await _cluster_for(ctx, args, create=False)
    spec = _spec(ctx, args, recipe, cluster=cluster)
    name = _workload_name(args)
    resolution = resolve(workload=InferenceWorkloadSpec.model_validate(spec), recipe=recipe)
    if resolution.spec is None:
        raise Invalid("; ".join(issue.message for issue in resolution.errors) or "recipe cannot be served")
    effective = resolution.spec
    token = recipe_identity.placement_token_for(ctx.namespace, name)
    workload_id = recipe_identity.workload_id(effective.intent_id, token)
    hosts, _ = await kube.cluster_hosts(ctx.rest, hosts=args.get("hosts"), cluster=cluster)
    return {
        "name": name,
        "spec": spec,
        "recipe_obj": recipe_obj,
        "effective": effective,
        "hosts": hosts,
        "cluster": cluster,
        "workload_id": workload_id,
        "intent": effective.intent_id,
        "token": token,
        "issues": [issue.message for issue in resolution.issues],
    }


async def plan(ctx: OperationContext, args: dict[str, Any]) -> Any:
    planned = await _plan(ctx, args)
    effective = planned["effective"]
    return {
        "candidate_hosts": planned["hosts"],
        "host_list": planned["hosts"][: effective.topology.nodes],
        "is_solo": effective.topology.nodes == 1,
        "placement": None,
        "notes": [
            f"InferenceWorkload {planned['name']} in namespace {ctx.namespace}; the scheduler picks "
            f"{effective.topology.nodes} node(s) with {effective.topology.gpus_per_node} GPU(s) each",
            "The final workload id's placement token derives from the object's uid, known after creation",
            *planned["issues"],
        ],
        "scheduler_selector": planned["cluster"],
        "scheduler_defaulted": planned["cluster"] is None,
        "intent_id": planned["intent"],
        "placement_token": planned["token"],
        "workload_id": planned["workload_id"],
        "host_hardware": {},
        "override_resolution": dict(args.get("overrides") or {}),
        "offline": None,
        "hardware_assessment": None,
        "hardware_reported": False,
        "recipe_fingerprint": effective.recipe_revision or "",
        "recipe": args["recipe"],
        "runtime": "vllm",
        "cluster": planned["cluster"],
    }


async def materialize(ctx: OperationContext, args: dict[str, Any]) -> Any:
    from sparkrun_operator.render.workload import ServingInputs, render_jobset

    planned = await _plan(ctx, args)
    effective = planned["effective"]
    inputs = ServingInputs(spec=effective)
    jobset = render_jobset(
        namespace=ctx.namespace, workload=planned["name"], inputs=inputs, replica=0, suspend=False
    )
    units: list[dict[str, Any]] = []
    workers: list[dict[str, Any]] = []
    for rjob in jobset["spec"]["replicatedJobs"]:
        template = rjob["template"]["spec"]["template"]["spec"]
        container = next(c for c in template["containers"] if c["name"] == "vllm")
        count = int(rjob["template"]["spec"].get("completions") or 1) * int(rjob.get("replicas", 1))
        for index in range(count):
            unit_id = f"{rjob['name']}-{index}"
            units.append(
                {
                    "id": unit_id,
                    "index": len(units),
                    "host": "",
                    "devices": [f"nvidia.com/gpu:{effective.topology.gpus_per_node}"],
                    "image": container["image"],
                    "image_digest": "",
                    "command": [*container.get("command", []), *container.get("args", [])],
                    "mounts": [
                        {
                            "source": v.get("name", ""),
                            "target": v.get("mountPath", ""),
                            "read_only": bool(v.get("readOnly")),
                        }
                        for v in container.get("volumeMounts", [])
                    ],
                }
            )
            workers.append(
                {
                    "id": unit_id,
                    "unit": unit_id,
                    "service": planned["name"],
                    "process_slot": 0,
                    "device_slots": list(range(effective.topology.gpus_per_node)),
                }
            )
    return {
        "format": 1,
        "kind": "kubernetes.jobset",
        "workload_id": planned["workload_id"],
        "engine": "vllm",
        "model": effective.model,
        "model_revision": effective.model_revision or "",
        "world_size": effective.topology.tensor_parallel * effective.topology.pipeline_parallel,
        "tensor_parallel": effective.topology.tensor_parallel,
        "node_count": effective.topology.nodes,
        "cache_dir": "",
        "units": units,
        "execution": {
            "workers": workers,
            "groups": [
                {
                    "id": jobset["metadata"]["name"],
                    "kind": "jobset",
                    "service": planned["name"],
                    "members": [u["id"] for u in units],
                }
            ],
            "services": [{"id": planned["name"], "role": "leader", "workers": [w["id"] for w in workers]}],
            "adapter": {"schema": "jobset.x-k8s.io/v1alpha2", "digest": "", "payload": jobset},
        },
    }


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
        workload_id, intent, _ = _preview_id(ctx, recipe_obj, name, meta.get("uid"))
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
        "placement_token": _placement_token(workload_id),
        "already_running": already,
        "recipe_fingerprint": revision,
        "runtime": "vllm",
        "scheduler": "kubernetes",
    }


async def _launch(
    ctx: OperationContext, args: dict[str, Any], *, confirm: bool
) -> tuple[dict[str, Any], dict[str, Any], bool, list[str]]:
    """Create (or find) the workload; returns (object, recipe object, already running, hosts)."""
    recipe_obj = await _recipe(ctx, args["recipe"])
    recipe = RecipeSpec.model_validate(recipe_obj.get("spec") or {})
    name = _workload_name(args)
    problem = names.check_workload_name(workload=name, nodes=recipe.max_nodes or recipe.min_nodes)
    if problem:
        raise Invalid(problem)
    cluster = await _cluster_for(ctx, args, create=False)
    spec = _spec(ctx, args, recipe, cluster=cluster)
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
    cluster = await _cluster_for(ctx, args, create=True)
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
        if isinstance(error, k8s_errors.AlreadyExists):
            raise Conflict(f"InferenceWorkload {name} was created concurrently") from error
        if error.status in (400, 422):
            raise Invalid(f"InferenceWorkload {name} was refused: {error.message}") from error
        raise
    await ctx.feedback(f"Created InferenceWorkload {name}", stage="launch", activity="create")
    hosts, _ = await kube.cluster_hosts(ctx.rest, hosts=args.get("hosts"), cluster=cluster)
    return created, recipe_obj, False, hosts


async def run(ctx: OperationContext, args: dict[str, Any]) -> Any:
    await _ignored(ctx, args)
    if args.get("dry_run"):
        planned = await _plan(ctx, args)
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
    workload, recipe_obj, already, hosts = await _launch(ctx, args, confirm=bool(args.get("confirm")))
    name = workload["metadata"]["name"]
    try:
        if args.get("wait_ready", True):
            workload = await _wait(ctx, name, until="ready", limit=ctx.settings.ready_timeout)
        else:
            workload = await ctx.rest.get(kube.WORKLOADS, name, ctx.namespace) or workload
    finally:
        if args.get("collect_diagnostics"):
            from sparkrun_operator.ops.executors.diagnostics import collect_bundle

            await collect_bundle(ctx, {"workload_id": name})
    placed = await _placed_hosts(ctx, name)
    return _run_result(
        workload, recipe_obj=recipe_obj, hosts=placed or hosts, dry_run=False, already=already, ctx=ctx
    )


async def _placed_hosts(ctx: OperationContext, name: str) -> list[str]:
    """Nodes the workload's pods are bound to (leader first)."""
    from sparkrun_operator.k8s.client import PODS

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
    recipe_obj = await _recipe(ctx, args["recipe"])
    wanted = args.get("recipe_revision")
    name = _workload_name(args)
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
        existing, _, adopted, _ = await _launch(ctx, launch_args, confirm=False)
    ready = await _wait(ctx, name, until="ready", limit=timeout)
    return {
        "state": "ready",
        "workload_id": kube.workload_id_of(ready),
        "endpoint": endpoint_entry(ready, await recipe_specs(ctx), with_recipe=False),
        "adopted": adopted,
        "workload": workload_row(ready, ctx.manager),
        "observed_at": time.time(),
    }


# ---------------------------------------------------------------------------------------------
# Inventory and guarded lifecycle
# ---------------------------------------------------------------------------------------------


async def list_workloads(ctx: OperationContext, args: dict[str, Any]) -> Any:
    workloads = sorted(
        await ctx.rest.list(kube.WORKLOADS, ctx.namespace, cached=True),
        key=lambda w: str(w["metadata"].get("creationTimestamp", "")),
        reverse=True,
    )
    if "limit" in args:
        workloads = workloads[: args["limit"]]
    rows: list[dict[str, Any]] = []
    for workload in workloads:
        meta, spec, status = workload["metadata"], workload.get("spec") or {}, workload.get("status") or {}
        workload_id = kube.workload_id_of(workload)
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
                    "model": (spec.get("model") or {}).get("name"),
                    "recipe_revision": status.get("recipeRevision"),
                },
                "intent_id": status.get("intentId"),
                "placement_token": _placement_token(workload_id) or None,
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


async def status(ctx: OperationContext, args: dict[str, Any]) -> Any:
    return workload_row(await _guarded(ctx, args, owner=False), ctx.manager)


async def stop(ctx: OperationContext, args: dict[str, Any]) -> Any:
    workload = await _guarded(ctx, args, owner=True)
    name, uid = workload["metadata"]["name"], workload["metadata"].get("uid")
    await ctx.rest.delete(kube.WORKLOADS, name, ctx.namespace, uid=uid, propagation="Background")
    await ctx.feedback(f"Deleted InferenceWorkload {name}", stage="stop")
    await _wait(ctx, name, until="gone", limit=120.0)
    return {"state": "offline", "workload_ids": [args["workload_id"]]}


async def sleep(ctx: OperationContext, args: dict[str, Any]) -> Any:
    workload = await _guarded(ctx, args, owner=True)
    name = workload["metadata"]["name"]
    if not ((workload.get("spec") or {}).get("engine") or {}).get("enableSleepMode"):
        raise Conflict(
            f"InferenceWorkload {name} was not started with engine.enableSleepMode; it cannot sleep"
        )
    await ctx.rest.merge_patch(kube.WORKLOADS, name, {"spec": {"state": "Sleeping"}}, ctx.namespace)
    slept = await _wait(ctx, name, until="sleeping", limit=300.0)
    return workload_row(slept, ctx.manager)


async def wake(ctx: OperationContext, args: dict[str, Any]) -> Any:
    workload = await _guarded(ctx, args, owner=True)
    name = workload["metadata"]["name"]
    await ctx.rest.merge_patch(kube.WORKLOADS, name, {"spec": {"state": "Running"}}, ctx.namespace)
    woken = await _wait(ctx, name, until="ready", limit=ctx.settings.ready_timeout)
    return workload_row(woken, ctx.manager)


async def reconcile(ctx: OperationContext, args: dict[str, Any]) -> Any:
    workload = await _guarded(ctx, args, owner=True)
    name = workload["metadata"]["name"]
    patched = await ctx.rest.merge_patch(
        kube.WORKLOADS,
        name,
        {"metadata": {"annotations": {keys.ANNOTATION_RECONCILE_REQUESTED: str(time.time())}}},
        ctx.namespace,
    )
    return {"workload_id": args["workload_id"], "state": _state(patched), "receipts": 0}


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
    return _sweep(rows, mode="live", hosts=[])


def _sweep(
    endpoints_: list[dict[str, Any]], *, mode: str, hosts: list[str], errors: dict[str, str] | None = None
) -> dict[str, Any]:
    now = time.time()
    return {
        "sweep_id": hashlib.sha256(f"{now}".encode()).hexdigest()[:16],
        "observed_at": now,
        "mode": mode,
        "complete": not errors,
        "hosts": hosts,
        "covered_hosts": [h for h in hosts if h not in (errors or {})],
        "errors": errors or {},
        "endpoints": endpoints_,
    }


async def _selected(
    ctx: OperationContext, args: Mapping[str, Any]
) -> tuple[list[dict[str, Any]], list[str], kube.Occupancy]:
    """Workloads matching stop_matching/stop_all selectors, and the hosts they target."""
    seen = await kube.occupancy(ctx.rest)
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


async def stop_matching(ctx: OperationContext, args: dict[str, Any]) -> Any:
    if not any(args.get(k) for k in ("workload_id", "recipe", "hosts", "cluster")):
        raise Invalid("Provide workload_id, recipe, hosts or cluster to select the workloads to stop")
    _overrides(args)
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


EXECUTORS: dict[str, Executor] = {
    "workloads.run": run,
    "workloads.plan": plan,
    "workloads.materialize": materialize,
    "workloads.ensure_ready": ensure_ready,
    "workloads.list": list_workloads,
    "workloads.inventory": inventory,
    "workloads.status": status,
    "workloads.stop": stop,
    "workloads.sleep": sleep,
    "workloads.wake": wake,
    "workloads.reconcile": reconcile,
    "workloads.find_intent": find_intent,
    "workloads.plugins": plugins,
    "workloads.endpoints": endpoints,
    "workloads.stop_matching": stop_matching,
    "workloads.stop_all": stop_all,
}

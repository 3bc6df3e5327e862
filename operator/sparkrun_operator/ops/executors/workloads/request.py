"""Recipe resolution for a launch: the Recipe, the workload name, the overrides and the
InferenceWorkload spec a ``run``/``plan``/``ensure_ready`` request makes, and its placement."""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Mapping
from typing import Any, Final

from sparkrun_operator.api.meta import API_VERSION
from sparkrun_operator.api.recipe import RecipeSpec
from sparkrun_operator.api.resources import INFERENCE_CLUSTER
from sparkrun_operator.api.workload import InferenceWorkloadSpec
from sparkrun_operator.k8s import errors as k8s_errors
from sparkrun_operator.ops import kube
from sparkrun_operator.ops.errors import Invalid
from sparkrun_operator.ops.executors.recipe_lookup import find_recipe
from sparkrun_operator.ops.invocation import OperationContext
from sparkrun_operator.ops.settings import Settings
from sparkrun_operator.recipe import identity as recipe_identity
from sparkrun_operator.recipe.resolve import resolve
from sparkrun_operator.render import keys, names

MANAGED_BY = keys.MANAGED_BY_DAEMON_API


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
HOST_ONLY: Final = (
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


async def recipe_object(ctx: OperationContext, name: str) -> dict[str, Any]:
    """The Recipe a recipe argument names: its object name, ``@registry/name`` or a catalog name
    (``recipe_lookup.py``); a workload made from it names the object (``spec.recipe.name``)."""
    return await find_recipe(ctx, name)


def workload_name(args: Mapping[str, Any]) -> str:
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


def parse_overrides(args: Mapping[str, Any]) -> dict[str, Any]:
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


def check_launch(args: Mapping[str, Any], _settings: Settings | None = None) -> None:
    """What a launch, plan or render refuses before it reads its recipe: override keys that have
    no meaning on Kubernetes (the daemon API answers 422 at submission)."""
    parse_overrides(args)


def _int(value: Any, what: str) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError) as error:
        raise Invalid(f"override {what} must be an integer, got {value!r}") from error
    if number < 1:
        raise Invalid(f"override {what} must be at least 1")
    return number


def workload_spec(
    ctx: OperationContext,
    args: Mapping[str, Any],
    recipe: RecipeSpec,
    *,
    cluster: str | None,
    recipe_name: str | None = None,
) -> dict[str, Any]:
    """The InferenceWorkload spec (wire form) for a launch request; ``recipe_name``: the Recipe
    object's name (default: the argument, when it is one)."""
    overrides = parse_overrides(args)
    defaults = recipe.defaults or {}
    spec: dict[str, Any] = {"recipe": {"name": recipe_name or args["recipe"]}, "manager": ctx.manager}
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
    if ctx.settings.workload_scheduling:
        spec["scheduling"] = dict(ctx.settings.workload_scheduling)
    try:
        InferenceWorkloadSpec.model_validate(spec)
    except ValueError as error:
        raise Invalid(f"the request does not make a valid InferenceWorkload: {error}") from error
    return spec


async def cluster_for(ctx: OperationContext, args: Mapping[str, Any], *, create: bool) -> str | None:
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
        with contextlib.suppress(k8s_errors.KubeAlreadyExists):  # NB: already there
            await ctx.rest.create(kube.CLUSTERS, body)
        await ctx.feedback(
            f"Created InferenceCluster {name} for hosts {', '.join(members)}", stage="placement"
        )
    return name


async def warn_ignored(ctx: OperationContext, args: Mapping[str, Any]) -> None:
    ignored = [key for key in HOST_ONLY if key in args and key != "post_launch"]
    if ignored:
        await ctx.emit(
            "warning",
            {
                "message": "Ignored on Kubernetes (host execution settings): " + ", ".join(ignored),
                "ignored": ignored,
            },
        )


def preview_id(
    ctx: OperationContext, recipe: Mapping[str, Any], name: str, uid: str | None
) -> tuple[str, str, str]:
    intent = (recipe.get("status") or {}).get("intentId") or ""
    if not re.fullmatch(r"[0-9a-f]{16}", intent):
        intent = hashlib.sha256(f"{ctx.namespace}/{name}".encode()).hexdigest()[:16]
    parts = (ctx.namespace, name, uid) if uid else (ctx.namespace, name)
    token = recipe_identity.placement_token_for(*parts)
    return recipe_identity.workload_id(intent, token), intent, token


async def plan_request(ctx: OperationContext, args: dict[str, Any]) -> dict[str, Any]:
    recipe_obj = await recipe_object(ctx, args["recipe"])
    recipe = RecipeSpec.model_validate(recipe_obj.get("spec") or {})
    cluster = await cluster_for(ctx, args, create=False)
    spec = workload_spec(ctx, args, recipe, cluster=cluster, recipe_name=recipe_obj["metadata"]["name"])
    name = workload_name(args)
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

"""What several executor families share: the endpoint of a workload and the sweep shape.

Used by ``workloads.*``, ``discovery.*``/diagnostics and the proxy executors; it imports no
executor module, so none of them import each other for these helpers.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from typing import Any

from sparkrun_operator.api.recipe import RecipeSpec
from sparkrun_operator.api.workload import ENGINE_PORT, InferenceWorkloadSpec
from sparkrun_operator.ops import kube
from sparkrun_operator.ops.context import OperationContext
from sparkrun_operator.recipe.resolve import resolve
from sparkrun_operator.render import names


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


def sweep(
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
